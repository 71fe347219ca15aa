package main

// Streams (--queue-type stream). A stream is an append-only log: acks are
// credit, not deletion, and every consumer reads the whole log from the
// offset it attached at (x-stream-offset). So a stream's messages are
// checked per consumer, not per queue: each consumer must receive every
// message published to its stream once, in order per producer. Each
// consumer records what it received in a queueState of its own
// (consumer.track) instead of the one its queue's consumers share.
//
// --replay publishes --pmessages per producer with confirms first and only
// then sends the consumers' basic.consume (their connections, channels and
// basic.qos are open before publishing starts), so that the replay phase
// measures reading the stream alone: replay_rate is all consumers'
// deliveries over the time from the first basic.consume to the last
// consumer's last delivery.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	queueTypeStream = "stream"
	// streamPrefetch is the prefetch of a stream's consumers when
	// --prefetch is not given: streams refuse consumers without one.
	streamPrefetch = 500
	// replayCheck is how often --replay asks whether every consumer has
	// every message; the completion time itself is each consumer's last
	// delivery, not this tick.
	replayCheck = 10 * time.Millisecond
)

// stream reports whether the queues are streams.
func (c *config) stream() bool { return c.QueueType == queueTypeStream }

// validateStream checks the stream flags and fills in their defaults.
func (c *config) validateStream() error {
	args, err := parseQueueArgs(c.QueueArgs)
	if err != nil {
		return err
	}
	c.queueArgs = args
	if c.StreamOffset != "" {
		if _, err := streamOffsetValue(c.StreamOffset); err != nil {
			return err
		}
	}
	if !c.stream() {
		switch {
		case c.StreamOffset != "":
			return errors.New("--stream-offset needs --queue-type stream")
		case c.Replay:
			return errors.New("--replay needs --queue-type stream")
		}
		return nil
	}
	switch {
	case c.AutoAck:
		return errors.New("--queue-type stream: streams refuse no-ack consumers (acks are credit)")
	case c.Drain:
		return errors.New("--drain does not apply to streams: reading does not empty them")
	}
	if c.Prefetch == 0 {
		c.Prefetch = streamPrefetch
	}
	if !c.Replay {
		return nil
	}
	switch {
	case c.PMessages == 0 || c.Producers == 0 || c.Consumers == 0:
		return errors.New("--replay needs --pmessages, producers and consumers")
	case c.timed:
		return errors.New("--replay is bounded by --pmessages, not --duration")
	case c.Confirm == 0:
		return errors.New("--replay needs --confirm: the replay starts once every publish is confirmed")
	case c.StreamOffset == "next" || c.StreamOffset == "last":
		return errors.New("--replay reads what was published before the consumers start: --stream-offset first or an offset")
	case c.ReplayTimeout <= 0:
		return errors.New("--replay-timeout must be positive")
	}
	if c.StreamOffset == "" {
		c.StreamOffset = "first"
	}
	return nil
}

// streamOffsetValue is the x-stream-offset argument for s: the string
// first, last or next, or an absolute offset as a long.
func streamOffsetValue(s string) (any, error) {
	switch s {
	case "first", "last", "next":
		return s, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("--stream-offset %q: want first, last, next or an offset (an integer >= 0)", s)
	}
	return n, nil
}

// parseQueueArgs parses --queue-args: comma-separated key=value pairs;
// integers become longs, anything else a string.
func parseQueueArgs(s string) (amqp.Table, error) {
	if s == "" {
		return nil, nil
	}
	t := amqp.Table{}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--queue-args: %q is not key=value", kv)
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			t[k] = n
		} else {
			t[k] = v
		}
	}
	return t, nil
}

// declareArgs are the queue.declare arguments: x-queue-type and
// --queue-args.
func (c *config) declareArgs() amqp.Table {
	if c.QueueType == "" && c.queueArgs == nil {
		return nil
	}
	t := amqp.Table{}
	for k, v := range c.queueArgs {
		t[k] = v
	}
	if c.QueueType != "" {
		t["x-queue-type"] = c.QueueType
	}
	return t
}

// consumeArgs are the basic.consume arguments: x-stream-offset, if set.
func (c *config) consumeArgs() amqp.Table {
	if c.StreamOffset == "" {
		return nil
	}
	v, _ := streamOffsetValue(c.StreamOffset) // validated
	return amqp.Table{"x-stream-offset": v}
}

// appendConsumeArgs appends consumeArgs as an AMQP field table, for the
// frame engine.
func (c *config) appendConsumeArgs(b []byte) []byte {
	return appendTable(b, func(t []byte) []byte {
		if c.StreamOffset == "" {
			return t
		}
		switch v, _ := streamOffsetValue(c.StreamOffset); v := v.(type) {
		case string:
			t = appendField(t, "x-stream-offset", 'S', []byte(v))
		case int64:
			t = appendField(t, "x-stream-offset", 'l', binary.BigEndian.AppendUint64(nil, uint64(v)))
		}
		return t
	})
}

// fromFirstSeen reports whether a stream consumer expects each producer's
// messages from the first one it received rather than from the producer's
// first: with an absolute offset, where the stream begins for the consumer
// is the broker's to say. first reads everything; next and last, on a
// stream that is empty when the consumers attach (publishing starts after
// basic.consume-ok), too.
func (c *config) fromFirstSeen() bool {
	if !c.stream() {
		return false
	}
	_, err := strconv.ParseInt(c.StreamOffset, 10, 64)
	return err == nil
}

// tracker is where c records its deliveries: its queue's shared state, or
// on a stream its own.
func (c *consumer) tracker() *queueState {
	if c.track != nil {
		return c.track
	}
	return c.q
}

// routes reports whether producer p publishes to queue qi.
func (r *runner) routes(p *producer, qi int) bool {
	return r.cfg.ExchangeType == "fanout" || int(p.id)%len(r.queues) == qi
}

// queueIndex is the index of q in r.queues.
func (r *runner) queueIndex(q *queueState) int {
	return slices.Index(r.queues, q)
}

// streamComplete reports whether every stream consumer has every message
// published to its stream (less those nacked or returned).
func (r *runner) streamComplete() bool {
	from := r.cfg.fromFirstSeen()
	for _, c := range r.consumers {
		qi := r.queueIndex(c.q)
		var want uint64
		for _, p := range r.producers {
			if !r.routes(p, qi) {
				continue
			}
			pub := p.published.Load()
			p.mu.Lock()
			skip := uint64(len(p.skip))
			p.mu.Unlock()
			w := pub - min(skip, pub)
			if from {
				lo, _ := c.tracker().low(p.id)
				w -= min(lo, w)
			}
			want += w
		}
		if uint64(c.tracker().unique.Load()) < want {
			return false
		}
	}
	return true
}

// streamReport is the stream part of the report.
type streamReport struct {
	Offset string `json:"offset"`
	Replay bool   `json:"replay"`
	// PublishS is the publishing time, to the last confirm with --replay.
	PublishS float64 `json:"publish_s"`
	// ReplayS runs from the consumers' start (the run's start, or with
	// --replay the first basic.consume) to the last delivery of any
	// consumer; ReplayRate is every consumer's deliveries over it.
	ReplayS    float64 `json:"replay_s"`
	ReplayRate float64 `json:"replay_rate"`
	// The slowest and fastest consumer's own rate: its deliveries over
	// the time to its last delivery.
	ConsumerRateMin float64 `json:"consumer_rate_min"`
	ConsumerRateMax float64 `json:"consumer_rate_max"`
	// With --replay and --broker-pid: the broker's CPU while publishing,
	// per message published, and while replaying, per delivery.
	BrokerCPUPublishUSPerMsg float64 `json:"broker_cpu_publish_us_per_msg,omitempty"`
	BrokerCPUReplayUSPerMsg  float64 `json:"broker_cpu_replay_us_per_msg,omitempty"`

	Consumers []streamConsumerReport `json:"consumers"`
}

// streamConsumerReport is one consumer's view of its stream.
type streamConsumerReport struct {
	ID         int     `json:"id"`
	Queue      string  `json:"queue"`
	Consumed   uint64  `json:"consumed"`
	Lost       uint64  `json:"lost"`
	Unreceived uint64  `json:"unreceived"`
	Duplicated uint64  `json:"duplicated"`
	OutOfOrder uint64  `json:"out_of_order"`
	LastS      float64 `json:"last_s"` // its last delivery, after the consumers' start
	Rate       float64 `json:"rate"`
}

// collectStream fills in res.Stream and, when res.LossChecked, the loss
// counts, consumer by consumer. consumeStart is when the consumers
// started; the consumers have stopped.
func (r *runner) collectStream(res *result, start, publishEnd, consumeStart time.Time) {
	cfg := r.cfg
	sr := &streamReport{Offset: cfg.StreamOffset, Replay: cfg.Replay, PublishS: round(publishEnd.Sub(start).Seconds(), 3)}
	from := cfg.fromFirstSeen()
	skips := make([]map[uint64]struct{}, len(r.producers))
	for i, p := range r.producers {
		skips[i] = p.skipped()
	}
	var last int64
	for _, c := range r.consumers {
		cr := streamConsumerReport{ID: c.id, Queue: c.q.name, Consumed: c.consumed.Load(),
			Duplicated: c.duplicated, OutOfOrder: c.outOfOrder}
		if n := c.lastNano.Load(); n > 0 {
			last = max(last, n)
			if d := time.Unix(0, n).Sub(consumeStart).Seconds(); d > 0 {
				cr.LastS = round(d, 3)
				cr.Rate = round(float64(cr.Consumed)/d, 1)
			}
		}
		if res.LossChecked {
			qi := r.queueIndex(c.q)
			for i, p := range r.producers {
				if !r.routes(p, qi) {
					continue
				}
				set := c.tracker().set(p.id)
				var lo uint64
				if from {
					lo, _ = c.tracker().low(p.id)
				}
				gaps, tail := set.missingFrom(lo, p.published.Load(), skips[i])
				cr.Lost += gaps
				cr.Unreceived += tail
			}
			res.Lost += cr.Lost
			res.Unreceived += cr.Unreceived
		}
		if len(sr.Consumers) == 0 || cr.Rate < sr.ConsumerRateMin {
			sr.ConsumerRateMin = cr.Rate
		}
		sr.ConsumerRateMax = max(sr.ConsumerRateMax, cr.Rate)
		sr.Consumers = append(sr.Consumers, cr)
	}
	if last > 0 {
		if d := time.Unix(0, last).Sub(consumeStart).Seconds(); d > 0 {
			sr.ReplayS = round(d, 3)
			sr.ReplayRate = round(float64(res.Consumed)/d, 1)
		}
	}
	if cfg.Replay && cfg.BrokerPID > 0 {
		if res.Published > 0 && r.procMid.cpuTicks >= r.procStart.cpuTicks {
			sr.BrokerCPUPublishUSPerMsg = round(float64(r.procMid.cpuTicks-r.procStart.cpuTicks)/clockTicks*1e6/float64(res.Published), 3)
		}
		if res.Consumed > 0 && r.procEnd.cpuTicks >= r.procMid.cpuTicks {
			sr.BrokerCPUReplayUSPerMsg = round(float64(r.procEnd.cpuTicks-r.procMid.cpuTicks)/clockTicks*1e6/float64(res.Consumed), 3)
		}
	}
	res.Stream = sr
}

// measureReplay runs --replay: the producers publish their --pmessages and
// wait for the confirms; then every consumer sends basic.consume and the
// run ends once each has every message, at --replay-timeout, or on SIGINT.
func (r *runner) measureReplay(sig <-chan os.Signal) *result {
	r.selfStart = selfCPU()
	start := time.Now()
	ctx, stopProducers := context.WithCancel(context.Background())
	defer stopProducers()
	var prodWG sync.WaitGroup
	for _, p := range r.producers {
		prodWG.Go(func() { p.run(ctx) })
	}
	prodDone := make(chan struct{})
	go func() { prodWG.Wait(); close(prodDone) }()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	var prev totals
	interrupted := false
publish:
	for {
		select {
		case s := <-sig:
			r.note("%v: stopping producers; no replay", s)
			stopProducers()
			<-prodDone
			interrupted = true
			break publish
		case <-prodDone:
			break publish
		case now := <-progress.C:
			prev = r.progress(now.Sub(start), prev)
		}
	}
	publishEnd := time.Now()
	r.procMid = r.sampleBroker()
	end, replayStart := publishEnd, publishEnd
	if !interrupted {
		replayStart = time.Now()
		end = r.replay(sig, start, prev)
	}
	r.selfEnd = selfCPU()
	r.procEnd = r.sampleBroker()
	r.rssPeak = max(r.rssPeak, r.procEnd.rssKiB)
	if !interrupted {
		for _, c := range r.consumers {
			select {
			case <-c.done:
			case <-time.After(stopWait):
				r.fail("consumer %d did not stop within %v", c.id, stopWait)
			}
		}
	}
	r.consumeStart = replayStart
	return r.collect(start, publishEnd, end)
}

// replay starts every consumer and waits until each has every message
// (or the timeout, or SIGINT); then it tells them to stop. It returns the
// end of the measurement.
func (r *runner) replay(sig <-chan os.Signal, start time.Time, prev totals) time.Time {
	stop := make(chan struct{})
	defer close(stop)
	for _, c := range r.consumers {
		if err := c.consume(); err != nil {
			r.fail("consumer %d: %v", c.id, err)
		}
		go c.run(stop)
	}
	deadline := time.NewTimer(r.cfg.ReplayTimeout)
	defer deadline.Stop()
	check := time.NewTicker(replayCheck)
	defer check.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	for {
		select {
		case s := <-sig:
			r.note("%v: stopping the replay", s)
			return time.Now()
		case <-deadline.C:
			r.note("consumers still missing messages %v after the replay started; ending the run", r.cfg.ReplayTimeout)
			return time.Now()
		case <-check.C:
			if r.streamComplete() {
				return time.Now()
			}
		case now := <-progress.C:
			prev = r.progress(now.Sub(start), prev)
		}
	}
}

// sampleBroker reads the broker's /proc figures, if --broker-pid.
func (r *runner) sampleBroker() procSample {
	if r.cfg.BrokerPID == 0 {
		return procSample{}
	}
	s, err := readProc(r.cfg.BrokerPID)
	if err != nil {
		r.fail("--broker-pid: %v", err)
	}
	return s
}
