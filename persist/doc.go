// Package persist is railmq's store: Badger under the data dir, written by
// one committer goroutine that groups every write submitted since its last
// fsync into one batch and one fsync (group commit), then reports each
// batch durable. It stores opaque records (definitions, messages, queue
// entries) and knows nothing of channels or methods. It imports badger and
// zap only.
//
// Files: store.go (opening and closing), batch.go (what a commit writes),
// commit.go (the committer: group commit, reference counts of shared
// message records; a batch Badger would refuse fails alone), txn.go
// (atomic batches: one Badger transaction each, for tx.commit), wal.go
// (fsyncing a memtable WAL that rotated during a round, which Badger's
// Sync misses), read.go (reads, queued on the committer behind the
// writes before them), recover.go (start-up summaries and orphan
// clean-up), gc.go (value-log GC), keys.go (the key and value layout),
// delayed.go (delayed messages indexed by due time: read straight from
// Badger by the registry's delayer, recovered at start-up), space.go (the
// free-space reserve that keeps Badger's mmaps off a full disk),
// pageout_linux.go (giving Badger's cold pages back to the kernel),
// metrics.go (the committer's histograms and the store's size, read by
// the metrics collector), spill.go (non-durable queues' paged messages in
// plain append-only files, dropped at every start).
//
// keys.go names every key prefix the store holds, definition kinds
// included (exchanges, queues, bindings, and the broker's vhosts, users,
// permissions, topic permissions, policies and operator policies): no
// other package writes a key of its own. A cluster node's Raft logs live
// in their own Badger databases (cluster/logstore.go), not here.
// The committer goroutine owns the Badger write batch and the reference
// counts; recovery (RecoverQueue) fills the counts before the first Commit.
package persist
