// Command railmq-perf is a load generator for AMQP 0-9-1 brokers in the
// manner of RabbitMQ's PerfTest. It is built on amqp091-go, so it drives
// RabbitMQ and railmq alike, and it imports nothing from railmq.
//
// # Engines
//
// --engine amqp091 (the default) runs producers and consumers on
// amqp091-go. --engine frames runs them over raw sockets with the tool's
// own frame codec (frames.go): pre-encoded publishes patched in place and
// written in batches, deliveries parsed in place from a large bufio.Reader,
// acks written once per read batch, no allocation per message; declares
// and idle connections still use amqp091-go. It takes the same flags except
// amqps:// URIs, and writes the same report. Both report the tool's own CPU
// time (getrusage) as perf_cpu_s and perf_cpu_us_per_msg, so a run shows
// whether the client or the broker was the bottleneck.
//
// Every producer and consumer has its own connection and channel. Each body
// starts with a 20-byte big-endian header: producer id (uint32), sequence
// number (uint64) and send time in Unix nanoseconds (int64); the rest is
// padding up to --size. Consumers use the header to measure latency (receive
// time minus send time, so both ends share a clock) and to verify delivery
// per queue and producer:
//
//   - lost: sequence numbers below the highest one received that never
//     arrived (nacked and returned publishes are not expected);
//   - unreceived: published after the highest one received and never
//     delivered, typically a backlog still queued when the run ended;
//   - duplicated: a (producer, seq) pair delivered twice on one queue without
//     the redelivered flag;
//   - out_of_order: a first delivery below the highest sequence number the
//     same consumer already had from that producer;
//   - redelivered: deliveries flagged redelivered, never counted as
//     duplicates.
//
// # Topology
//
// With --exchange-type direct (the default) the tool declares the durable
// direct exchange perf.direct and queues PREFIX-1..PREFIX-N (--queues),
// each bound with its own name as routing key. Producer i publishes to queue
// i mod N and consumer j consumes queue j mod N. With --exchange-type fanout
// it declares perf.fanout and binds --fanout-queues queues (default
// --queues), so each queue receives every message; consumers spread over them.
// Queues are durable iff --persistent and deleted at the end unless --keep,
// --predeclared, or --consumers 0 (which keeps the backlog for a later
// --drain run). Exchanges are never deleted. Publishes are mandatory, so
// unroutable messages come back and are counted as returned.
//
// # Streams
//
// With --queue-type stream the queues are declared durable as streams
// (--queue-args adds x-max-length-bytes and the like), every consumer sets
// a prefetch (500 by default: streams refuse consumers without one) and
// --stream-offset as x-stream-offset, and acks are credit. Every consumer
// of a stream reads every message, so each consumer is checked on its own:
// lost, unreceived, duplicated and out_of_order are per consumer, summed.
// With an absolute offset a consumer expects each producer's messages from
// the first one it received. --replay publishes --pmessages per producer
// with confirms, waits for every confirm, and only then sends the
// consumers' basic.consume; the run ends when each has every message. The
// report's "stream" object has the replay rate (all consumers' deliveries
// over the time from their start to the last delivery), each consumer's
// rate and counts, and with --replay and --broker-pid the broker's CPU per
// message in the publishing and the replay phase.
//
// # Ending a run
//
// Producers stop after --duration, or after --pmessages each when that is
// given without --duration. Consumers then keep going until every published
// message has arrived, for at most 30s with --pmessages and 5s otherwise.
// SIGINT stops the producers and allows 2s of draining; a second SIGINT ends
// the run at once. With --drain (and --producers 0) the run ends when no
// message arrived for 2s and a passive queue.declare reports every queue
// empty.
//
// # Output
//
// A progress line goes to stderr every second. At the end one JSON line goes
// to stdout with the configuration and every figure; without --json a short
// summary precedes it. Rates are messages per second: publish_rate over the
// publishing time, consume_rate (deliveries) from the start to the last
// delivery. With --broker-pid the report adds the broker's CPU seconds and
// CPU microseconds per delivery during the run (utime+stime from
// /proc/PID/stat), per message published, its RSS (VmRSS sampled every
// second, VmHWM at the end) and the bytes it caused to be written to
// storage (write_bytes of /proc/PID/io), also per byte of body published.
//
// Exit status: 0 normally; 1 on a connection or setup error, or when any
// error was counted during the run (a connection or channel closed by the
// broker, a cancelled consumer, a foreign message, ...); 2 on bad flags; 3
// with --verify when messages were lost or duplicated, or, with --pmessages,
// still unreceived at the end.
//
// # Examples
//
// Ten seconds, one producer and one consumer, 1 KiB messages:
//
//	railmq-perf --size 1024 --prefetch 300 --multi-ack-every 50
//
// 20000 confirmed messages per producer, persistent, with the broker's cost:
//
//	railmq-perf --producers 2 --consumers 2 --persistent --confirm 256 \
//		--pmessages 20000 --broker-pid $(pgrep -f 'railmq --listen') --json
//
// Fanout to ten queues with one consumer each, 1000 msg/s:
//
//	railmq-perf --exchange-type fanout --fanout-queues 10 --consumers 10 \
//		--rate 1000 --duration 30s
//
// 5000 idle connections beside a light load, heartbeats every 5s:
//
//	railmq-perf --idle-connections 5000 --heartbeat 5s --rate 100 --duration 60s
//
// Build a backlog, then drain it with four consumers:
//
//	railmq-perf --consumers 0 --queues 4 --persistent --pmessages 250000 --confirm 1000
//	railmq-perf --producers 0 --consumers 4 --queues 4 --persistent --predeclared --drain
//
// Write a million messages into a stream, then time three consumers
// reading it from the start:
//
//	railmq-perf --engine frames --queue-type stream --replay --pmessages 1000000 \
//		--confirm 1024 --consumers 3 --prefetch 2000 --multi-ack-every 200
//
// A consumer on next at 5,000 msg/s, latency up to p99.9:
//
//	railmq-perf --queue-type stream --stream-offset next --rate 5000 --size 1024
package main
