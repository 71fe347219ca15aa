package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Long work: redrive and definitions import are one management API
// request each, which the broker works on until done (a redrive at
// --rate 40 of 3,000 messages takes 75 s). Their request has no
// client-side timeout: a timeout would drop the connection, which stops
// the broker's redrive half way (the client that left ends it). While it
// runs, progress lines go to stderr every --interval (stdout stays the
// result, for scripts); at the end, the final count.

// long is c without a request timeout, for one long request, unless
// the global --timeout was given: then that bounds it.
func (c *client) long() *client {
	l := *c
	if !c.timeoutGiven {
		l.timeout = 0
	}
	return &l
}

// ticker calls f every interval until the returned stop is called; stop
// waits for f to return.
func ticker(interval time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// redrive moves a dead-letter queue's messages back (POST
// /api/queues/{vhost}/{queue}/redrive with body), printing progress read
// from the queue's depth, and the table of the broker's answer.
func (c *client) redrive(queue string, body map[string]any, interval time.Duration) error {
	total, _, err := c.queueDepth(queue)
	if err != nil {
		return err
	}
	if m, ok := body["max"].(int); ok && int64(m) < total {
		total = int64(m)
	}
	note := ""
	if r, ok := body["rate"].(float64); ok && r > 0 {
		note = fmt.Sprintf(" at %g msg/s (about %s)", r, (time.Duration(float64(total)/r) * time.Second).Round(time.Second))
	}
	fmt.Fprintf(c.errOut, "redriving %d messages from '%s' in vhost '%s'%s\n", total, queue, c.vhost, note)
	start := time.Now()
	// moved reads the queue's depth: what left it since the start
	// (unroutable messages are held, so still counted in it).
	moved := func() (int64, bool) {
		n, _, err := c.queueDepth(queue)
		if err != nil {
			return 0, false
		}
		return min(max(total-n, 0), total), true
	}
	last, lastAt := int64(0), start
	stop := ticker(interval, func() {
		m, ok := moved()
		if !ok {
			return
		}
		now := time.Now()
		rate := float64(m-last) / max(now.Sub(lastAt).Seconds(), 1e-3)
		last, lastAt = m, now
		fmt.Fprintf(c.errOut, "redrive: moved %d of %d, %.0f msg/s, %s elapsed\n", m, total, rate, now.Sub(start).Round(time.Second))
	})
	raw, err := c.long().do("POST", "/api/queues/"+c.vh()+"/"+url.PathEscape(queue)+"/redrive", body)
	stop()
	if err != nil {
		if m, ok := moved(); ok {
			return fmt.Errorf("redrive of '%s' stopped after moving about %d of %d (the rest are still in it): %w", queue, m, total, err)
		}
		return fmt.Errorf("redrive of '%s' stopped (what moved stays moved, the rest are still in it): %w", queue, err)
	}
	var r struct{ Moved, Unroutable, Remaining int64 }
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("redrive's answer: %w", err)
	}
	took := time.Since(start)
	fmt.Fprintf(c.errOut, "redrove %d messages from '%s' in %.1fs (%.0f msg/s); %d unroutable (left in '%s'), %d remaining\n",
		r.Moved, queue, took.Seconds(), float64(r.Moved)/max(took.Seconds(), 1e-3), r.Unroutable, queue, r.Remaining)
	return c.show(raw, []string{"moved", "unroutable", "remaining"})
}

// definitionsSummary counts a definitions file's objects ("3 vhosts,
// 12 queues, ...").
func definitionsSummary(b []byte) (string, error) {
	var defs map[string]json.RawMessage
	if err := json.Unmarshal(b, &defs); err != nil {
		return "", fmt.Errorf("not a definitions file (a JSON object): %w", err)
	}
	var parts []string
	keys := make([]string, 0, len(defs))
	for k := range defs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var list []json.RawMessage
		if json.Unmarshal(defs[k], &list) == nil && len(list) > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", len(list), k))
		}
	}
	if len(parts) == 0 {
		return "nothing", nil
	}
	return strings.Join(parts, ", "), nil
}

// importDefinitions posts file's definitions (all or nothing), with
// progress while the broker works.
func (c *client) importDefinitions(file string, interval time.Duration) error {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	what, err := definitionsSummary(b)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	start := time.Now()
	fmt.Fprintf(c.errOut, "importing definitions from %s: %s\n", file, what)
	stop := ticker(interval, func() {
		fmt.Fprintf(c.errOut, "import: the broker is at work, %s elapsed\n", time.Since(start).Round(time.Second))
	})
	_, err = c.long().do("POST", "/api/definitions", b)
	stop()
	if err != nil {
		return fmt.Errorf("import of %s refused, nothing imported: %w", file, err)
	}
	fmt.Fprintf(c.out, "imported definitions from %s (%s) in %.1fs\n", file, what, time.Since(start).Seconds())
	return nil
}
