// Package metrics is railmq's Prometheus collector: metrics under
// rabbitmq_prometheus's names, types and labels (RabbitMQ 3.10.8's, with
// 4.x's rabbitmq_message_size_bytes), so that the dashboards and alerts
// written for RabbitMQ (Grafana's RabbitMQ-Overview, 10991) work
// unchanged; and railmq's own under railmq_. Handler serves them for
// --prometheus-listen.
//
// Everything is read from the broker's state when scraped, through the
// broker's admin API (broker/admin.go): the hot path only adds to atomic
// counters (queue.Totals, the queues' counters, the store's histograms).
//
// /metrics aggregates, as RabbitMQ's default endpoint does: queue figures
// are sums over every queue. /metrics/per-object has the same families,
// with the queue ones per queue (labels vhost, queue), plus per exchange
// (vhost, exchange) and per stream consumer (vhost, queue, consumer_tag:
// stream.go).
//
// It imports broker, queue and the Prometheus client; never channel (the
// broker's admin API says what a channel holds) nor mgmt (the consumer
// utilisation the management plane samples comes in through Options).
package metrics
