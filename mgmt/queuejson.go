package mgmt

import (
	"strconv"
	"time"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/queue"
)

// A queue in a list is written straight into the answer's buffer: the
// same object as queueJSON builds, keys in json.Marshal's order, without
// building the map (GET /api/queues over 100,000 queues built 113 objects
// a queue for the collector to chase). queueJSON stays the reference: the
// test TestQueueAppendMatchesMarshal holds the two to the same bytes.

// queueRow is a queue's row in a list.
type queueRow struct {
	l  *queueList
	st *broker.VHostInfo
	q  *queue.Queue
}

// queueList is what a list's queue rows share.
type queueList struct {
	a    *API
	node string // a.srv.NodeName(), once for the list
	// samples: the list was asked for each queue's history (lengths_age
	// ..., as RabbitMQ's list answers them), over age every incr.
	samples   bool
	age, incr time.Duration
}

func (r *queueRow) object() map[string]any { return r.l.a.queueJSON(r.st.Name(), r.q, false) }

// shown adds the queue's samples to a row written, when the list was
// asked for them (rowShower).
func (r *queueRow) shown(m map[string]any) {
	if r.l.samples {
		addSamples(m, r.l.a.queueHistory(r.q, r.l.age, r.l.incr))
	}
}

// appendObject appends the queue's object; a queue that replication
// describes (quorum, homed on another node) is built as a map and
// encoded, as DescribeQueue adds its own keys.
func (r *queueRow) appendObject(b []byte) ([]byte, error) {
	a, q := r.l.a, r.q
	c := q.Config()
	if c.Replica != nil || r.l.samples {
		m := r.object()
		r.shown(m)
		return appendJSON(b, m)
	}
	vh := r.st.Name()
	ready, unacked, held := q.Ready(), q.Unacked(), q.Held()
	consumers := q.Consumers()
	p, d, ak, rd := q.Counters()
	var rates [4]float64
	a.qstats.mu.Lock()
	if ns := a.qstats.m[q]; ns != nil {
		rates = ns.rates
	}
	a.qstats.mu.Unlock()
	util := a.ConsumerUtilisation(q)
	rb, ub := q.Bytes()
	ap := r.st.AppliedPolicy(q)
	at := q.HeadEnqueuedAt()

	var err error
	b = append(b, `{"arguments":`...)
	if len(c.Args) == 0 {
		b = append(b, "{}"...)
	} else if b, err = appendJSON(b, jsonTable(c.Args)); err != nil {
		return b, err
	}
	b = append(b, `,"auto_delete":`...)
	b = strconv.AppendBool(b, c.AutoDelete)
	b = append(b, `,"consumer_utilisation":`...)
	if b, err = appendJSONFloat(b, util); err != nil {
		return b, err
	}
	b = append(b, `,"consumers":`...)
	b = strconv.AppendInt(b, int64(consumers), 10)
	b = append(b, `,"durable":`...)
	b = strconv.AppendBool(b, c.Durable)
	b = append(b, `,"effective_policy_definition":`...)
	if ap.Effective == nil {
		b = append(b, "{}"...)
	} else if b, err = appendJSON(b, ap.Effective); err != nil {
		return b, err
	}
	b = append(b, `,"exclusive":`...)
	b = strconv.AppendBool(b, c.Exclusive)
	b = append(b, `,"exclusive_consumer_tag":null`...)
	if at != 0 {
		b = append(b, `,"head_message_timestamp":`...)
		b = strconv.AppendInt(b, at/int64(time.Second), 10)
		b = append(b, `,"head_message_timestamp_age_seconds":`...)
		if b, err = appendJSONFloat(b, queue.Since(at).Seconds()); err != nil {
			return b, err
		}
	}
	b = append(b, `,"message_bytes":`...)
	b = strconv.AppendInt(b, rb+ub, 10)
	b = append(b, `,"message_bytes_ready":`...)
	b = strconv.AppendInt(b, rb, 10)
	b = append(b, `,"message_bytes_unacknowledged":`...)
	b = strconv.AppendInt(b, ub, 10)
	b = append(b, `,"message_stats":`...)
	if b, err = appendMessageStats(b, [4]int64{p, d, ak, rd}, rates); err != nil {
		return b, err
	}
	b = append(b, `,"messages":`...)
	b = strconv.AppendInt(b, ready+unacked+held, 10)
	if n, ok := dedupShown(q); ok {
		b = append(b, `,"messages_deduplicated":`...)
		b = strconv.AppendInt(b, n, 10)
	}
	b = append(b, `,"messages_details":{"rate":0},"messages_held":`...)
	b = strconv.AppendInt(b, held, 10)
	b = append(b, `,"messages_ready":`...)
	b = strconv.AppendInt(b, ready, 10)
	b = append(b, `,"messages_ready_details":{"rate":0},"messages_unacknowledged":`...)
	b = strconv.AppendInt(b, unacked, 10)
	b = append(b, `,"messages_unacknowledged_details":{"rate":0},"name":`...)
	b = appendJSONString(b, c.Name)
	b = append(b, `,"node":`...)
	b = appendJSONString(b, r.l.node)
	b = append(b, `,"operator_policy":`...)
	b = appendNullIfEmpty(b, ap.OperatorPolicy)
	b = append(b, `,"policy":`...)
	b = appendNullIfEmpty(b, ap.Policy)
	b = append(b, `,"state":"running","type":"classic","vhost":`...)
	b = appendJSONString(b, vh)
	return append(b, '}'), nil
}

// appendMessageStats appends messageStats' object (counts and rates
// indexed publish, deliver_get, ack, redeliver), keys in order.
func appendMessageStats(b []byte, n [4]int64, rates [4]float64) ([]byte, error) {
	var err error
	b = append(b, '{')
	for i, k := range [4]int{2, 1, 0, 3} { // ack, deliver_get, publish, redeliver
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, messageStatsKeys[k]...)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, n[k], 10)
		b = append(b, `,"`...)
		b = append(b, messageStatsKeys[k]...)
		b = append(b, `_details":{"rate":`...)
		if b, err = appendJSONFloat(b, float64(int64(rates[k]*10))/10); err != nil {
			return b, err
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

var messageStatsKeys = [4]string{"publish", "deliver_get", "ack", "redeliver"}

func appendNullIfEmpty(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendJSONString(b, s)
}
