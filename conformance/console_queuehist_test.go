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
	_, err = ch.QueueDeclare("hist-list", false, false, false, false, nil)
	must(t, err)
	for range 4 {
		must(t, ch.Publish("", "hist-list", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	// 3 messages for 6 s, then 5 for 6 s: the page asks for samples 5 s
	// apart (lengths_incr=5, as RabbitMQ's UI for 10 minutes).
	for range 3 {
		must(t, ch.Publish("", "hist-look", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return spanOf(totalsSamples(a), 3+4) >= 6000 }, "6 s of 3 messages (and hist-list's 4)")
	for range 2 {
		must(t, ch.Publish("", "hist-look", false, false, rmq.Publishing{Body: []byte("x")}))
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return spanOf(totalsSamples(a), 5+4) >= 6000 }, "6 s of 5 messages (and hist-list's 4)")

	br.login(url, "guest", "guest")
	br.waitText("#total-queues", 10*time.Second, func(s string) bool { return s == "2" }, "the overview")
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

	// The queues list, first seen now: hist-list's History sparkline
	// starts from the broker's samples (one request with lengths_age for
	// the queues this tab had not seen), not from this look alone.
	br.run("the queues list over the last minute", js(`localStorage.setItem('railmq.range', '60'); window.__listOpened = Date.now(); true`),
		chromedp.Navigate(url+"#/queues"), chromedp.WaitVisible(chromedp.CSS(`#range`)))
	// The ring's oldest sample of hist-list predates the list's first
	// look by seconds: it came from the broker.
	waitJS(br, 20*time.Second, `(() => { const r = histSeries('/', 'hist-list').ready; return r.length >= 3 && r[0][0] < window.__listOpened - 2000 })()`,
		"hist-list's history starts before the list was opened")
	sparkPoints := `(() => { const tr = [...document.querySelectorAll('#queues tbody tr')].find(r => r.textContent.includes('hist-list'));
		const c = tr && tr.querySelector('canvas.spark'); return c ? Number(c.dataset.points) : 0 })()`
	waitJS(br, 20*time.Second, sparkPoints+` >= 3`, "hist-list's sparkline draws them")
	br.shot("queue-list-history-first-look")
	br.noErrors()
}
