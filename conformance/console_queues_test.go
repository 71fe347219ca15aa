package conformance

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
	"github.com/railmq/railmq/mgmt"
)

// TestConsoleQueuesPaged: with 5,000 queues the queues page asks the
// broker for one page of the fields it shows (page, page_size, name with
// use_regex, sort, columns=), not the whole list: each refresh is a
// small fraction of GET /api/queues (what the page fetched every 5 s
// before). Paging, the name filter and a sort by depth are the broker's.
// Each queue's depth is kept by the console from the list's refreshes
// (a bounded ring): the History column draws it, and a queue's page shows
// it from the first look, before the broker has sampled the queue once
// (its sampler here runs every 10 minutes). The time range chosen is
// what the plots ask the API for.
func TestConsoleQueuesPaged(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.Management(mgmt.Options{StatsInterval: 10 * time.Minute}).Handler())
	t.Cleanup(hs.Close)
	a := &api{t: t, url: hs.URL}
	url := hs.URL + "/?poll=300"
	const n = 5000
	var qs []map[string]any
	for i := 0; i < n; i++ {
		qs = append(qs, map[string]any{"name": fmt.Sprintf("q-%05d", i), "vhost": "/", "durable": false, "auto_delete": false,
			"arguments": map[string]any{"x-dead-letter-exchange": "dlx"}})
	}
	if c := a.call("POST", "/api/definitions", "guest", "guest", map[string]any{"queues": qs}, nil); c/100 != 2 {
		t.Fatalf("POST /api/definitions: %d", c)
	}
	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	for i := 0; i < 3; i++ {
		must(t, ch.Publish("", "q-04213", false, false, rmq.Publishing{Body: []byte("deep")}))
	}

	// What the page fetched at each refresh before: the whole list.
	req, _ := http.NewRequest("GET", hs.URL+"/api/queues", nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	whole, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(t, err)

	br.login(url, "guest", "guest")
	br.run("queues", chromedp.Navigate(url+"#/queues"))
	br.waitText("#queue-count", 30*time.Second, func(s string) bool { return s == "5,000 of 5,000 queues" }, "the count of all the queues")
	br.waitText("#queue-page", 10*time.Second, func(s string) bool { return s == "Page 1 of 50 (1–100)" }, "the first page")
	if rows := eval[int](br, `document.querySelectorAll('#queues tbody tr').length`); rows != 100 {
		t.Errorf("the first page shows %d rows, want 100", rows)
	}
	// Bytes per refresh: the page's own requests, as the browser saw them.
	br.run("count requests", js(`performance.setResourceTimingBufferSize(100000); performance.clearResourceTimings(); true`))
	waitJS(br, 30*time.Second, `performance.getEntriesByType('resource').filter(e => e.name.includes('/api/queues?')).length >= 3`, "three refreshes")
	sizes := eval[[]int](br, `performance.getEntriesByType('resource').filter(e => e.name.includes('/api/queues?')).map(e => e.encodedBodySize)`)
	page := 0
	for _, s := range sizes {
		page = max(page, s)
	}
	t.Logf("5,000 queues: a refresh was %d bytes (GET /api/queues), is %d bytes (one page of 100, the shown columns)", len(whole), page)
	if page == 0 || page*20 > len(whole) {
		t.Errorf("a refresh of the queues page is %d bytes, want under 1/20 of the whole list's %d", page, len(whole))
	}

	// Paging.
	br.run("20 a page", js(`(() => { const s = document.querySelector('#queue-page-size'); s.value = '20'; s.dispatchEvent(new Event('change')); return true })()`))
	br.waitText("#queue-page", 10*time.Second, func(s string) bool { return s == "Page 1 of 250 (1–20)" }, "20 a page")
	br.run("next page", chromedp.Click(chromedp.CSS(`#queue-next`)))
	br.waitText("#queue-page", 10*time.Second, func(s string) bool { return s == "Page 2 of 250 (21–40)" }, "the second page")
	br.waitText("#queues tbody tr td:nth-child(2)", 10*time.Second, func(s string) bool { return s == "q-00020" }, "the second page's first queue")

	// The filter (a regular expression, the broker's), then a sort by depth.
	br.run("filter", chromedp.SendKeys(chromedp.CSS(`#queue-filter`), "^q-0421"))
	br.waitText("#queue-count", 10*time.Second, func(s string) bool { return s == "10 of 5,000 queues" }, "the filter keeps 10")
	br.run("sort by ready", js(`[...document.querySelectorAll('#queues th')].find(th => th.textContent === 'Ready').click(); true`))
	br.waitText("#queues tbody tr td:nth-child(2)", 10*time.Second, func(s string) bool { return s == "q-04213" }, "the deepest queue first")
	br.waitText("#queues tbody tr td:nth-child(6)", 10*time.Second, func(s string) bool { return s == "3" }, "its 3 ready")
	br.run("a bad expression", chromedp.SendKeys(chromedp.CSS(`#queue-filter`), "("))
	br.waitText("#queue-list-result", 10*time.Second, func(s string) bool { return strings.Contains(s, "not a valid regular expression") }, "a bad expression is said so")
	br.run("fix it", js(`(() => { const f = document.querySelector('#queue-filter'); f.value = '^q-0421'; f.dispatchEvent(new Event('input')); return true })()`))
	br.waitText("#queue-list-result", 10*time.Second, func(s string) bool { return s == "" }, "the message goes")

	// The History column fills from the list's refreshes (one sample a second at most).
	waitJS(br, 30*time.Second, `Number(document.querySelector('#queues tbody tr canvas.spark').dataset.points) >= 3`, "the history column has 3 samples")
	br.shot("queues-5000")

	// A queue's page at first look: the broker has no sample of it yet,
	// the console's ring has several.
	br.run("the queue", chromedp.Navigate(url+"#/queues/%2F/q-04213"))
	waitJS(br, 20*time.Second, `document.querySelector('#plot-depth') && document.querySelector('#plot-depth').dataset.points !== undefined`, "the depth plot is drawn")
	if pts := number(eval[string](br, `document.querySelector('#plot-depth').dataset.points`)); pts < 6 {
		t.Errorf("the depth plot at first look has %v points, want at least 3 for ready and 3 for unacked from the console's history", pts)
	}
	br.waitText("#q-ready", 10*time.Second, func(s string) bool { return s == "3" }, "the queue's depth")

	// The time range: the plots ask the API for an hour, and say so.
	br.run("last hour", js(`performance.clearResourceTimings(); (() => { const s = document.querySelector('#range'); s.value = '3600'; s.dispatchEvent(new Event('change')); return true })()`))
	br.waitText("#main .range-label", 5*time.Second, func(s string) bool { return s == "last hour" }, "the plots' titles")
	waitJS(br, 20*time.Second, `performance.getEntriesByType('resource').some(e => e.name.includes('/api/queues/%2F/q-04213?lengths_age=3600'))`, "the queue's page asks for an hour of samples")
	br.shot("queue-last-hour")

	// The ring is bounded: 120 samples a queue, 2,000 queues.
	bounded := eval[[]int](br, `(() => {
		const t0 = Date.now();
		for (let i = 0; i < 500; i++) histAdd({vhost: 'x', name: 'one', messages_ready: i}, t0 + i * 5000);
		const one = qhist.get(histKey('x', 'one')).n;
		for (let i = 0; i < 2500; i++) histAdd({vhost: 'x', name: 'q' + i}, t0);
		return [one, qhist.size, histSeries('x', 'q2499').ready.length, histSeries('x', 'q0').ready.length];
	})()`)
	if len(bounded) != 4 || bounded[0] > 120 || bounded[1] != 2000 || bounded[2] != 1 || bounded[3] != 0 {
		t.Errorf("history ring [samples of one queue, queues kept, newest queue's samples, oldest's] = %v, want [<=120 2000 1 0]", bounded)
	}
	br.noErrors()
}

// TestConsoleNodes: the nodes page of a three-node cluster lists the
// three running, each with its own figures (another node's as it
// answered this one); a node stopped is shown down (and the banner says
// so); a memory alarm on another node, and on this one, is shown on its
// row.
func TestConsoleNodes(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	nodes := startCluster(t, 3)
	url := nodes[0].api + "/?poll=300"
	br.login(url, "guest", "guest")
	br.run("nodes", chromedp.Navigate(url+"#/nodes"))
	br.waitText("#nodes", 60*time.Second, func(s string) bool { return strings.Count(s, "running") == 3 }, "three nodes running")
	br.waitText("#cluster", 60*time.Second, func(s string) bool { return strings.Contains(s, "Leaderrabbit") }, "the cluster's leader")
	// rabbit2's row, on rabbit1's console, with rabbit2's figures.
	cell := func(node, col string) string {
		return eval[string](br, `(() => {
			const t = document.querySelector('#nodes');
			const i = [...t.querySelectorAll('thead th')].findIndex(th => th.textContent === '`+col+`');
			const tr = [...t.querySelectorAll('tbody tr')].find(tr => tr.cells[0].textContent === '`+node+`');
			return tr && i >= 0 ? tr.cells[i].textContent : '';
		})()`)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(cell("rabbit2@localhost", "Memory"), " of ") && cell("rabbit2@localhost", "Uptime") != "" &&
			strings.Contains(cell("rabbit2@localhost", "File descriptors"), " of ") && cell("rabbit2@localhost", "Alarms") == "none"
	}, "rabbit2's memory, file descriptors, uptime and alarms on rabbit1's nodes page")
	br.shot("nodes")
	nodes[2].stop()
	br.waitText("#nodes", 60*time.Second, func(s string) bool {
		return strings.Contains(s, "rabbit3@localhostdown") && strings.Count(s, "running") == 2
	}, "the stopped node is down")
	br.waitText("#banner", 10*time.Second, func(s string) bool { return s == "Node down: rabbit3@localhost" }, "the banner names the node down")
	if c := (&api{t: t, url: nodes[1].api}).call("PUT", "/api/vm-memory-high-watermark", "guest", "guest", map[string]any{"value": "0"}, nil); c/100 != 2 {
		t.Fatalf("PUT /api/vm-memory-high-watermark on rabbit2: %d", c)
	}
	br.waitText("#nodes", 30*time.Second, func(s string) bool { return strings.Contains(s, "rabbit2@localhostrunningmemory alarm") }, "rabbit2's memory alarm on rabbit1's console")
	if got := cell("rabbit1@localhost", "Alarms"); got != "none" {
		t.Errorf("rabbit1's alarms with an alarm on rabbit2 only: %q", got)
	}
	a := &api{t: t, url: nodes[0].api}
	if c := a.call("PUT", "/api/vm-memory-high-watermark", "guest", "guest", map[string]any{"value": "0"}, nil); c/100 != 2 {
		t.Fatalf("PUT /api/vm-memory-high-watermark: %d", c)
	}
	br.waitText("#nodes", 30*time.Second, func(s string) bool { return strings.Contains(s, "rabbit1@localhostrunningmemory alarm") }, "the memory alarm on its node")
	br.shot("nodes-down-alarm")
	phoneWidth(br, url, map[string]string{"#/nodes": "#nodes"})
	br.noErrors()
}
