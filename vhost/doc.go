// Package vhost is the registry of one virtual host: its exchanges, queues
// and bindings, and the rules for declaring, binding and deleting them
// (with RabbitMQ's reply codes and texts). It imports amqp, auth,
// exchange, queue and persist (and zap); channels call it, never the
// reverse.
//
// What it owns:
//   - the registry (vhost.go): which exchanges and queues exist, lookups,
//     and the shutdown of every queue;
//   - declare and delete of exchanges (exchanges.go), queues (queues.go)
//     and bindings (bindings.go), with the queue arguments' validation in
//     RabbitMQ's order and words (args.go) and the equivalence a redeclare
//     must show (equivalence.go);
//   - routing a publish through exchanges, exchange-to-exchange bindings
//     and alternate exchanges to a set of queues (route.go), and handing a
//     message to that set with its record stored once (fanout.go);
//   - dead-lettering: the x-death header and the republish to a queue's
//     dead-letter exchange (deadletter.go);
//   - delayed messages (x-delayed-message exchanges): holding them in the
//     store by due time and routing them when due, on one goroutine per
//     vhost (delayed.go);
//   - exchange-level deduplication (x-message-deduplication exchanges),
//     its cache and the cache's records in the store (dedup.go);
//   - policies and operator policies: which one applies to a queue or
//     exchange and what it sets (policies.go);
//   - in a cluster, the cluster-wide definitions of classic queues homed on
//     one node (classic.go) and of quorum queues (quorum.go): declares are
//     proposed to the metadata store and applied on every node, which
//     makes its handle of the queue through the Quorum interface the
//     replica package implements;
//   - durable definitions: their encoding in the store, the queues' view of
//     the store (store.go), and recovery at start-up (recover.go).
//
// Locks: VHost.defMu, then VHost.mu, both in LOCKS.md with their order
// against the exchange, queue, channel and store locks. defMu serializes
// definition changes so the store receives them in the registry's order
// (a declare, bind or delete waits for its write once it released defMu);
// mu guards the exchanges and queues maps and is read-held while routing.
// Neither is held while waiting on a queue goroutine: queues call back into
// the registry (auto-delete, expiry, dead-lettering) from their own
// goroutines. Functions named *Locked expect v.mu held.
//
// Who calls it: broker creates the vhost, recovers it from the store and
// closes it; replica gives it its cluster's queue kinds (SetQuorum) and
// applies replicated definitions; channel declares, binds, deletes, looks up queues and routes
// publishes; queues call back through the functions the registry gives
// them in their queue.Config (OnEmptyOfConsumers, and the policy's
// OnExpire and DeadLetter). It must not import channel, replica or broker.
package vhost
