package conformance

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
)

// The migration test's clients and history (migrate_test.go): producers
// with confirms and acking consumers that each talk to one broker at a
// time and move to the other when told, and every message's story, kept
// in the cluster fault suite's history (cluster_fault_test.go) with, for
// each delivery, where and when it came and how it got there.

const (
	migVhost    = "shop"
	migUser     = "shop-app"
	migPass     = "shop-secret"
	migExchange = "mig.x"
	migWork     = "mig.work"  // the work queue, with the consumers moved one by one
	migAudit    = "mig.audit" // a queue no one consumes during the move: left for the shovel
	// migRate is each producer's publishes per second; one in ten goes
	// to migAudit. migConsumerRate is each work consumer's most messages
	// per second: three consumers cannot keep up with the work queue's
	// 180/s and four can (3×52 < 180 < 4×52), so that while a consumer
	// is moved the three left on RabbitMQ are busy (their prefetch full)
	// and RabbitMQ hands the rest to the federation link, whose upstream
	// consumer has priority -1 (rabbit_federation_queue_link.erl, v3.10.8):
	// with faster consumers a consumer moved to railmq would get nothing
	// while the others on RabbitMQ kept up.
	migRate         = 100
	migProducers    = 2
	migConsumerRate = 52
	migPrefetch     = 10
)

const (
	onRabbit = int32(iota)
	onRailmq
)

var brokerName = [...]string{onRabbit: "rabbitmq", onRailmq: "railmq"}

// migDelivery is one delivery of a message as a consumer saw it.
type migDelivery struct {
	at          time.Time
	broker      int32
	consumer    string
	redelivered bool   // the delivery's own flag
	hop         string // "federation" (x-received-from), "shovel" (x-shovelled) or ""
	hopFlagged  bool   // x-received-from's redelivered: the upstream's flag, as the queue link carries it
	ackedBefore bool   // an earlier delivery of the id had been acked
}

// outage is a broker's time down: from its kill -9 until it serves
// again.
type outage struct {
	broker     int32
	from, back time.Time
}

type migLoad struct {
	h      *history
	urls   [2]string // the application's URL on each broker
	next   atomic.Uint64
	stop   chan struct{}
	wg     sync.WaitGroup
	t0     time.Time
	mu     sync.Mutex // guards the fields below; taken before h.mu, never inside it
	pubAt  map[uint64]time.Time
	pubOn  map[uint64]int32
	dels   map[uint64][]migDelivery
	outage []outage

	confirmedOn [2]atomic.Int64
	deliveredOn [2]atomic.Int64
}

func newMigLoad(urls [2]string) *migLoad {
	return &migLoad{
		h: &history{published: map[uint64]bool{}, confirmed: map[uint64]bool{}, refused: map[uint64]bool{},
			acked: map[uint64]bool{}, returned: map[uint64]bool{}, delivered: map[uint64]int{},
			t0: time.Now(), first: map[uint64]string{}},
		urls: urls, stop: make(chan struct{}), t0: time.Now(),
		pubAt: map[uint64]time.Time{}, pubOn: map[uint64]int32{}, dels: map[uint64][]migDelivery{},
	}
}

func (l *migLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// migClient is one producer or consumer: the broker it uses, and a kick
// that ends its session there (it then connects to the broker it is
// told to use now).
type migClient struct {
	name     string
	target   atomic.Int32
	kick     chan struct{}
	done     chan struct{} // closed: the client stops
	exited   chan struct{} // closed once it has
	sessions atomic.Int64  // sessions begun, on either broker
	got      [2]atomic.Int64
	mu       sync.Mutex
	times    []time.Time // its deliveries, in order (consumers)
}

func newMigClient(name string) *migClient {
	return &migClient{name: name, kick: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
}

// end stops the client and waits until it has.
func (c *migClient) end() {
	close(c.done)
	<-c.exited
}

func (c *migClient) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// moveTo makes the client use broker b from now on.
func (c *migClient) moveTo(b int32) {
	c.target.Store(b)
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *migClient) kicked() bool {
	select {
	case <-c.kick:
		return true
	default:
		return false
	}
}

// run runs sessions on the client's broker until the load stops.
func (l *migLoad) run(c *migClient, session func(c *migClient, b int32)) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(c.exited)
		for !l.stopped() && !c.ended() {
			c.sessions.Add(1)
			session(c, c.target.Load())
			select {
			case <-l.stop:
			case <-c.done:
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

// produce publishes to migExchange at migRate with confirms, a window
// of 32 in flight, until its connection fails, it is kicked or the load
// stops; each outcome goes into the history.
func (l *migLoad) produce(c *migClient, b int32) {
	conn, err := rmq.DialConfig(l.urls[b], rmq.Config{Dial: rmq.DefaultDial(2 * time.Second)})
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil || ch.Confirm(false) != nil {
		return
	}
	l.h.watchReturns(ch)
	type sent struct {
		id uint64
		dc *rmq.DeferredConfirmation
	}
	var window []sent
	settle := func(s sent) {
		ok := s.dc.Wait()
		l.h.mu.Lock()
		if ok {
			l.h.confirmed[s.id] = true
		} else {
			l.h.refused[s.id] = true
		}
		l.h.mu.Unlock()
		if ok {
			l.confirmedOn[b].Add(1)
		}
	}
	defer func() {
		conn.Close() // what is still in flight is refused: the connection is gone
		for _, s := range window {
			settle(s)
		}
	}()
	began, n := time.Now(), 0
	for !l.stopped() && !c.ended() && !c.kicked() && !conn.IsClosed() {
		id := l.next.Add(1)
		key := "work"
		if id%10 == 0 {
			key = "audit"
		}
		l.mu.Lock()
		l.pubAt[id], l.pubOn[id] = time.Now(), b
		l.mu.Unlock()
		l.h.mu.Lock()
		l.h.published[id] = true
		l.h.mu.Unlock()
		dc, err := ch.PublishWithDeferredConfirm(migExchange, key, true /* mandatory */, false,
			rmq.Publishing{DeliveryMode: rmq.Persistent, MessageId: fmt.Sprint(id), Body: crashBody(id, 64+int(id%256))})
		if err != nil {
			l.h.mu.Lock()
			l.h.refused[id] = true
			l.h.mu.Unlock()
			return
		}
		c.got[b].Add(1)
		window = append(window, sent{id, dc})
		if len(window) >= 32 {
			settle(window[0])
			window = window[1:]
		}
		if n++; time.Duration(n)*time.Second/migRate > time.Since(began) {
			time.Sleep(time.Duration(n)*time.Second/migRate - time.Since(began))
		}
	}
}

// consumer returns a session that consumes queue q, paced at rate
// messages per second at most (0: unpaced), acking each.
func (l *migLoad) consumer(q string, rate int) func(c *migClient, b int32) {
	return func(c *migClient, b int32) {
		conn, err := rmq.DialConfig(l.urls[b], rmq.Config{Dial: rmq.DefaultDial(2 * time.Second)})
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil || ch.Qos(migPrefetch, 0, false) != nil {
			return
		}
		tag := fmt.Sprintf("%s-%d", c.name, c.sessions.Load())
		ds, err := ch.Consume(q, tag, false, false, false, false, nil)
		if err != nil {
			return
		}
		next := time.Now()
		for {
			select {
			case d, ok := <-ds:
				if !ok {
					return
				}
				if rate > 0 {
					// The consumer's work: rate a second, catching up on
					// at most 100 ms after a pause (what recording, acking
					// and a busy machine's late wake-ups take, so that the
					// rate holds; a longer catch-up lets consumers that were
					// idle take a burst, and a consumer moved to railmq
					// then waits until the others have spent it).
					next = maxTime(next.Add(time.Second/time.Duration(rate)), time.Now().Add(-100*time.Millisecond))
					time.Sleep(time.Until(next))
				}
				if !l.deliver(c, b, d) {
					return
				}
			case <-c.kick:
				// Moved: cancel, ack what was already delivered, close.
				if ch.Cancel(tag, false) != nil {
					return
				}
				for d := range ds {
					if !l.deliver(c, b, d) {
						return
					}
				}
				return
			case <-l.stop:
				return
			case <-c.done:
				return
			}
		}
	}
}

// deliver records a delivery and acks it; false if the ack failed.
func (l *migLoad) deliver(c *migClient, b int32, d rmq.Delivery) bool {
	now := time.Now()
	md := migDelivery{at: now, broker: b, consumer: c.name, redelivered: d.Redelivered}
	if from, ok := d.Headers["x-received-from"].([]any); ok && len(from) > 0 {
		md.hop = "federation"
		if t, ok := from[0].(rmq.Table); ok {
			md.hopFlagged, _ = t["redelivered"].(bool)
		}
	} else if _, ok := d.Headers["x-shovelled"]; ok {
		md.hop = "shovel"
	}
	id, _ := parseCrashBody(d.Body)
	l.h.mu.Lock()
	md.ackedBefore = l.h.acked[id]
	l.h.mu.Unlock()
	id, good := l.h.deliver(d.Body, d.Redelivered, fmt.Sprintf("on %s to %s", brokerName[b], c.name))
	l.mu.Lock()
	if good {
		l.dels[id] = append(l.dels[id], md)
	}
	l.mu.Unlock()
	c.mu.Lock()
	c.times = append(c.times, now)
	c.mu.Unlock()
	c.got[b].Add(1)
	l.deliveredOn[b].Add(1)
	if d.Ack(false) != nil {
		return false
	}
	if good {
		l.h.mu.Lock()
		l.h.acked[id] = true
		l.h.mu.Unlock()
	}
	return true
}

func (l *migLoad) down(b int32, from, back time.Time) {
	l.mu.Lock()
	l.outage = append(l.outage, outage{b, from, back})
	l.mu.Unlock()
	l.h.event("%s down from %.2fs to %.2fs", brokerName[b], from.Sub(l.h.t0).Seconds(), back.Sub(l.h.t0).Seconds())
}

// longestIdle is the longest time a consumer went without a delivery
// between its first delivery and until, less (if downLeftOut) the time
// either broker was down within it (when a broker is down nothing can
// reach a consumer: before producers move, every message passes through
// RabbitMQ), and when it began.
func (l *migLoad) longestIdle(c *migClient, until time.Time, downLeftOut bool) (time.Duration, time.Time) {
	c.mu.Lock()
	times := append([]time.Time(nil), c.times...)
	c.mu.Unlock()
	var outs []outage
	if downLeftOut {
		l.mu.Lock()
		outs = append(outs, l.outage...)
		l.mu.Unlock()
	}
	var worst time.Duration
	var at time.Time
	for i := 1; i <= len(times); i++ {
		a, z := times[i-1], until
		if i < len(times) {
			z = times[i]
		}
		if a.After(until) {
			break
		}
		if z.After(until) {
			z = until
		}
		gap := z.Sub(a)
		for _, o := range outs {
			if lo, hi := maxTime(a, o.from), minTime(z, o.back); hi.After(lo) {
				gap -= hi.Sub(lo)
			}
		}
		if gap > worst {
			worst, at = gap, a
		}
	}
	return worst, at
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// migVerdict is the history's check (migLoad.check).
type migVerdict struct {
	lost, unexplained            []uint64
	duplicated, flagged, hopFlag int // ids delivered more than once; repeat deliveries flagged redelivered, or flagged upstream (x-received-from)
	byRabbitKill, keptByRailmq   int // unflagged repeats explained by RabbitMQ's kill -9, by railmq's (see check)
	why                          []string
}

// check decides from the history. Every confirmed message (by either
// broker) that was not returned unroutable must have been delivered. A
// repeat delivery of an id (any after its first) must be one of:
//   - flagged redelivered by the broker that delivered it: the broker
//     says it may have been delivered before;
//   - come through the federation link flagged at the upstream
//     (x-received-from's redelivered, which the queue link copies from
//     RabbitMQ's delivery to it): RabbitMQ gave it again to the link,
//     whose ack of the first copy it never processed. When the id had been
//     acked by then, only a kill -9 explains that (the link acks
//     RabbitMQ once railmq has confirmed the copy, so a copy is on
//     railmq before RabbitMQ forgets it): a kill of either broker
//     between the id's publish and this delivery (railmq's kill takes
//     the link's unsent acks with it; RabbitMQ's, acks it had not
//     written);
//   - come after a kill -9 of RabbitMQ, the id published before it:
//     RabbitMQ 3.10.8's classic queue does not promise to keep an ack
//     (a consumer's or the link's) across a crash, and may hand the
//     message out again, to a consumer or the link, unflagged;
//   - come through the federation link, unflagged, after a kill -9 of
//     railmq (the id published before it), while another delivery of the
//     id is flagged (by RabbitMQ, or at the upstream): the copy the link
//     had forwarded before the kill, which railmq kept, while RabbitMQ,
//     the link's ack gone with railmq, handed the message out again. On
//     railmq that copy was never delivered before, so unflagged is
//     right; it may come after RabbitMQ's flagged redelivery, as a
//     repeat.
//
// So railmq itself never delivers an id again unflagged (its own
// redeliveries after its kill must be flagged, as the fault suite
// demands), and a repeat with no kill before it must be flagged.
func (l *migLoad) check() migVerdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	var v migVerdict
	for id := range l.h.confirmed {
		if l.h.delivered[id] == 0 && !l.h.returned[id] {
			v.lost = append(v.lost, id)
		}
	}
	killBetween := func(b int32, from, to time.Time) bool {
		for _, o := range l.outage {
			if (b < 0 || o.broker == b) && o.from.After(from) && o.from.Before(to) {
				return true
			}
		}
		return false
	}
	for id, ds := range l.dels {
		if len(ds) < 2 {
			continue
		}
		v.duplicated++
		for i, d := range ds[1:] {
			switch {
			case d.redelivered:
				v.flagged++
			case d.hop == "federation" && d.hopFlagged && (!d.ackedBefore || killBetween(-1, l.pubAt[id], d.at)):
				v.hopFlag++
			case killBetween(onRabbit, l.pubAt[id], d.at):
				v.byRabbitKill++
			case d.hop == "federation" && killBetween(onRailmq, l.pubAt[id], d.at) && slices.ContainsFunc(ds, func(o migDelivery) bool {
				return o.redelivered || o.hopFlagged
			}):
				v.keptByRailmq++
			default:
				v.unexplained = append(v.unexplained, id)
				if len(v.why) < 10 {
					v.why = append(v.why, fmt.Sprintf("id %d published on %s at %s: %s", id, brokerName[l.pubOn[id]],
						l.since(l.pubAt[id]), l.describe(ds[:i+2])))
				}
			}
		}
	}
	sort.Slice(v.lost, func(i, j int) bool { return v.lost[i] < v.lost[j] })
	return v
}

func (l *migLoad) since(t time.Time) string { return fmt.Sprintf("%.2fs", t.Sub(l.t0).Seconds()) }

func (l *migLoad) describe(ds []migDelivery) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%s on %s to %s (redelivered %v, hop %q flagged %v, acked before %v)",
			l.since(d.at), brokerName[d.broker], d.consumer, d.redelivered, d.hop, d.hopFlagged, d.ackedBefore))
	}
	return strings.Join(parts, "; ")
}
