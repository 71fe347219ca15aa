// Package federation is RabbitMQ's federation plugin as an AMQP client:
// Upstream is a federation-upstream parameter's value (the JSON map of
// PUT /api/parameters/federation-upstream/{vhost}/{name}, validated with
// rabbit_federation_parameters.erl's texts, v3.10.8), Set resolves a
// federation-upstream-set (or "all"), ExchangeLink federates a downstream
// exchange from an upstream one and QueueLink a downstream queue from an
// upstream queue, each reconnecting after reconnect-delay and reporting
// RabbitMQ's link states (starting, running, error with a reason).
//
// It knows nothing of the broker or the management API: the downstream is
// reached through interfaces the broker implements (Publisher, Bindings,
// Demand) and the upstream through a Dialer (AMQPDialer over TCP or TLS
// by default, shovel's URI parsing). It imports amqp091-go, zap and shovel
// only (internal/lint/layout_test.go).
//
// One goroutine per link owns its session (the upstream connection, the
// bindings made upstream, the deliveries not yet acked); Link.mu guards
// only the status it publishes.
package federation
