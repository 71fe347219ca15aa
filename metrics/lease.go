package metrics

import "github.com/railmq/railmq/queue"

// collectLeases sends the counts of leases and retries workers asked for
// with publishes to amq.railmq.lease and amq.railmq.retry
// (docs/leases.md), broker-wide as the rabbitmq_global_ counters are.
func collectLeases(e emitter, t *queue.Totals) {
	e.counter("railmq_global_lease_extensions_total", "Ack deadlines extended by a publish to amq.railmq.lease", t.LeasesExtended.Load())
	e.counter("railmq_global_retries_scheduled_total", "Deliveries returned for a delayed redelivery by a publish to amq.railmq.retry", t.RetriesScheduled.Load())
	e.counter("railmq_global_lease_refused_total", "Publishes to amq.railmq.lease or amq.railmq.retry refused (unknown tag, malformed key or header)", t.LeasesRefused.Load())
}
