package metrics

import (
	"github.com/railmq/railmq/queue"
)

// Streams (x-queue-type stream): what a stream's Replica reports of
// itself (queue.StreamStater).
//
// RabbitMQ 3.10.8's rabbitmq_prometheus has no family of its own for
// streams (its /metrics and /metrics/per-object, read with a stream
// declared, show a stream only as a queue: rabbitmq_queue_messages and
// the others, and as queue_type="rabbit_stream_queue" on the global
// counters). RabbitMQ 4.3.5's has two
// (prometheus_rabbitmq_core_metrics_collector.erl): rabbitmq_stream_segments,
// a counter in its queue_metrics (per queue per object, summed on
// /metrics), and rabbitmq_stream_consumer_max_offset_lag, a gauge (per
// queue per object, the highest of every consumer on /metrics). railmq
// serves both under those names, types and labels, and its own under
// railmq_stream_.

// streamFigures are the sums over every stream (/metrics).
type streamFigures struct {
	segments, bytes, published, deleted int64
	maxLag                              uint64
}

// add adds st to the sums.
func (f *streamFigures) add(st *queue.StreamStats) {
	f.segments += int64(st.Segments)
	f.bytes += st.Bytes
	f.published += st.Published
	f.deleted += st.SegmentsDeleted
	f.maxLag = max(f.maxLag, maxLag(st))
}

func maxLag(st *queue.StreamStats) uint64 {
	var m uint64
	for _, c := range st.Consumers {
		m = max(m, c.Lag)
	}
	return m
}

// streamStats are q's figures if it is a stream.
func streamStats(q *queue.Queue) (queue.StreamStats, bool) {
	ss, ok := q.Config().Replica.(queue.StreamStater)
	if !ok {
		return queue.StreamStats{}, false
	}
	return ss.StreamStats(), true
}

const (
	helpSegments       = "Total number of stream segment files"
	helpMaxLag         = "Highest consumer offset lag"
	helpDiskBytes      = "Bytes of the stream's segment files and indexes on disk"
	helpPublished      = "Messages appended to the stream since this node started it"
	helpSegmentsDelete = "Segments deleted by retention (x-max-length-bytes, x-max-age) since this node started the stream"
)

// emit sends the sums (/metrics).
func (f *streamFigures) emit(e emitter) {
	e.counter("rabbitmq_stream_segments", helpSegments, f.segments)
	e.gauge("rabbitmq_stream_consumer_max_offset_lag", helpMaxLag, float64(f.maxLag))
	e.gauge("railmq_stream_disk_bytes", helpDiskBytes, float64(f.bytes))
	e.counter("railmq_stream_published_total", helpPublished, f.published)
	e.counter("railmq_stream_segments_deleted_total", helpSegmentsDelete, f.deleted)
}

// collectStream sends one stream's series (per object): lv are its
// labels (vhost, queue). Its consumers' series are labelled with their
// tag too; two consumers with one tag (on two channels) make one series,
// the one further behind.
func collectStream(e emitter, st *queue.StreamStats, lv []string) {
	e.counter("rabbitmq_stream_segments", helpSegments, int64(st.Segments), lv...)
	e.gauge("rabbitmq_stream_consumer_max_offset_lag", helpMaxLag, float64(maxLag(st)), lv...)
	e.gauge("railmq_stream_disk_bytes", helpDiskBytes, float64(st.Bytes), lv...)
	e.counter("railmq_stream_published_total", helpPublished, st.Published, lv...)
	e.counter("railmq_stream_segments_deleted_total", helpSegmentsDelete, st.SegmentsDeleted, lv...)
	e.gauge("railmq_stream_first_offset", "The first offset the stream keeps", float64(st.First), lv...)
	e.gauge("railmq_stream_next_offset", "The offset the stream's next message gets (its last is one less)", float64(st.Next), lv...)
	if st.FirstTimestamp != 0 {
		e.gauge("railmq_stream_first_timestamp_seconds", "When the first message the stream keeps was appended (unix seconds, to the millisecond)", float64(st.FirstTimestamp)/1e3, lv...)
	}
	if st.LastTimestamp != 0 {
		e.gauge("railmq_stream_last_timestamp_seconds", "When the stream's last message was appended (unix seconds, to the millisecond)", float64(st.LastTimestamp)/1e3, lv...)
	}
	byTag := make(map[string]queue.StreamConsumer, len(st.Consumers))
	tags := make([]string, 0, len(st.Consumers))
	for _, c := range st.Consumers {
		if o, ok := byTag[c.Tag]; !ok || c.Lag > o.Lag {
			if !ok {
				tags = append(tags, c.Tag)
			}
			byTag[c.Tag] = c
		}
	}
	for _, tag := range tags {
		c := byTag[tag]
		cl := append(lv[:len(lv):len(lv)], "consumer_tag", tag)
		e.gauge("railmq_stream_consumer_offset", "The next offset the consumer reads", float64(c.Offset), cl...)
		e.gauge("railmq_stream_consumer_offset_lag", "Offsets between the consumer's next and the stream's next", float64(c.Lag), cl...)
	}
}
