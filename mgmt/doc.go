// Package mgmt is railmq's management plane: the subset of RabbitMQ's
// management HTTP API that clients, their test suites and operators'
// tools use, and the web console, for one broker.
//
// It owns the HTTP router and the access rules (mgmtauth.go: who may log
// in and use what, RabbitMQ's tags), the JSON views of connections,
// channels, vhosts, users, permissions, policies, limits, queues,
// exchanges and bindings (the AMQP table ↔ JSON conversion included;
// streams and their consumers' offsets: stream.go),
// RabbitMQ's list parameters (mgmtlist.go), publish, get, peek and DLQ
// redrive (redrive.go), definitions import and export (definitions.go,
// also --load-definitions), the health checks, the cluster routes, the
// message rates and their history (mgmtstats.go: a sampler goroutine
// from New until Close), and the console's static files with the
// start-up page served while the broker recovers (console.go).
//
// It reaches the broker only through the broker's admin API
// (broker/admin.go) and the vhosts' registries (*vhost.VHost) that API
// hands out; it never imports channel (a channel's state belongs to its
// connection's reader: the admin API copies what may be shown) nor
// metrics.
package mgmt
