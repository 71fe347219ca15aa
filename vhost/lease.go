package vhost

// The exchanges a worker publishes to, on the channel it consumes on, to
// extend a delivery's ack deadline (LeaseExchange) or to have it
// redelivered after a delay (RetryExchange); channel/lease.go takes such
// a publish before any routing. They are pre-declared in every vhost, as
// amq.direct is: a client cannot declare or delete an amq.* name, and
// they take no bindings (nothing is ever routed through them).
const (
	LeaseExchange = "amq.railmq.lease"
	RetryExchange = "amq.railmq.retry"
)
