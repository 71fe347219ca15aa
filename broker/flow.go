package broker

import (
	"time"

	"go.uber.org/zap"
)

// flowShown is how long a connection shows the "flow" state after it was
// last held back, as RabbitMQ's credit_flow:state/0 (one second).
const flowShown = time.Second

// paceStall is how long a publisher waits for the consumers' pace while
// they take no message, before it goes on (waitFlow).
const paceStall = 100 * time.Millisecond

// waitFlow is per-connection flow control: a queue this connection
// published into is behind (queue.Queue.Behind: its store writes or its
// inbox lag, or its consumers drain a paged backlog more slowly than it
// grows), so the reader stops reading until the queue has caught up, and
// TCP backpressure slows this publisher alone, as RabbitMQ's credit flow
// does. Other connections go on. The intake does not depend on consumers,
// and a wait for their pace gives up when they stop taking messages, so
// waiting cannot wait for this connection's own acks. Called by the
// reader.
func (c *conn) waitFlow() {
	q := c.flowQ
	c.flowQ = nil
	if q.CaughtUp() {
		return
	}
	// What this reader delivered to consumers goes out before it waits.
	c.flushes.Flush()
	start := time.Now()
	c.flowAt.Store(start.UnixNano())
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	// A wait for the consumers' pace (queue.Queue.Behind) ends when
	// they take nothing for paceStall: they may wait for this very
	// connection's acks, which it does not read while it waits. The
	// stall is counted in the sleeps this loop asked for, not in wall
	// time: on a machine too busy to run the consumers on time this
	// loop's timers fire late too, and consumers only slow to be
	// scheduled are not taken for stuck ones (each such give-up let the
	// backlog grow by another window).
	dlv, quiet := q.Delivered(), time.Duration(0)
	rate := paceFloorRate(c.heartbeat)
	for d := 50 * time.Microsecond; !q.CaughtUp(); d = min(2*d, 5*time.Millisecond) {
		if rate > 0 && q.Pacing() && c.floor.allows(time.Now(), rate) {
			break // read on: the floor's due (paceFloor)
		}
		t.Reset(d)
		select {
		case <-t.C:
		case <-c.srv.stop:
			return
		}
		c.runRequests()
		if c.closing.Load() {
			return
		}
		quiet += d
		if n := q.Delivered(); n != dlv {
			dlv, quiet = n, 0
		} else if quiet >= paceStall && q.Pacing() {
			q.PaceReset()
			quiet = 0
		}
		c.flowAt.Store(time.Now().UnixNano())
	}
	if w := time.Since(start); w > time.Second {
		c.log.Debug("publisher held back by flow control", zap.String("queue", q.Name()), zap.Duration("for", w))
	}
}

// inFlow reports whether the connection was held back by flow control in
// the last flowShown.
func (c *conn) inFlow(now time.Time) bool {
	at := c.flowAt.Load()
	return at != 0 && now.UnixNano()-at < int64(flowShown)
}

// paceFloorQueued is what a client may have queued in its socket's send
// buffer: Linux's largest (net.ipv4.tcp_wmem's default maximum, 4 MiB),
// which a client's socket autotunes up to on a fast link. A client's
// write blocked on a full send buffer returns only once a third of it
// went out (the kernel wakes a writer then).
const paceFloorQueued = 4 << 20

// paceFloorRate is the floor of pacing, in bytes a second, for a
// connection with this heartbeat (0: none, no heartbeats). A client
// whose publish waits in a blocked write cannot send its heartbeats
// either: amqp091-go's heartbeater waits behind the publish for the
// socket, and while it waits it does not move its read deadline on (1.5
// heartbeats), so a write blocked for about a heartbeat ends in the
// client dropping the connection with an i/o timeout, although frames
// arrive. Pacing therefore reads at least a third of the largest send
// buffer every quarter heartbeat: a client's blocked write returns
// within a quarter heartbeat however slow the consumers are. With the
// 60 s a broker proposes that is 91 KiB/s; with a client's 3 s, 1.8
// MiB/s. RabbitMQ's credit flow has no floor, but it holds publishers
// only while a queue process is busy, not to consumers' pace.
func paceFloorRate(heartbeat time.Duration) float64 {
	if heartbeat <= 0 {
		return 0
	}
	return paceFloorQueued / 3 / (heartbeat.Seconds() / 4)
}

// paceFloor is a token bucket of bytes the reader may read while paced,
// filled at paceFloorRate: reader-owned.
type paceFloor struct {
	in     int64     // frame bytes dispatched so far
	read   int64     // in, at the last look
	credit float64   // bytes the floor lets through now (negative: owed)
	at     time.Time // the last look; zero: never paced
}

// allows reports whether the floor lets the reader read on at now. The
// bucket holds a second's worth at most, and a connection that was not
// paced for a second begins afresh.
func (p *paceFloor) allows(now time.Time, rate float64) bool {
	if p.at.IsZero() || now.Sub(p.at) > time.Second {
		p.credit, p.read = 0, p.in
	} else {
		p.credit += rate * now.Sub(p.at).Seconds()
		p.credit -= float64(p.in - p.read)
		p.read = p.in
		p.credit = min(max(p.credit, -rate), rate)
	}
	p.at = now
	return p.credit > 0
}
