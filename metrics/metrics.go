package metrics

import (
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/queue"
)

// Options configure the handler.
type Options struct {
	// Utilisation, if set, is a queue's consumer utilisation as of the
	// management plane's last sample (mgmt.API.ConsumerUtilisation):
	// rabbitmq_queue_consumer_utilisation. Nil: 0.
	Utilisation func(*queue.Queue) float64
}

// Handler serves GET /metrics and /metrics/per-object for srv, for
// --prometheus-listen (RabbitMQ's port is 15692). Like
// rabbitmq_prometheus it asks for no credentials.
func Handler(srv *broker.Server, opts Options) http.Handler {
	if opts.Utilisation == nil {
		opts.Utilisation = func(*queue.Queue) float64 { return 0 }
	}
	mux := http.NewServeMux()
	for path, perObject := range map[string]bool{"/metrics": false, "/metrics/per-object": true} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(&collector{s: srv, perObject: perObject, util: opts.Utilisation},
			collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mux.Handle("GET "+path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: zapPromLog{srv}}))
	}
	return mux
}

type zapPromLog struct{ s *broker.Server }

func (l zapPromLog) Println(v ...any) { l.s.Logger().Sugar().Warn(v...) }

// collector is an unchecked collector (Describe sends nothing): the
// families it has depend on what the broker holds.
type collector struct {
	s         *broker.Server
	perObject bool
	util      func(*queue.Queue) float64
}

func (*collector) Describe(chan<- *prometheus.Desc) {}

// Label values RabbitMQ uses.
const (
	protoLabel     = "amqp091"
	classicQueue   = "rabbit_classic_queue"
	rabbitVersions = broker.CompatVersion
)

// emitter sends const metrics, making their descriptions as it goes.
type emitter struct{ ch chan<- prometheus.Metric }

func (e emitter) metric(name, help string, t prometheus.ValueType, v float64, labels ...string) {
	var names, values []string
	for i := 0; i+1 < len(labels); i += 2 {
		names = append(names, labels[i])
		values = append(values, labels[i+1])
	}
	e.ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, names, nil), t, v, values...)
}

func (e emitter) gauge(name, help string, v float64, labels ...string) {
	e.metric(name, help, prometheus.GaugeValue, v, labels...)
}

func (e emitter) counter(name, help string, v int64, labels ...string) {
	e.metric(name, help, prometheus.CounterValue, float64(v), labels...)
}

func (e emitter) untyped(name, help string, v float64, labels ...string) {
	e.metric(name, help, prometheus.UntypedValue, v, labels...)
}

func (e emitter) histogram(name, help string, count uint64, sum float64, buckets map[float64]uint64, labels ...string) {
	var names, values []string
	for i := 0; i+1 < len(labels); i += 2 {
		names = append(names, labels[i])
		values = append(values, labels[i+1])
	}
	e.ch <- prometheus.MustNewConstHistogram(prometheus.NewDesc(name, help, names, nil), count, sum, buckets, values...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// queueFigures are one queue's (or the sum of every queue's) gauges.
type queueFigures struct {
	ready, unacked, readyBytes, unackedBytes int64
	consumers                                int64
	published                                int64
	deduplicated                             int64
}

func (f *queueFigures) add(q *queue.Queue) {
	rb, ub := q.Bytes()
	p, _, _, _ := q.Counters()
	f.ready += q.Ready()
	f.unacked += q.Unacked()
	f.readyBytes += rb
	f.unackedBytes += ub
	f.consumers += int64(q.Consumers())
	f.published += p
	f.deduplicated += q.Deduplicated()
}

func (f *queueFigures) emit(e emitter, labels ...string) {
	e.gauge("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers", float64(f.ready), labels...)
	e.gauge("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged", float64(f.unacked), labels...)
	e.gauge("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue depth", float64(f.ready+f.unacked), labels...)
	e.gauge("rabbitmq_queue_messages_bytes", "Size in bytes of ready and unacknowledged messages", float64(f.readyBytes+f.unackedBytes), labels...)
	e.gauge("rabbitmq_queue_messages_ready_bytes", "Size in bytes of ready messages", float64(f.readyBytes), labels...)
	e.gauge("rabbitmq_queue_messages_unacked_bytes", "Size in bytes of all unacknowledged messages", float64(f.unackedBytes), labels...)
	e.gauge("rabbitmq_queue_consumers", "Consumers on a queue", float64(f.consumers), labels...)
	e.counter("rabbitmq_queue_messages_published_total", "Total number of messages published to queues", f.published, labels...)
	e.counter("railmq_queue_messages_deduplicated_total", "Messages a deduplicating queue dropped as duplicates (x-message-deduplication)", f.deduplicated, labels...)
}

// Collect sends every family, in the order the node's figures are read:
// the node, connections and channels, queues, resources and alarms, the
// global message counters, then railmq's own (store, memory, cluster,
// flow).
func (m *collector) Collect(ch chan<- prometheus.Metric) {
	e := emitter{ch}
	ns := m.collectNode(e)
	conns := m.collectConnections(e)
	t := m.s.Totals()
	collectQueueChurn(e, t)
	consumers := m.collectQueues(e)
	collectResources(e, ns, len(conns))
	collectGlobal(e, t, consumers)
	collectLeases(e, t) // lease.go
	m.collectStore(e, ns)
	m.collectCluster(e)
	collectFlow(e, conns)
}

// collectNode sends the node's identity, versions and uptime, and returns
// its status for the families that follow.
func (m *collector) collectNode(e emitter) broker.NodeStatus {
	s := m.s
	node := s.NodeName()
	ns := s.Status()
	e.untyped("rabbitmq_identity_info", "RabbitMQ node & cluster identity info", 1,
		"rabbitmq_node", node, "rabbitmq_cluster", node, "rabbitmq_cluster_permanent_id", "railmq-cluster-"+node)
	e.untyped("rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info", 1,
		"rabbitmq_version", rabbitVersions, "prometheus_plugin_version", rabbitVersions,
		"prometheus_client_version", "client_golang", "erlang_version", runtime.Version(),
		"product_name", "railmq", "product_version", s.Version())
	e.gauge("rabbitmq_erlang_uptime_seconds", "Node uptime", time.Since(ns.Started).Seconds())
	return ns
}

// collectConnections sends the open connections and channels, their
// figures (channels.go) and their churn; it returns the connections.
func (m *collector) collectConnections(e emitter) []broker.Connection {
	s := m.s
	conns := s.Connections()
	chans := s.Channels()
	m.collectChannels(e, chans)
	m.collectConnTraffic(e, conns)
	e.gauge("rabbitmq_connections", "Connections currently open", float64(len(conns)))
	e.gauge("rabbitmq_channels", "Channels currently open", float64(len(chans)))
	churn := s.Churn()
	e.counter("rabbitmq_connections_opened_total", "Total number of connections opened", churn.ConnectionsOpened)
	e.counter("rabbitmq_connections_closed_total", "Total number of connections closed or terminated", churn.ConnectionsClosed)
	e.counter("rabbitmq_channels_opened_total", "Total number of channels opened", churn.ChannelsOpened)
	e.counter("rabbitmq_channels_closed_total", "Total number of channels closed", churn.ChannelsClosed)
	return conns
}

// collectQueueChurn sends the queues declared, created and deleted.
func collectQueueChurn(e emitter, t *queue.Totals) {
	e.counter("rabbitmq_queues_declared_total", "Total number of queues declared", t.QueuesDeclared.Load())
	e.counter("rabbitmq_queues_created_total", "Total number of queues created", t.QueuesCreated.Load())
	e.counter("rabbitmq_queues_deleted_total", "Total number of queues deleted", t.QueuesDeleted.Load())
}

// collectQueues sends the queues' figures, summed or (per object) one
// series each with the exchanges', then the counts of queues and
// consumers; it returns the consumers on every queue.
func (m *collector) collectQueues(e emitter) (consumers int64) {
	var all queueFigures
	var streams streamFigures
	nq, oldest := 0, 0.0
	now := queue.Now()
	for _, v := range m.s.VHosts() {
		vh := v.Name()
		for _, q := range v.Queues() {
			rep := m.s.QueueReplica(q)
			if rep.Kind == "remote" {
				continue // its home reports it, as RabbitMQ's node hosting a queue does: summed over the nodes, counted once
			}
			nq++
			age := 0.0
			if at := q.HeadEnqueuedAt(); at > 0 {
				age = max(0, float64(now-at)/1e9)
			}
			oldest = max(oldest, age)
			if !m.perObject {
				all.add(q)
				if st, ok := streamStats(q); ok {
					streams.add(&st)
				}
				continue
			}
			all.consumers += m.collectQueue(e, vh, q, rep, age)
		}
		if m.perObject {
			collectExchanges(e, vh, v)
		}
	}
	if !m.perObject {
		all.emit(e)
		streams.emit(e)
		e.gauge("railmq_queue_oldest_message_age_seconds", "Age of the oldest ready message of any queue (0 when none has one)", oldest)
	}
	e.gauge("rabbitmq_queues", "Queues available", float64(nq))
	e.gauge("rabbitmq_consumers", "Consumers currently connected", float64(all.consumers))
	return all.consumers
}

// collectQueue sends one queue's series (per object), its Raft figures if
// it is a quorum queue, and returns its consumers.
func (m *collector) collectQueue(e emitter, vh string, q *queue.Queue, rep broker.QueueReplica, age float64) int64 {
	var f queueFigures
	f.add(q)
	lv := []string{"vhost", vh, "queue", q.Name()}
	f.emit(e, lv...)
	e.gauge("rabbitmq_queue_consumer_utilisation", "Consumer utilisation", m.util(q), lv...)
	if at := q.HeadEnqueuedAt(); at > 0 {
		e.gauge("rabbitmq_queue_head_message_timestamp", "Timestamp of the first message in the queue, if any", float64(at/int64(time.Second)), lv...)
	}
	e.gauge("railmq_queue_oldest_message_age_seconds", "Age of the oldest ready message in the queue (0 when it has none)", age, lv...)
	e.gauge("railmq_queue_messages_held", "Messages held back for a retry delay (x-retry-delay): neither ready nor unacknowledged", float64(q.Held()), lv...)
	if st, ok := streamStats(q); ok {
		collectStream(e, &st, lv)
	}
	if rep.Kind == "quorum" {
		e.counter("rabbitmq_raft_term_total", "Current Raft term number", int64(rep.Term), lv...)
		e.gauge("rabbitmq_raft_log_commit_index", "Raft log commit index", float64(rep.Commit), lv...)
		e.gauge("rabbitmq_raft_log_last_applied_index", "Raft log last applied index", float64(rep.Applied), lv...)
		e.gauge("railmq_quorum_queue_leader", "1 while this node leads the quorum queue", b2f(rep.Leader), lv...)
	}
	return f.consumers
}

// collectExchanges sends the series of v's exchanges (per object); vh is
// v's name.
func collectExchanges(e emitter, vh string, v *broker.VHostInfo) {
	for _, x := range v.Exchanges() {
		e.gauge("railmq_exchange_bindings", "Bindings whose source is the exchange", float64(len(x.Bindings())),
			"vhost", vh, "exchange", x.Name, "type", x.Type())
		if x.Delayed {
			e.gauge("railmq_exchange_messages_delayed", "Messages a delayed exchange holds back", float64(x.MessagesDelayed()),
				"vhost", vh, "exchange", x.Name)
		}
		if x.Dedup != nil {
			e.counter("railmq_exchange_messages_deduplicated_total", "Messages a deduplication exchange dropped as duplicates",
				x.Dedup.Dropped.Load(), "vhost", vh, "exchange", x.Name)
		}
	}
}

// collectResources sends the node's resources and alarms.
func collectResources(e emitter, ns broker.NodeStatus, sockets int) {
	fdUsed, fdTotal := ns.FDUsed, ns.FDTotal
	e.gauge("rabbitmq_process_resident_memory_bytes", "Memory used in bytes", float64(ns.RSS))
	e.gauge("rabbitmq_resident_memory_limit_bytes", "Memory high watermark in bytes", float64(ns.Watermark))
	e.gauge("rabbitmq_disk_space_available_bytes", "Disk space available in bytes", float64(ns.DiskFree))
	e.gauge("rabbitmq_disk_space_available_limit_bytes", "Free disk space low watermark in bytes", float64(ns.DiskLimit))
	e.gauge("rabbitmq_process_open_fds", "Open file descriptors", float64(fdUsed))
	e.gauge("rabbitmq_process_max_fds", "Open file descriptors limit", float64(fdTotal))
	e.gauge("rabbitmq_process_open_tcp_sockets", "Open TCP sockets", float64(sockets))
	e.gauge("rabbitmq_process_max_tcp_sockets", "Open TCP sockets limit", float64(fdTotal*9/10))
	e.untyped("rabbitmq_alarms_memory_used_watermark", "is 1 if VM memory watermark alarm is in effect", b2f(ns.MemoryAlarm))
	e.untyped("rabbitmq_alarms_free_disk_space_watermark", "is 1 if free disk space watermark alarm is in effect", b2f(ns.DiskAlarm))
	e.untyped("rabbitmq_alarms_file_descriptor_limit", "is 1 if file descriptor limit alarm is in effect", 0)
}

// collectGlobal sends the message counts since start
// (rabbit_global_counters); consumers is the consumers on every queue.
func collectGlobal(e emitter, t *queue.Totals, consumers int64) {
	sum := t.Sum()
	p := []string{"protocol", protoLabel}
	pq := []string{"protocol", protoLabel, "queue_type", classicQueue}
	e.counter("rabbitmq_global_messages_received_total", "Total number of messages received from publishers", sum.Received, p...)
	e.counter("rabbitmq_global_messages_received_confirm_total", "Total number of messages received from publishers expecting confirmations", sum.ReceivedConfirm, p...)
	e.counter("rabbitmq_global_messages_routed_total", "Total number of messages routed to queues or streams", sum.Routed, p...)
	e.counter("rabbitmq_global_messages_unroutable_dropped_total", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable", sum.UnroutableDropped, p...)
	e.counter("rabbitmq_global_messages_unroutable_returned_total", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable", sum.UnroutableReturn, p...)
	e.counter("rabbitmq_global_messages_confirmed_total", "Total number of messages confirmed to publishers", sum.Confirmed, p...)
	manualC, autoC := sum.DeliveredConsume[0], sum.DeliveredConsume[1]
	manualG, autoG := sum.DeliveredGet[0], sum.DeliveredGet[1]
	e.counter("rabbitmq_global_messages_delivered_total", "Total number of messages delivered to consumers", manualC+autoC+manualG+autoG, pq...)
	e.counter("rabbitmq_global_messages_delivered_consume_manual_ack_total", "Total number of messages delivered to consumers using basic.consume with manual acknowledgment", manualC, pq...)
	e.counter("rabbitmq_global_messages_delivered_consume_auto_ack_total", "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment", autoC, pq...)
	e.counter("rabbitmq_global_messages_delivered_get_manual_ack_total", "Total number of messages delivered to consumers using basic.get with manual acknowledgment", manualG, pq...)
	e.counter("rabbitmq_global_messages_delivered_get_auto_ack_total", "Total number of messages delivered to consumers using basic.get with automatic acknowledgment", autoG, pq...)
	e.counter("rabbitmq_global_messages_get_empty_total", "Total number of times basic.get operations fetched no message", sum.GetEmpty, pq...)
	e.counter("rabbitmq_global_messages_redelivered_total", "Total number of messages redelivered to consumers", sum.Redelivered, pq...)
	e.counter("rabbitmq_global_messages_acknowledged_total", "Total number of messages acknowledged by consumers", sum.Acknowledged, pq...)
	for i, reason := range queue.DeadLetterReasons {
		name := "rabbitmq_global_messages_dead_lettered_" + reason + "_total"
		help := "Total number of messages dead-lettered due to " + reason
		for j, strategy := range [2]string{"disabled", "at_most_once"} {
			e.counter(name, help, t.DeadLettered[i][j].Load(), "queue_type", classicQueue, "dead_letter_strategy", strategy)
		}
	}
	e.gauge("rabbitmq_global_publishers", "Current number of publishers", float64(sum.Publishers), p...)
	e.gauge("rabbitmq_global_consumers", "Current number of consumers", float64(consumers), p...)
	count, size, buckets := sizeHistogram(&sum)
	e.histogram("rabbitmq_message_size_bytes", "Size of messages received from publishers", count, size, buckets, p...)
}

// collectStore sends railmq's own figures of the store and of memory.
func (m *collector) collectStore(e emitter, ns broker.NodeStatus) {
	s := m.s
	lsm, vlog := s.Store().Size()
	e.gauge("railmq_store_size_bytes", "Bytes of the message store on disk, by part (Badger's LSM tree and value log)", float64(lsm), "part", "lsm")
	e.gauge("railmq_store_size_bytes", "Bytes of the message store on disk, by part (Badger's LSM tree and value log)", float64(vlog), "part", "vlog")
	sm := s.Store().Metrics()
	c, sumB, b := sm.Batches.Snapshot()
	e.histogram("railmq_store_group_commit_batches", "Batches written by one group commit (one fsync)", c, sumB, b)
	c, sumB, b = sm.Fsync.Snapshot()
	e.histogram("railmq_store_fsync_seconds", "Duration of the store's fsyncs", c, sumB, b)
	c, sumB, b = sm.DelayedLate.Snapshot()
	e.histogram("railmq_delayed_routing_lateness_seconds", "How long after its due time each delayed message was routed", c, sumB, b)
	e.gauge("railmq_memory_held_bytes", "Bytes held for clients (queued bodies, content being assembled, transactions): what the memory alarm compares with the watermark", float64(ns.MemoryHeld))
	e.gauge("railmq_paging", "1 while memory is above the paging ratio of the watermark and every queue pages beyond a small window", b2f(ns.Paging))
}

// collectCluster sends the metadata group's figures, if the node is
// clustered.
func (m *collector) collectCluster(e emitter) {
	n := m.s.Cluster()
	if n == nil {
		return
	}
	st := n.Status()
	voters := 0
	for _, m := range st.Members {
		if m.Voter {
			voters++
		}
	}
	e.gauge("railmq_cluster_members", "Voting members of the cluster's metadata group, as this node knows them", float64(voters))
	e.gauge("railmq_cluster_leader", "1 while this node leads the metadata group", b2f(st.State == "Leader"))
	e.gauge("railmq_cluster_term", "The metadata group's Raft term", float64(st.Term))
	e.gauge("railmq_cluster_commit_index", "The metadata group's commit index, as this node knows it", float64(st.Commit))
	e.gauge("railmq_cluster_applied_index", "The metadata group's last entry applied on this node", float64(st.Applied))
	e.gauge("railmq_cluster_last_contact_seconds", "Since this follower last heard from the leader (0 on the leader, -1 never)", st.LastContact.Seconds())
}

// collectFlow sends how many connections are blocked, or in flow.
func collectFlow(e emitter, conns []broker.Connection) {
	blocked, flow := 0, 0
	for _, c := range conns {
		if c.Blocked {
			blocked++
		} else if c.InFlow {
			flow++
		}
	}
	e.gauge("railmq_connections_blocked", "Connections held back by a resource alarm (state blocked)", float64(blocked))
	e.gauge("railmq_connections_flow", "Connections held back by flow control within the last second (state flow)", float64(flow))
}

func sizeHistogram(t *queue.Sums) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(queue.SizeBuckets))
	var c uint64
	for i, b := range queue.SizeBuckets {
		c += uint64(t.Sizes[i])
		buckets[float64(b)] = c
	}
	c += uint64(t.Sizes[len(queue.SizeBuckets)])
	return c, float64(t.SizeSum), buckets
}
