// Package exchange owns routing for one exchange: it maps a routing key and
// message headers to the set of destinations (queues, or exchanges for
// exchange-to-exchange bindings) bound to it, with RabbitMQ's semantics for
// the direct, fanout, topic and headers kinds, and for x-consistent-hash as
// RabbitMQ's consistent-hash plugin routes (chash.go, erlhash.go).
//
// It keeps no registry: which exchanges and queues exist, declare and delete
// rules, following exchange-to-exchange chains and persistence belong to
// vhost/. It imports only amqp and the standard library, and must not import
// queue, vhost, channel, persist or broker.
//
// Route is the hot path. It is lock-free and does not allocate when the out
// slice has capacity: every Exchange keeps an immutable routing snapshot
// behind an atomic pointer that writers replace copy-on-write. Nothing in it
// is copied whole per change: the topic trie and its child maps are
// persistent (path-copying), and the direct table swaps one bucket chain. So
// a Bind costs O(1) to O(log n), and recovering tens of thousands of
// bindings stays linear rather than quadratic.
package exchange
