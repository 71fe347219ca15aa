// Package stream is the storage of streams (x-queue-type stream): an
// append-only log of records, each at an offset (0, 1, 2, ...), kept in
// segment files of railmq's own beside the broker's Badger store and read
// sequentially by any number of readers, each at its own offset.
//
// A segment file holds chunks: a group of records written and fsynced
// together (one group commit), with a header carrying its first offset,
// record count, first timestamp, a checksum of header and records and a
// Bloom filter of its records' filter values (x-stream-filter-value), as
// RabbitMQ's osiris chunks do, so that the same files can serve the
// RabbitMQ Stream protocol. Each segment has an index file beside it: one
// fixed-size entry per chunk (first offset, timestamp, position), a
// sparse index for seeking by offset or by time. Retention deletes whole
// segments, oldest first, once the log is over its byte limit or a
// segment is older than its age limit; the first offset moves with them.
// Recovery after a crash checks the tail of the last segment (its last
// indexed chunk and anything written after it) and truncates it to the
// last whole chunk; nothing else is read, so a large log opens at once.
//
// The package imports only the standard library and zap: it knows
// nothing of queues or AMQP (a record's data is opaque).
package stream
