// Package queue is a message queue: its messages in FIFO order (by
// priority lane when x-max-priority is set), its consumers and their
// dispatch under prefetch, acknowledgements and requeues to the original
// position, TTLs, length limits, delivery limits and dead-lettering, and the
// paging of a durable queue's backlog to the store.
//
// One goroutine owns a queue's state; other goroutines reach it through a
// batched inbox. It imports amqp (and zap) only, and reaches storage
// through the small Store interface declared here, in built-in types, so
// that persist satisfies it without importing this package. Routing (for
// dead-lettering) is a callback the registry provides.
package queue
