package conformance

import (
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/mgmt"
)

type histSamples []struct {
	Sample    float64
	Timestamp int64
}

type histQueue struct {
	Messages        int64
	MessagesDetails struct {
		Samples histSamples
	} `json:"messages_details"`
	MessagesReadyDetails struct {
		Samples histSamples
	} `json:"messages_ready_details"`
	MessageStats struct {
		PublishDetails struct {
			Samples histSamples
		} `json:"publish_details"`
	} `json:"message_stats"`
}

// totalsSamples is the broker's totals' depth history (GET /api/overview
// with lengths_age): asking it does not ask for any queue's.
func totalsSamples(a *api) histSamples {
	var o struct {
		QueueTotals struct {
			MessagesDetails struct {
				Samples histSamples
			} `json:"messages_details"`
		} `json:"queue_totals"`
	}
	a.call("GET", "/api/overview?lengths_age=60", "guest", "guest", nil, &o)
	return o.QueueTotals.MessagesDetails.Samples
}

func countSample(s histSamples, v float64) int {
	n := 0
	for _, p := range s {
		if p.Sample == v {
			n++
		}
	}
	return n
}

// A queue's depth and rates history is kept from its first sample, so the
// first GET with lengths_age, by a client that never asked for the queue
// before, shows how it got where it is (RabbitMQ keeps every queue's
// samples too: asked for the first time 25 s after a message was
// published to a new queue, 3.10.8 answered
// /api/queues/%2F/hist-probe?lengths_age=60&lengths_incr=5 with 13
// messages_details.samples 5 s apart, newest first, from
// {"sample":1,"timestamp":1796601815000} to the empty queue's
// {"sample":0,"timestamp":1796601755000}).
func TestQueueHistoryFromFirstLook(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	b.Management(mgmt.Options{StatsInterval: 100 * time.Millisecond}) // what newAPI serves
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("hist-first", false, false, false, false, nil)
	must(t, err)
	publish := func(n int) {
		for range n {
			must(t, ch.Publish("", "hist-first", false, false, rmq.Publishing{Body: []byte("x")}))
		}
	}
	// 3 messages for several samples (the totals' history shows when),
	// then 2 more.
	publish(3)
	testutil.Eventually(t, 20*time.Second, func() bool { return countSample(totalsSamples(a), 3) >= 6 }, "the totals show 3 messages for 6 samples")
	publish(2)
	testutil.Eventually(t, 20*time.Second, func() bool { return countSample(totalsSamples(a), 5) >= 2 }, "the totals show 5 messages")

	var q histQueue
	if code := a.call("GET", "/api/queues/%2F/hist-first?lengths_age=60&lengths_incr=0&msg_rates_age=60", "guest", "guest", nil, &q); code != 200 {
		t.Fatalf("GET the queue: %d", code)
	}
	s := q.MessagesDetails.Samples
	if len(s) < 3 || s[0].Sample != 5 || countSample(s, 3) == 0 {
		t.Fatalf("the first look at the queue: messages_details.samples %+v, want newest 5, and 3 before", s)
	}
	for i := 1; i < len(s); i++ {
		if s[i].Timestamp >= s[i-1].Timestamp || s[i].Sample > s[i-1].Sample {
			t.Fatalf("samples not newest first, or the depth fell while only publishing: %+v", s)
		}
	}
	if r := q.MessagesReadyDetails.Samples; len(r) != len(s) || r[0].Sample != 5 {
		t.Errorf("messages_ready_details.samples %+v", r)
	}
	// Counts are cumulative, as RabbitMQ's samples are: 5 published now.
	if p := q.MessageStats.PublishDetails.Samples; len(p) != len(s) || p[0].Sample != 5 || p[len(p)-1].Sample > 3 {
		t.Errorf("message_stats.publish_details.samples %+v, want 5 newest, at most 3 oldest", p)
	}
	// The list answers each row's samples too, as RabbitMQ's list does
	// with the same parameters (the console's queues list draws them at
	// its first look), also a page of it with columns.
	var list []histQueue
	if code := a.call("GET", "/api/queues/%2F?lengths_age=60&lengths_incr=0", "guest", "guest", nil, &list); code != 200 || len(list) != 1 {
		t.Fatalf("GET the list: %d, %d rows", code, len(list))
	}
	if l := list[0].MessagesDetails.Samples; len(l) < len(s) || l[0].Sample != 5 || countSample(l, 3) == 0 {
		t.Errorf("the list's row: messages_details.samples %+v, want those of the queue's own GET %+v", l, s)
	}
	var page struct{ Items []histQueue }
	if code := a.call("GET", "/api/queues/%2F?page=1&page_size=10&columns=name,messages_ready_details&lengths_age=60&lengths_incr=0", "guest", "guest", nil, &page); code != 200 || len(page.Items) != 1 {
		t.Fatalf("GET a page: %d, %+v", code, page)
	}
	if r := page.Items[0].MessagesReadyDetails.Samples; len(r) < len(s) || r[0].Sample != 5 {
		t.Errorf("the page's row: messages_ready_details.samples %+v", r)
	}
	// Sorted by a field (every row built to sort, the samples added to
	// the rows written only).
	list = nil
	if code := a.call("GET", "/api/queues/%2F?sort=messages&lengths_age=60&lengths_incr=0", "guest", "guest", nil, &list); code != 200 || len(list) != 1 || len(list[0].MessagesDetails.Samples) < len(s) {
		t.Errorf("the sorted list: %d %+v", code, list)
	}
	// Without the parameters the list has no samples (nor their cost).
	list = nil
	a.call("GET", "/api/queues/%2F", "guest", "guest", nil, &list)
	if len(list) != 1 || len(list[0].MessagesDetails.Samples) != 0 {
		t.Errorf("the plain list: %+v", list)
	}
}

// A queue's history is a bounded ring: at a 50 ms sample interval, one
// slot per 100 ms and 60 slots (10 minutes of 10 s steps at the default
// 5 s), however long the queue lives and however much is asked for.
func TestQueueHistoryBounded(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	b.Management(mgmt.Options{StatsInterval: 50 * time.Millisecond})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("hist-ring", false, false, false, false, nil)
	must(t, err)
	must(t, ch.Publish("", "hist-ring", false, false, rmq.Publishing{Body: []byte("x")}))
	get := func() histSamples {
		var q histQueue
		a.call("GET", "/api/queues/%2F/hist-ring?lengths_age=600", "guest", "guest", nil, &q)
		return q.MessagesDetails.Samples
	}
	testutil.Eventually(t, 60*time.Second, func() bool { return len(get()) >= 60 }, "the ring fills: %d samples", len(get()))
	first := get()
	// Later samples push the oldest out.
	testutil.Eventually(t, 60*time.Second, func() bool {
		s := get()
		if len(s) > 60 {
			t.Fatalf("%d samples kept, want at most 60", len(s))
		}
		return s[len(s)-1].Timestamp > first[len(first)-1].Timestamp && s[0].Timestamp > first[0].Timestamp+2000
	}, "the ring moves on")
	if s := get(); len(s) > 60 || s[0].Sample != 1 {
		t.Fatalf("%d samples, newest %v; want at most 60, 1 message", len(s), s[0].Sample)
	}
}

// A deleted queue's history goes with it: a queue declared again under
// its name starts with none of the old one's samples (and, empty and
// idle, with none at all: it costs no history).
func TestQueueHistoryDeletedQueue(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	b.Management(mgmt.Options{StatsInterval: 100 * time.Millisecond})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("hist-del", false, false, false, false, nil)
	must(t, err)
	for range 7 {
		must(t, ch.Publish("", "hist-del", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	get := func() histQueue {
		var q histQueue
		a.call("GET", "/api/queues/%2F/hist-del?lengths_age=600", "guest", "guest", nil, &q)
		return q
	}
	testutil.Eventually(t, 20*time.Second, func() bool { return countSample(get().MessagesDetails.Samples, 7) >= 2 }, "the queue's history shows its 7 messages")
	_, err = ch.QueueDelete("hist-del", false, false, false)
	must(t, err)
	_, err = ch.QueueDeclare("hist-del", false, false, false, false, nil)
	must(t, err)
	// Samples of the totals after the new queue's first: 0 messages.
	testutil.Eventually(t, 20*time.Second, func() bool {
		s := totalsSamples(a)
		return len(s) >= 3 && s[0].Sample == 0 && s[1].Sample == 0 && s[2].Sample == 0
	}, "the totals show no messages")
	q := get()
	if q.Messages != 0 || countSample(q.MessagesDetails.Samples, 7) != 0 || len(q.MessagesDetails.Samples) != 0 {
		t.Fatalf("the new queue's history %+v, want no samples", q.MessagesDetails.Samples)
	}
	if p := q.MessageStats.PublishDetails.Samples; len(p) != 0 {
		t.Fatalf("the new queue's publish samples %+v, want none", p)
	}
}
