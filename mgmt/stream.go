package mgmt

import (
	"github.com/railmq/railmq/queue"
)

// Streams (x-queue-type stream) in the management API: what a stream's
// Replica reports of itself (queue.StreamStater), under RabbitMQ's names
// where it has them, under railmq_stream where it has none.
//
// RabbitMQ 3.10.8, asked for a stream with two consumers on one node
// (GET /api/queues/%2F/s), answers "type": "stream", "members" and
// "online" (the nodes), "leader", and "readers": {"rabbit@vm": 2}; its
// messages and messages_ready are the offsets the stream holds (the
// offset after the last less the first, rabbit_osiris_metrics.erl),
// messages_unacknowledged 0. RabbitMQ 4.3.5 adds "segments" and
// "first_timestamp" (rabbit_osiris_metrics.erl STATISTICS_KEYS;
// rabbit_stream_queue.erl i(segments), i(first_timestamp): osiris
// counters, the timestamp in milliseconds). Its stream protocol's
// consumers (rabbitmq_stream_management, rabbit_stream_metrics.erl)
// carry "offset" and "offset_lag"; railmq gives its 0-9-1 consumers of a
// stream the same two.

// describeStream adds a stream's keys to m, the queue as the API shows
// it, if q is a stream; node is this node's name. Keys that replication
// set already (members, online, leader of a replicated stream) are kept.
func describeStream(m map[string]any, q *queue.Queue, node string) {
	ss, ok := q.Config().Replica.(queue.StreamStater)
	if !ok {
		return
	}
	st := ss.StreamStats()
	m["type"] = "stream"
	for k, v := range map[string]any{"members": []string{node}, "online": []string{node}, "leader": node} {
		if _, set := m[k]; !set {
			m[k] = v
		}
	}
	// Its length as the same read of the log gives it: the counts the
	// queue publishes are refreshed on the manager's tick, and a page
	// showing both read 0 messages beside a last offset of 29.
	m["messages"], m["messages_ready"] = int64(st.Next-st.First), int64(st.Next-st.First)
	m["readers"] = map[string]int{node: len(st.Consumers)}
	m["segments"] = st.Segments
	m["first_timestamp"] = st.FirstTimestamp
	m["railmq_stream"] = streamObject(st)
}

// streamObject is railmq's own figures of a stream: offsets (last_offset
// null while it holds none), its size on disk, its timestamps (unix ms,
// 0 for none) and its counters since this node started it.
func streamObject(st queue.StreamStats) map[string]any {
	var last any
	if st.Next > st.First {
		last = st.Next - 1
	}
	return map[string]any{"first_offset": st.First, "next_offset": st.Next, "last_offset": last,
		"segments": st.Segments, "disk_bytes": st.Bytes, "first_timestamp": st.FirstTimestamp,
		"last_timestamp": st.LastTimestamp, "published": st.Published, "segments_deleted": st.SegmentsDeleted,
		"consumers": len(st.Consumers)}
}

// streamIndex finds the streams a list of consumers reads, once each:
// their consumers' offsets by tag.
type streamIndex struct {
	a       *API
	queues  map[string]map[string]*queue.Queue // vhost → name → queue, filled per vhost when first asked
	readers map[*queue.Queue]map[string][]queue.StreamConsumer
}

func newStreamIndex(a *API) *streamIndex {
	return &streamIndex{a: a, queues: map[string]map[string]*queue.Queue{}, readers: map[*queue.Queue]map[string][]queue.StreamConsumer{}}
}

// consumer reports the stream consumer tagged tag on queue qname of vh:
// false if the queue is no stream, or if more than one of its consumers
// has the tag (two channels may use one tag; the two are then not told
// apart, and neither is given an offset).
func (ix *streamIndex) consumer(vh, qname, tag string) (queue.StreamConsumer, bool) {
	qs, ok := ix.queues[vh]
	if !ok {
		qs = map[string]*queue.Queue{}
		if st := ix.a.srv.LookupVHost(vh); st != nil {
			for _, q := range st.Queues() {
				if _, ok := q.Config().Replica.(queue.StreamStater); ok {
					qs[q.Name()] = q
				}
			}
		}
		ix.queues[vh] = qs
	}
	q := qs[qname]
	if q == nil {
		return queue.StreamConsumer{}, false
	}
	byTag, ok := ix.readers[q]
	if !ok {
		byTag = map[string][]queue.StreamConsumer{}
		for _, c := range q.Config().Replica.(queue.StreamStater).StreamStats().Consumers {
			byTag[c.Tag] = append(byTag[c.Tag], c)
		}
		ix.readers[q] = byTag
	}
	if cs := byTag[tag]; len(cs) == 1 {
		return cs[0], true
	}
	return queue.StreamConsumer{}, false
}

// describeStreamConsumer adds to m, a consumer as the API shows it, its
// offset in the stream it reads (the next it is given), how far it is
// behind the stream's end, and its server-side tracking name if it has
// one (railmq's own).
func describeStreamConsumer(m map[string]any, c queue.StreamConsumer) {
	m["offset"] = c.Offset
	m["offset_lag"] = c.Lag
	if c.Tracking != "" {
		m["railmq_offset_tracking"] = c.Tracking
	}
}
