// Package shovel moves messages from a queue (or an exchange) on one AMQP
// 0-9-1 broker to a queue or exchange on another, as RabbitMQ's shovel
// plugin does: Config is a dynamic shovel's value (the JSON map of
// PUT /api/parameters/shovel/{vhost}/{name}, parsed and validated as
// rabbit_shovel_parameters.erl does), Shovel runs one, reconnecting after
// reconnect-delay, and Status reports RabbitMQ's states (starting,
// running, terminated with a reason) with counts.
//
// It knows nothing of the broker or the management API: connections come
// from a Dialer, so that the broker can give a local path for host-less
// URIs ("amqp://", "amqp:///vhost", RabbitMQ's local shovels) and the
// default one, AMQPDialer, goes over TCP or TLS with amqp091-go. It
// imports amqp091-go and zap only (internal/lint/layout_test.go).
//
// One goroutine per running shovel owns the session (both connections,
// the in-flight map of destination sequence numbers to source delivery
// tags); Shovel.mu guards only the status it publishes.
package shovel
