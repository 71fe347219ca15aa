// Package channel is the per-channel state machine: content assembly,
// publishing (routing, returns, confirms, transactions), consumers,
// prefetch, acknowledgements and requeueing. It imports vhost, queue,
// exchange and amqp, and writes through the FrameSink its connection
// provides.
//
// The connection's reader goroutine owns a channel: it calls HandleMethod,
// HandleContent and Close. Queues call Deliver with their exec held, on
// whichever goroutine holds it (queue/exec.go), and Cancelled on their own
// goroutine; both take c.mu. Confirms are tracked under c.cmu and sent by
// the connection's writer (confirms.go). LOCKS.md orders the locks.
//
// Memory: what a channel holds for its client before a queue takes it
// (the content being assembled, an uncommitted transaction's publishes
// and acks) is counted in Config.Memory, the broker's count that its
// memory alarm compares with the watermark, and given back when the
// message is routed (each queue then counts the body itself), rolled back
// or dropped, or the channel closes.
//
// Files: channel.go (the state and method dispatch), publish.go (content
// assembly, routing, returns, transactions), confirms.go, consume.go
// (consumers, deliveries, basic.get, consumer timeouts), acks.go
// (acknowledgements, requeues), reply.go (direct reply-to), txatomic.go
// (tx.commit in one atomic store write: the reader waits for its fsync).
package channel
