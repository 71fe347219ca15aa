// Package queue is a message queue: its messages in FIFO order (by
// priority lane when x-max-priority is set), its consumers and their
// dispatch under prefetch, acknowledgements and requeues to the original
// position, TTLs, length limits, delivery limits and dead-lettering, and the
// paging of a durable queue's backlog to the store.
//
// Whoever holds a queue's exec lock owns its state: the queue's goroutine,
// or a poster that finds the queue idle and applies the batched inbox
// itself (exec.go writes the model down: who may hold exec, which
// callbacks run under it and on which goroutines; no disk I/O happens
// under it). Files: queue.go (types and the API), exec.go (inbox and
// ownership), apply.go (ops), dispatch.go (consumers and delivery),
// expiry.go (TTL and x-expires timers), paging.go (store writes and
// reads), deadletter.go, retry.go (retry with backoff: requeues held back),
// tx.go (a transaction's part: prepared, held, then applied or dropped). It imports amqp (and zap) only, and reaches storage
// through the small Store interface declared here, in built-in types, so
// that persist satisfies it without importing this package. Routing (for
// dead-lettering) is a callback the registry provides.
package queue
