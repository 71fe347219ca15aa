package main

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

func TestSeqSetMissingFrom(t *testing.T) {
	var s seqSet
	for _, seq := range []uint64{40, 41, 42, 45, 46} {
		s.add(seq)
	}
	for _, tc := range []struct {
		name       string
		from, pub  uint64
		skip       map[uint64]struct{}
		gaps, tail uint64
	}{
		{"from 0: 0..39 and 43, 44 are gaps", 0, 50, nil, 42, 3},
		{"from the first received", 40, 50, nil, 2, 3},
		{"from inside a span", 41, 50, nil, 2, 3},
		{"from inside a gap", 44, 50, nil, 1, 3},
		{"skipped below from do not count", 40, 50, map[uint64]struct{}{3: {}, 43: {}, 48: {}}, 1, 2},
		{"nothing published", 40, 0, nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gaps, tail := s.missingFrom(tc.from, tc.pub, tc.skip)
			if gaps != tc.gaps || tail != tc.tail {
				t.Fatalf("missingFrom(%d, %d) = %d gaps, %d tail; want %d, %d", tc.from, tc.pub, gaps, tail, tc.gaps, tc.tail)
			}
		})
	}
	if g, tl := s.missing(50, nil); g != 42 || tl != 3 {
		t.Fatalf("missing(50) = %d, %d; want 42, 3", g, tl)
	}
}

// streamRunner is a runner for a stream with one producer that published
// n messages and k consumers, wired as setup wires them, without a broker.
func streamRunner(t *testing.T, n uint64, k int, args ...string) *runner {
	t.Helper()
	cfg, err := parseFlags(append([]string{"--queue-type", "stream", "--consumers", "3"}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(cfg, io.Discard, io.Discard)
	q := newQueueState(cfg.queueName(0))
	r.queues = []*queueState{q}
	p := &producer{id: 0, r: r, skip: map[uint64]struct{}{}}
	p.published.Store(n)
	r.producers = []*producer{p}
	for i := range k {
		// ackEvery 0: the acks themselves need a connection.
		c := &consumer{id: i, r: r, q: q, done: make(chan struct{}), track: newQueueState(q.name)}
		q.consumers++
		r.consumers = append(r.consumers, c)
	}
	return r
}

// deliver hands consumer c the messages seqs of producer 0.
func deliver(c *consumer, seqs ...uint64) {
	body := newBody(headerSize)
	for _, s := range seqs {
		putHeader(body, header{producer: 0, seq: s, sentNano: time.Now().UnixNano()})
		c.handleDelivery(time.Now().UnixNano(), s+1, false, body)
	}
}

func seqRange(lo, hi uint64) []uint64 {
	var s []uint64
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

// Three consumers of one stream each expect every message, once and in
// order: one that has them all is complete although the other two had the
// same messages (on a queue they would be duplicates), and each consumer's
// loss, duplicates and disorder are its own.
func TestStreamChecksEachConsumer(t *testing.T) {
	r := streamRunner(t, 100, 3, "--stream-offset", "first")
	c0, c1, c2 := r.consumers[0], r.consumers[1], r.consumers[2]
	deliver(c0, seqRange(0, 100)...)
	deliver(c1, seqRange(0, 51)...)
	deliver(c1, seqRange(50, 100)...) // 50 twice
	deliver(c2, seqRange(0, 50)...)
	if r.complete() {
		t.Fatal("complete with consumer 2 at 50 of 100")
	}
	deliver(c2, seqRange(60, 100)...)
	deliver(c2, 55) // below 99: out of order
	if r.complete() {
		t.Fatal("complete with consumer 2 missing 50..59 but 55")
	}
	start := time.Now().Add(-time.Second)
	res := &result{LossChecked: true}
	for _, c := range r.consumers {
		res.Consumed += c.consumed.Load()
	}
	r.collectStream(res, start, start, start)
	want := []streamConsumerReport{
		{ID: 0, Consumed: 100},
		{ID: 1, Consumed: 101, Duplicated: 1},
		{ID: 2, Consumed: 91, Lost: 9, OutOfOrder: 1},
	}
	for i, w := range want {
		g := res.Stream.Consumers[i]
		if g.ID != w.ID || g.Consumed != w.Consumed || g.Lost != w.Lost || g.Unreceived != 0 || g.Duplicated != w.Duplicated || g.OutOfOrder != w.OutOfOrder {
			t.Fatalf("consumer %d: %+v, want %+v", i, g, w)
		}
		if g.Rate <= 0 || g.LastS <= 0 {
			t.Fatalf("consumer %d: rate %v over %v s", i, g.Rate, g.LastS)
		}
	}
	if res.Lost != 9 || res.Unreceived != 0 {
		t.Fatalf("lost %d, unreceived %d; want 9, 0", res.Lost, res.Unreceived)
	}
	if res.Stream.ReplayRate <= 0 || res.Stream.ConsumerRateMin > res.Stream.ConsumerRateMax {
		t.Fatalf("stream report %+v", res.Stream)
	}
	deliver(c2, 50, 51, 52, 53, 54, 56, 57, 58, 59)
	if !r.complete() {
		t.Fatal("not complete once every consumer has every message")
	}
}

// A consumer that has not started yet (--replay before basic.consume) or
// at the tail of what was published is counted as unreceived, not lost.
func TestStreamUnreceivedPerConsumer(t *testing.T) {
	r := streamRunner(t, 10, 2)
	deliver(r.consumers[0], seqRange(0, 10)...)
	deliver(r.consumers[1], seqRange(0, 4)...)
	res := &result{LossChecked: true}
	r.collectStream(res, time.Now(), time.Now(), time.Now())
	if res.Lost != 0 || res.Unreceived != 6 || res.Stream.Consumers[1].Unreceived != 6 {
		t.Fatalf("lost %d, unreceived %d (%+v); want 0, 6", res.Lost, res.Unreceived, res.Stream.Consumers)
	}
}

// At an absolute offset a consumer expects each producer's messages from
// the first one it received; a gap after it is still a loss.
func TestStreamAbsoluteOffset(t *testing.T) {
	r := streamRunner(t, 100, 2, "--stream-offset", "40")
	deliver(r.consumers[0], seqRange(40, 100)...)
	deliver(r.consumers[1], seqRange(40, 70)...)
	deliver(r.consumers[1], seqRange(71, 100)...)
	if r.complete() {
		t.Fatal("complete with consumer 1 missing 70")
	}
	res := &result{LossChecked: true}
	r.collectStream(res, time.Now(), time.Now(), time.Now())
	if res.Stream.Consumers[0].Lost != 0 || res.Stream.Consumers[1].Lost != 1 || res.Unreceived != 0 {
		t.Fatalf("consumers %+v; want no loss, then one", res.Stream.Consumers)
	}
	deliver(r.consumers[1], 70)
	if !r.complete() {
		t.Fatal("not complete")
	}
}

func TestStreamFlags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		ok    bool
		check func(*config) bool
	}{
		{"stream gets a prefetch", []string{"--queue-type", "stream"}, true, func(c *config) bool {
			return c.stream() && c.Prefetch == streamPrefetch && c.consumeArgs() == nil && c.declareArgs()["x-queue-type"] == "stream"
		}},
		{"explicit prefetch kept", []string{"--queue-type", "stream", "--prefetch", "7"}, true, func(c *config) bool { return c.Prefetch == 7 }},
		{"offset first", []string{"--queue-type", "stream", "--stream-offset", "first"}, true, func(c *config) bool {
			return c.consumeArgs()["x-stream-offset"] == "first" && !c.fromFirstSeen()
		}},
		{"absolute offset is a long", []string{"--queue-type", "stream", "--stream-offset", "1000"}, true, func(c *config) bool {
			return c.consumeArgs()["x-stream-offset"] == int64(1000) && c.fromFirstSeen()
		}},
		{"queue args", []string{"--queue-type", "stream", "--queue-args", "x-max-length-bytes=1000000,x-max-age=7D"}, true, func(c *config) bool {
			a := c.declareArgs()
			return a["x-max-length-bytes"] == int64(1000000) && a["x-max-age"] == "7D" && a["x-queue-type"] == "stream"
		}},
		{"replay defaults to first", []string{"--queue-type", "stream", "--replay", "--pmessages", "10", "--confirm", "10"}, true, func(c *config) bool {
			return c.Replay && c.StreamOffset == "first" && !c.timed
		}},
		{"bad offset", []string{"--queue-type", "stream", "--stream-offset", "soon"}, false, nil},
		{"negative offset", []string{"--queue-type", "stream", "--stream-offset", "-1"}, false, nil},
		{"offset needs a stream", []string{"--stream-offset", "first"}, false, nil},
		{"replay needs a stream", []string{"--replay", "--pmessages", "10", "--confirm", "10"}, false, nil},
		{"streams refuse autoack", []string{"--queue-type", "stream", "--autoack"}, false, nil},
		{"streams do not drain", []string{"--queue-type", "stream", "--drain", "--producers", "0"}, false, nil},
		{"replay needs confirms", []string{"--queue-type", "stream", "--replay", "--pmessages", "10"}, false, nil},
		{"replay needs pmessages", []string{"--queue-type", "stream", "--replay", "--confirm", "10"}, false, nil},
		{"replay is not timed", []string{"--queue-type", "stream", "--replay", "--pmessages", "10", "--confirm", "10", "--duration", "1s"}, false, nil},
		{"replay from next reads nothing", []string{"--queue-type", "stream", "--replay", "--pmessages", "10", "--confirm", "10", "--stream-offset", "next"}, false, nil},
		{"bad queue args", []string{"--queue-args", "x-max-length"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, io.Discard)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%t", err, tc.ok)
			}
			if tc.check != nil && !tc.check(c) {
				t.Fatalf("unexpected config %+v", c)
			}
		})
	}
}

// The frame engine's basic.consume arguments: x-stream-offset as a long
// string or a long (AMQP 0-9-1 field types S and l).
func TestAppendConsumeArgs(t *testing.T) {
	for _, tc := range []struct {
		offset string
		want   []byte
	}{
		{"", []byte{0, 0, 0, 0}},
		{"next", append(append([]byte{0, 0, 0, 25, 15}, "x-stream-offset"...), 'S', 0, 0, 0, 4, 'n', 'e', 'x', 't')},
		{"258", append(append([]byte{0, 0, 0, 25, 15}, "x-stream-offset"...), 'l', 0, 0, 0, 0, 0, 0, 1, 2)},
	} {
		c := &config{QueueType: queueTypeStream, StreamOffset: tc.offset}
		if got := c.appendConsumeArgs(nil); !bytes.Equal(got, tc.want) {
			t.Fatalf("offset %q: % x, want % x", tc.offset, got, tc.want)
		}
	}
}

func TestParseIO(t *testing.T) {
	io := []byte("rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 5\nwrite_bytes: 40960\ncancelled_write_bytes: 4096\n")
	w, c, ok := parseIO(io)
	if !ok || w != 40960 || c != 4096 {
		t.Fatalf("parseIO = %d, %d, %t; want 40960, 4096, true", w, c, ok)
	}
	if _, _, ok := parseIO([]byte("rchar: 1\n")); ok {
		t.Fatal("parseIO without write_bytes: ok")
	}
}

// A stream end to end, both engines: three consumers from first while the
// producer publishes, then --replay from first; every consumer gets every
// message once and in order. With RAILMQ_TEST_URL it runs against another
// broker (RabbitMQ 3.10.8 streams).
func TestStreamEndToEnd(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	const n = 3000
	for _, engine := range []string{engineAMQP091, engineFrames} {
		for i, mode := range []struct {
			name string
			args []string
		}{
			{"concurrent", []string{"--stream-offset", "first"}},
			{"replay", []string{"--replay"}},
			{"replay at an offset", []string{"--replay", "--stream-offset", "1000"}},
		} {
			t.Run(engine+" "+mode.name, func(t *testing.T) {
				args := append([]string{"--engine", engine, "--queue-type", "stream", "--pmessages", "3000", "--consumers", "3",
					"--confirm", "100", "--size", "100", "--prefetch", "200", "--multi-ack-every", "20",
					"--queue-prefix", fmt.Sprintf("perf-stream-%s-%d-%d", engine, i, time.Now().UnixNano())}, mode.args...)
				code, res, stderr := perfRun(t, b.URL, args...)
				if code != exitOK || res.Status != "ok" {
					t.Fatalf("exit %d, status %s\n%s", code, res.Status, stderr)
				}
				each := uint64(n)
				if mode.name == "replay at an offset" {
					each = n - 1000 // one producer on a fresh stream: offset i is its message i
				}
				if res.Published != n || res.Confirmed != n || res.Consumed != 3*each {
					t.Fatalf("published %d, confirmed %d, consumed %d; want %d, %d, %d", res.Published, res.Confirmed, res.Consumed, n, n, 3*each)
				}
				if res.Lost != 0 || res.Unreceived != 0 || res.Duplicated != 0 || res.OutOfOrder != 0 || res.Errors != 0 {
					t.Fatalf("lost %d unreceived %d duplicated %d out of order %d errors %d", res.Lost, res.Unreceived, res.Duplicated, res.OutOfOrder, res.Errors)
				}
				s := res.Stream
				if s == nil || len(s.Consumers) != 3 || s.ReplayRate <= 0 || s.ConsumerRateMin <= 0 {
					t.Fatalf("stream report %+v", s)
				}
				for _, c := range s.Consumers {
					if c.Consumed != each {
						t.Fatalf("consumer %d received %d, want %d", c.ID, c.Consumed, each)
					}
				}
			})
		}
	}
}
