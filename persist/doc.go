// Package persist is railmq's store: Badger under the data dir, written by
// one committer goroutine that groups every write submitted since its last
// fsync into one batch and one fsync (group commit), then reports each
// batch durable. It stores opaque records (definitions, messages, queue
// entries) and knows nothing of channels or methods. It imports badger and
// zap only.
//
// Files: store.go (opening and closing), batch.go (what a commit writes),
// commit.go (the committer: group commit, reference counts of shared
// message records), read.go (reads, queued on the committer behind the
// writes before them), recover.go (start-up summaries and orphan
// clean-up), gc.go (value-log GC), keys.go (the key and value layout),
// delayed.go (delayed messages indexed by due time: read straight from
// Badger by the registry's delayer, recovered at start-up).
// The committer goroutine owns the Badger write batch and the reference
// counts; recovery (RecoverQueue) fills the counts before the first Commit.
package persist
