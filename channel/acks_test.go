package channel

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/queue"
)

// consuming opens channel 1 with a consumer (manual acks, no prefetch
// limit) of a fresh transient queue holding n messages, bodies "1" to
// "n", and waits until all n are delivered: delivery tags 1 to n.
func consuming(t *testing.T, n int) (*Channel, *queue.Queue, *sink) {
	t.Helper()
	s := &sink{}
	c := New(Config{Number: 1, Sink: s})
	q := queue.New(queue.Config{Name: "q"})
	t.Cleanup(func() {
		c.Close()
		_, _ = q.Delete(false, false)
		<-q.Done()
	})
	for i := 1; i <= n; i++ {
		if !q.Publish(&queue.Message{Body: []byte(strconv.Itoa(i))}) {
			t.Fatal("publish refused")
		}
	}
	// As consume does, without a vhost to look the queue up in.
	qc := &queue.Consumer{Tag: "ctag", Sink: c, Out: s}
	c.mu.Lock()
	c.consumers[qc.Tag] = &consumer{Consumer: qc, q: q}
	c.mu.Unlock()
	if err := q.Consume(qc); err != nil {
		t.Fatal(err)
	}
	q.Kick(qc, nil)
	poll.Eventually(t, 5*time.Second, func() bool { return len(s.deliveries()) == n }, "%d deliveries", n)
	return c, q, s
}

// entries lists c.unacked as "tag" or "tag done", in order, and checks
// the counters kept beside it.
func entries(t *testing.T, c *Channel) []string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	open := 0
	for i, u := range c.unacked {
		if i > 0 && u.tag <= c.unacked[i-1].tag {
			t.Errorf("unacked out of tag order: %d after %d", u.tag, c.unacked[i-1].tag)
		}
		if u.done {
			out = append(out, fmt.Sprintf("%d done", u.tag))
			continue
		}
		open++
		out = append(out, strconv.FormatUint(u.tag, 10))
	}
	if c.outstanding != open || c.globalUnacked != open {
		t.Errorf("outstanding %d, globalUnacked %d; %d entries not settled", c.outstanding, c.globalUnacked, open)
	}
	for _, x := range c.consumers {
		if x.Unacked != open {
			t.Errorf("consumer's unacked count %d; %d entries not settled", x.Unacked, open)
		}
	}
	return out
}

func ackOf(tag uint64) amqp.Method     { return &amqp.BasicAck{DeliveryTag: tag} }
func ackUpTo(tag uint64) amqp.Method   { return &amqp.BasicAck{DeliveryTag: tag, Multiple: true} }
func rejectOf(tag uint64) amqp.Method  { return &amqp.BasicReject{DeliveryTag: tag} }
func nackUpTo(tag uint64) amqp.Method  { return &amqp.BasicNack{DeliveryTag: tag, Multiple: true} }
func requeueOf(tag uint64) amqp.Method { return &amqp.BasicNack{DeliveryTag: tag, Requeue: true} }
func requeueUpTo(tag uint64) amqp.Method {
	return &amqp.BasicNack{DeliveryTag: tag, Multiple: true, Requeue: true}
}

// unknown is the 406 expected for a settle of tag by basic method id.
type unknown struct {
	tag    uint64
	method uint16
}

func unknownTag(tag uint64, method uint16) *unknown { return &unknown{tag, method} }

// TestSettle pins basic.ack, basic.nack and basic.reject to RabbitMQ's
// rules (rabbit_channel:collect_acks): the tag itself must be
// outstanding, also with multiple, or the channel is closed with 406
// "unknown delivery tag N" and nothing is settled; multiple settles every
// outstanding tag up to it; multiple with tag 0 settles all. Settled
// entries stay in the channel's list, in tag order, until every earlier
// one is settled too.
func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		ops     []amqp.Method
		fail    *unknown // for the last op; nil: all succeed
		entries []string
	}{
		{name: "ack one", n: 5, ops: []amqp.Method{ackOf(1)}, entries: []string{"2", "3", "4", "5"}},
		{name: "acks out of order wait for the front", n: 5, ops: []amqp.Method{ackOf(2), ackOf(4)},
			entries: []string{"1", "2 done", "3", "4 done", "5"}},
		{name: "the front settled: settled ones after it go", n: 5, ops: []amqp.Method{ackOf(2), ackOf(4), ackOf(1)},
			entries: []string{"3", "4 done", "5"}},
		{name: "most settled at once", n: 5, ops: []amqp.Method{ackOf(2), ackOf(3), ackOf(4), ackOf(1)},
			entries: []string{"5"}},
		{name: "all acked one by one", n: 5, ops: []amqp.Method{ackOf(5), ackOf(3), ackOf(1), ackOf(2), ackOf(4)}},
		{name: "multiple", n: 5, ops: []amqp.Method{ackUpTo(3)}, entries: []string{"4", "5"}},
		{name: "multiple over settled tags", n: 5, ops: []amqp.Method{ackOf(2), ackOf(3), ackUpTo(4)}, entries: []string{"5"}},
		{name: "multiple with tag 0 settles all", n: 5, ops: []amqp.Method{ackOf(3), ackUpTo(0)}},
		{name: "multiple with tag 0 and nothing outstanding", n: 0, ops: []amqp.Method{ackUpTo(0)}},
		{name: "nack multiple", n: 5, ops: []amqp.Method{nackUpTo(2)}, entries: []string{"3", "4", "5"}},
		{name: "reject without requeue", n: 5, ops: []amqp.Method{rejectOf(2)}, entries: []string{"1", "2 done", "3", "4", "5"}},
		{name: "tag 0 without multiple", n: 5, ops: []amqp.Method{ackOf(0)}, fail: unknownTag(0, 80),
			entries: []string{"1", "2", "3", "4", "5"}},
		{name: "unknown tag", n: 5, ops: []amqp.Method{ackOf(42)}, fail: unknownTag(42, 80),
			entries: []string{"1", "2", "3", "4", "5"}},
		{name: "nothing delivered", n: 0, ops: []amqp.Method{ackOf(1)}, fail: unknownTag(1, 80)},
		{name: "double ack", n: 5, ops: []amqp.Method{ackOf(3), ackOf(3)}, fail: unknownTag(3, 80),
			entries: []string{"1", "2", "3 done", "4", "5"}},
		{name: "double ack of the front", n: 5, ops: []amqp.Method{ackOf(1), ackOf(1)}, fail: unknownTag(1, 80),
			entries: []string{"2", "3", "4", "5"}},
		{name: "multiple up to a settled tag settles nothing", n: 5, ops: []amqp.Method{ackOf(3), ackUpTo(3)}, fail: unknownTag(3, 80),
			entries: []string{"1", "2", "3 done", "4", "5"}},
		{name: "multiple past the last tag settles nothing", n: 5, ops: []amqp.Method{ackUpTo(6)}, fail: unknownTag(6, 80),
			entries: []string{"1", "2", "3", "4", "5"}},
		{name: "reject of an unknown tag", n: 5, ops: []amqp.Method{rejectOf(7)}, fail: unknownTag(7, 90),
			entries: []string{"1", "2", "3", "4", "5"}},
		{name: "nack of an unknown tag", n: 5, ops: []amqp.Method{nackUpTo(9)}, fail: unknownTag(9, 120),
			entries: []string{"1", "2", "3", "4", "5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, q, _ := consuming(t, tc.n)
			for i, m := range tc.ops {
				err := c.HandleMethod(m)
				if i < len(tc.ops)-1 || tc.fail == nil {
					if err != nil {
						t.Fatalf("%s: %v", m.Name(), err)
					}
					continue
				}
				text := fmt.Sprintf("PRECONDITION_FAILED - unknown delivery tag %d", tc.fail.tag)
				var e *amqp.Error
				if !errors.As(err, &e) || e.Code != amqp.PreconditionFailed || e.Text != text ||
					e.ClassID != amqp.ClassBasic || e.MethodID != tc.fail.method {
					t.Fatalf("%s: got %v (%+v)\nwant 406 %q on 60/%d", m.Name(), err, e, text, tc.fail.method)
				}
			}
			if got := entries(t, c); fmt.Sprint(got) != fmt.Sprint(tc.entries) {
				t.Fatalf("unacked %v, want %v", got, tc.entries)
			}
			// The queue let go of what was settled (acked or discarded:
			// there is no dead-letter exchange) and holds the rest.
			open := 0
			for _, e := range tc.entries {
				if _, err := strconv.Atoi(e); err == nil {
					open++
				}
			}
			poll.Eventually(t, 5*time.Second, func() bool { return q.Unacked() == int64(open) && q.Ready() == 0 },
				"queue with %d unacked, 0 ready (has %d, %d)", open, q.Unacked(), q.Ready())
		})
	}
}

// TestSettleRequeue: a nack or reject with requeue returns the messages
// to the queue, which delivers them again, flagged redelivered, under new
// delivery tags, in their original order.
func TestSettleRequeue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      amqp.Method
		again   []string // bodies redelivered, in order
		entries []string
	}{
		{"nack one", requeueOf(2), []string{"2"}, []string{"1", "2 done", "3", "4", "5", "6"}},
		{"reject one", &amqp.BasicReject{DeliveryTag: 5, Requeue: true}, []string{"5"}, []string{"1", "2", "3", "4", "5 done", "6"}},
		{"nack multiple", requeueUpTo(3), []string{"1", "2", "3"}, []string{"4", "5", "6", "7", "8"}},
		{"nack all", requeueUpTo(0), []string{"1", "2", "3", "4", "5"}, []string{"6", "7", "8", "9", "10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, s := consuming(t, 5)
			if err := c.HandleMethod(tc.op); err != nil {
				t.Fatal(err)
			}
			poll.Eventually(t, 5*time.Second, func() bool { return len(s.deliveries()) == 5+len(tc.again) },
				"%d redeliveries", len(tc.again))
			for i, d := range s.deliveries()[5:] {
				if d.body != tc.again[i] || !d.Redelivered || d.DeliveryTag != uint64(6+i) || d.ConsumerTag != "ctag" {
					t.Errorf("redelivery %d: tag %d body %q redelivered %v, want tag %d body %q redelivered",
						i, d.DeliveryTag, d.body, d.Redelivered, 6+i, tc.again[i])
				}
			}
			if got := entries(t, c); fmt.Sprint(got) != fmt.Sprint(tc.entries) {
				t.Fatalf("unacked %v, want %v", got, tc.entries)
			}
		})
	}
}

// replicaStub marks a queue as a Replica's handle (AckWait's rule looks
// no further); the channel's close returns the delivery to it.
type replicaStub struct{ queue.Replica }

func (replicaStub) Requeue([]queue.Delivery, bool) {}
func (replicaStub) Kick(*queue.Consumer)           {}

// TestAckWait: the broker may read a channel's acks late only while each
// consumer has half its prefetch free, and never once the channel had a
// delivery from a queue whose state is elsewhere (a quorum queue).
func TestAckWait(t *testing.T) {
	c, _, _ := consuming(t, 4)
	if n, room, roomy := c.AckWait(); n != 4 || room != math.MaxInt32 || !roomy {
		t.Fatalf("AckWait = %d, %d, %v; want 4, MaxInt32, true (no prefetch limit)", n, room, roomy)
	}
	c.mu.Lock()
	qc := c.consumers["ctag"]
	qc.Prefetch = 20 // 4 unacked: 6 more keep half free
	c.mu.Unlock()
	if _, room, roomy := c.AckWait(); room != 6 || !roomy {
		t.Fatalf("AckWait room %d, roomy %v with 4 of 20 unacked; want 6, true", room, roomy)
	}
	c.mu.Lock()
	qc.Prefetch = 8 // 4 unacked: half free
	c.mu.Unlock()
	if _, room, roomy := c.AckWait(); room != 0 || !roomy {
		t.Fatalf("AckWait room %d, roomy %v with 4 of 8 unacked; want 0, true", room, roomy)
	}
	c.mu.Lock()
	qc.Prefetch = 7 // 4 of 7: less than half free
	c.mu.Unlock()
	if _, _, roomy := c.AckWait(); roomy {
		t.Fatal("roomy with 4 of 7 unacked")
	}
	c.mu.Lock()
	qc.Prefetch = 0
	rq := queue.New(queue.Config{Name: "qq", Replica: replicaStub{}})
	c.nextTag++
	c.track(rq, nil, queue.Delivery{Msg: &queue.Message{}}, 0)
	c.mu.Unlock()
	if n, _, roomy := c.AckWait(); n != 5 || roomy {
		t.Fatalf("AckWait = %d, %v after a quorum queue's delivery; want 5, false", n, roomy)
	}
}
