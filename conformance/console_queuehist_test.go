package conformance

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/mgmt"
)

// spanOf is how long (ms) the samples of value v cover.
func spanOf(s histSamples, v float64) int64 {
	lo, hi := int64(0), int64(0)
	for _, p := range s {
		if p.Sample != v {
			continue
		}
		if lo == 0 || p.Timestamp < lo {
			lo = p.Timestamp
		}
		hi = max(hi, p.Timestamp)
	}
	return hi - lo
}

// TestConsoleQueueHistoryFirstLook: a queue's page opened for the first
// time, by a console that has never listed the queue, plots the queue's
// depth as the broker kept it (every queue's history, from its first
// sample): the samples the page's first GET returned, none of them the
// console's own.
func TestConsoleQueueHistoryFirstLook(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	m := b.Management(mgmt.Options{StatsInterval: 100 * time.Millisecond})
	hs := httptest.NewServer(m.Handler())
	t.Cleanup(hs.Close)
	a := &api{t: t, url: hs.URL}
	url := hs.URL + "/?poll=300"

	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("hist-look", false, false, false, false, nil)
	must(t, err)
	// 3 messages for 6 s, then 5 for 6 s: the page asks for samples 5 s
	// apart (lengths_incr=5, as RabbitMQ's UI for 10 minutes).
	for range 3 {
		must(t, ch.Publish("", "hist-look", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return spanOf(totalsSamples(a), 3) >= 6000 }, "6 s of 3 messages")
	for range 2 {
		must(t, ch.Publish("", "hist-look", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return spanOf(totalsSamples(a), 5) >= 6000 }, "6 s of 5 messages")

	br.login(url, "guest", "guest")
	br.waitText("#total-queues", 10*time.Second, func(s string) bool { return s == "1" }, "the overview")
	br.run("the queue's page", chromedp.Navigate(url+"#/queues/%2F/hist-look"))
	waitJS(br, 20*time.Second, `document.querySelector('#plot-depth') && document.querySelector('#plot-depth').dataset.points !== undefined`, "the depth plot is drawn")
	// The broker's samples: 5 s apart over 12 s, at least 3 each for
	// ready and unacked; the console has seen the queue once at most.
	if pts := number(eval[string](br, `document.querySelector('#plot-depth').dataset.points`)); pts < 6 {
		t.Errorf("the depth plot at first look has %v points, want at least 3 for ready and 3 for unacked from the broker's history", pts)
	}
	if seen := eval[int](br, `histSeries('/', 'hist-look').ready.length`); seen > 1 {
		t.Errorf("the console's own ring had %d samples of the queue at first look, want at most 1", seen)
	}
	br.waitText("#q-ready", 10*time.Second, func(s string) bool { return s == "5" }, "the queue's depth")
	br.shot("queue-history-first-look")
	br.noErrors()
}
