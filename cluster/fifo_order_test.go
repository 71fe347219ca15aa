package cluster

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
)

// props encodes basic properties with the given fields set (AMQP 0-9-1
// §4.2.6.1, flags first): content-type, headers (a table of raw bytes),
// delivery-mode and priority, each only when given (priority < 0: none).
func props(contentType string, headers []byte, mode byte, priority int) []byte {
	var flags uint16
	var b []byte
	if contentType != "" {
		flags |= 1 << 15
		b = append(append(b, byte(len(contentType))), contentType...)
	}
	if headers != nil {
		flags |= 1 << 13
		b = append(b, byte(len(headers)>>24), byte(len(headers)>>16), byte(len(headers)>>8), byte(len(headers)))
		b = append(b, headers...)
	}
	if mode != 0 {
		flags |= 1 << 12
		b = append(b, mode)
	}
	if priority >= 0 {
		flags |= 1 << 11
		b = append(b, byte(priority))
	}
	return append([]byte{byte(flags >> 8), byte(flags)}, b...)
}

func pmsg(body string, priority int) Message {
	return Message{RoutingKey: "q", Body: []byte(body), Props: props("", nil, 0, priority)}
}

func drainGet(f *Fifo) []string {
	var out []string
	for i := 0; ; i++ {
		e := f.Apply(Dequeue(fmt.Sprintf("g%d", i), true))
		if len(e.Deliveries) == 0 {
			return out
		}
		out = append(out, string(e.Deliveries[0].Msg.Body))
	}
}

// TestMsgPriority: a message's level is its priority property, capped at
// 31, or 4 without one, whatever fields come before it
// (rabbit_fifo.erl msg_priority at v4.3.5: max(0, min(P, ?MAX_PRIORITY)),
// else ?DEFAULT_PRIORITY 4).
func TestMsgPriority(t *testing.T) {
	hdr := []byte{3, 'k', 'e', 'y', 'S', 0, 0, 0, 1, 'v'} // {"key": "v"}
	for _, tc := range []struct {
		props []byte
		want  uint8
	}{
		{nil, 4},
		{props("", nil, 0, -1), 4},
		{props("", nil, 0, 0), 0},
		{props("", nil, 0, 9), 9},
		{props("", nil, 0, 31), 31},
		{props("", nil, 0, 32), 31},
		{props("", nil, 0, 255), 31},
		{props("text/plain", hdr, 2, 7), 7},
		{props("text/plain", hdr, 2, -1), 4},
		{props("", hdr, 0, 12)[:8], 4}, // cut short: no priority to read
	} {
		if got := msgPriority(tc.props); got != tc.want {
			t.Errorf("msgPriority(%x) = %d, want %d", tc.props, got, tc.want)
		}
	}
}

// TestFifoPriorityStrict32: ready messages go out by priority, strictly,
// 32 levels (0-31; above 31 counts as 31; none counts as 4), in arrival
// order within a level, with no x-max-priority (RabbitMQ 4.3,
// rabbit_fifo_pq.erl at v4.3.5; 4.0-4.2 had two levels served 2:1, and
// 3.10.8 none: it answered the FIFO order
// [0:p0 1:p9 2:p4 3:p5 4:p40 5:p1] for these publishes).
func TestFifoPriorityStrict32(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1})
	for i, p := range []int{0, 9, 4, 5, 40, 1, -1, 31, 30, 4} {
		f.Apply(Enqueue(int64(i), pmsg(fmt.Sprintf("%d:p%d", i, p), p)))
	}
	want := []string{"4:p40", "7:p31", "8:p30", "1:p9", "3:p5", "2:p4", "6:p-1", "9:p4", "5:p1", "0:p0"}
	if got := drainGet(f); !reflect.DeepEqual(got, want) {
		t.Fatalf("delivery order %v, want %v", got, want)
	}
}

// TestFifoPriorityReturnsFirst: returned messages go before every ready
// one, whatever their priorities (rabbit_fifo take_next_msg: the returns
// queue, then the priority queue); a consumer's messages released unsent
// go back to their level, in place.
func TestFifoPriorityReturnsFirst(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1})
	f.Apply(Enqueue(1, pmsg("low", 1)))
	e := f.Apply(Checkout("a", 1))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"a:low"}) {
		t.Fatalf("got %v", got)
	}
	low := e.Deliveries[0].ID
	f.Apply(Cancel("a"))
	f.Apply(Enqueue(2, pmsg("high", 20)))
	f.Apply(Enqueue(3, pmsg("mid", 10)))
	f.Apply(Return("a", low))
	if got := drainGet(f); !reflect.DeepEqual(got, []string{"low", "high", "mid"}) {
		t.Fatalf("after a return: %v, want the returned low first, then high, mid", got)
	}

	g := NewFifo(FifoConfig{DeliveryLimit: -1})
	g.Apply(Enqueue(1, pmsg("h1", 9)))
	g.Apply(Enqueue(2, pmsg("h2", 9)))
	g.Apply(Enqueue(3, pmsg("l", 2)))
	e = g.Apply(Checkout("b", 1))
	g.Apply(Cancel("b"))
	g.Apply(Release("b", e.Deliveries[0].ID)) // never written: back in place, uncounted
	if got := drainGet(g); !reflect.DeepEqual(got, []string{"h1", "h2", "l"}) {
		t.Fatalf("after a release: %v", got)
	}
}

// TestFifoPriorityExpiresEachLevel: message TTL expires the heads of the
// returns and of every level, not only the next to go
// (rabbit_fifo expire_batch with rabbit_fifo_pq:take_while at v4.3.5).
func TestFifoPriorityExpiresEachLevel(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1})
	f.Apply(Enqueue(100, Message{Body: []byte("hi-keep"), Props: props("", nil, 0, 9)}))
	f.Apply(Enqueue(100, Message{Body: []byte("lo-ttl"), Props: props("", nil, 0, 1), TTL: 10}))
	f.Apply(Enqueue(100, Message{Body: []byte("mid-ttl"), Props: props("", nil, 0, 5), TTL: 10}))
	if !f.Expired(110) {
		t.Fatal("Expired(110) false: the heads of levels 5 and 1 expired at 110")
	}
	e := f.Apply(Tick(110))
	if got := reasons(e.DeadLetters); !reflect.DeepEqual(got, []string{"expired:mid-ttl", "expired:lo-ttl"}) {
		t.Fatalf("tick expired %v", got)
	}
	if f.Expired(1 << 40) {
		t.Fatal("hi-keep has no TTL")
	}
}

// TestFifoPrioritySnapshot: a restored member serves in the same order,
// and one restored from an image of before the levels (ready ids in
// arrival order) sorts them into levels.
func TestFifoPrioritySnapshot(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1})
	for i, p := range []int{1, 7, -1, 7, 30} {
		f.Apply(Enqueue(int64(i), pmsg(fmt.Sprint(i), p)))
	}
	e := f.Apply(Checkout("a", 1))
	f.Apply(Cancel("a"))
	f.Apply(Return("a", e.Deliveries[0].ID)) // 4 (p30) out and back: returned
	var buf bytes.Buffer
	if err := f.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	g, err := RestoreFifo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"4", "1", "3", "2", "0"}
	if got := drainGet(g); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored order %v, want %v", got, want)
	}
	if got := drainGet(f); !reflect.DeepEqual(got, want) {
		t.Fatalf("original order %v, want %v", got, want)
	}
}

// TestFifoConsumerPriorities: competing consumers of a higher x-priority
// take messages while they have credit; lower ones get what is left;
// equals share round robin (rabbit_fifo's service queue at v4.3.5;
// RabbitMQ 3.10.8 asked, prefetch 2 each, priorities 1 and 5, 5
// messages: "lo [2 3] hi [0 1]").
func TestFifoConsumerPriorities(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1})
	f.Apply(CheckoutPriority("lo", 2, 1))
	f.Apply(CheckoutPriority("hi", 2, 5))
	var got []string
	for i := 0; i < 5; i++ {
		got = append(got, bodies(f.Apply(Enqueue(int64(i), msg(fmt.Sprint(i)))).Deliveries)...)
	}
	if want := []string{"hi:0", "hi:1", "lo:2", "lo:3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("deliveries %v, want %v", got, want)
	}
	// hi settles one: the ready 4 goes to hi, not lo.
	e := f.Apply(Settle("hi", 1))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"hi:4"}) {
		t.Fatalf("after hi settled: %v", got)
	}
	g := NewFifo(FifoConfig{DeliveryLimit: -1})
	g.Apply(CheckoutPriority("a", 0, 3))
	g.Apply(CheckoutPriority("b", 0, 3))
	g.Apply(CheckoutPriority("c", 0, 1))
	got = nil
	for i := 0; i < 4; i++ {
		got = append(got, bodies(g.Apply(Enqueue(int64(i), msg(fmt.Sprint(i)))).Deliveries)...)
	}
	if want := []string{"a:0", "b:1", "a:2", "b:3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("equal priorities: %v, want %v", got, want)
	}
}

// TestFifoSingleActiveConsumer: one consumer active, the others wait;
// when it goes, the waiting one of the highest priority (the earliest
// among equals) takes over; one of a higher priority takes over once the
// active one has nothing checked out, which takes no new messages
// meanwhile (rabbit_fifo.erl activate_next_consumer at v4.3.5; 3.10.8
// has no takeover: asked, the low one went on getting messages).
func TestFifoSingleActiveConsumer(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1, SingleActive: true})
	f.Apply(CheckoutPriority("a.", 10, 1))
	f.Apply(CheckoutPriority("b.", 10, 1))
	var got []string
	for i := 1; i <= 2; i++ {
		got = append(got, bodies(f.Apply(Enqueue(int64(i), msg(fmt.Sprint(i)))).Deliveries)...)
	}
	if want := []string{"a.:1", "a.:2"}; !reflect.DeepEqual(got, want) || f.Active() != "a." {
		t.Fatalf("first consumer active: %v (active %q), want %v", got, f.Active(), want)
	}
	// A higher one attaches: low has 2 unacked, so it quiesces: message 3
	// waits.
	if e := f.Apply(CheckoutPriority("h.", 10, 5)); len(e.Deliveries) != 0 {
		t.Fatalf("high attached: %v", bodies(e.Deliveries))
	}
	if e := f.Apply(Enqueue(3, msg("3"))); len(e.Deliveries) != 0 || f.Active() != "a." {
		t.Fatalf("while low drains: %v, active %q; want nothing delivered, low still active", bodies(e.Deliveries), f.Active())
	}
	if e := f.Apply(Settle("a.", 1)); len(e.Deliveries) != 0 {
		t.Fatalf("low settled 1 of 2: %v", bodies(e.Deliveries))
	}
	// Its last one back to the queue (a requeue counts as drained too):
	// high takes over, and gets the returned one first.
	e := f.Apply(Return("a.", 2))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"h.:2", "h.:3"}) || f.Active() != "h." {
		t.Fatalf("low drained: %v, active %q; want high to take 2 and 3", got, f.Active())
	}
	// The active one cancelled: the earliest waiting of the highest
	// priority takes over at once, though high's messages stay with it.
	f.Apply(Cancel("h."))
	if f.Active() != "a." {
		t.Fatalf("after high's cancel, active %q, want a. (before b.)", f.Active())
	}
	if e := f.Apply(Enqueue(4, msg("4"))); !reflect.DeepEqual(bodies(e.Deliveries), []string{"a.:4"}) {
		t.Fatalf("after cancel: %v", bodies(e.Deliveries))
	}
	// The active one down: its messages return, to the next one.
	e = f.Apply(Down("a.", ""))
	if got := bodies(e.Deliveries); !reflect.DeepEqual(got, []string{"b.:4"}) || f.Active() != "b." {
		t.Fatalf("low down: %v, active %q", got, f.Active())
	}
	// An equal priority newcomer waits; without consumers no one is
	// active.
	f.Apply(CheckoutPriority("e.", 10, 1))
	if f.Active() != "b." {
		t.Fatalf("an equal newcomer took over: %q", f.Active())
	}
	f.Apply(Down("b.", ""))
	f.Apply(Cancel("e."))
	if f.Active() != "" {
		t.Fatalf("no consumers, active %q", f.Active())
	}
}

// TestFifoSingleActiveSwapsIdle: a higher-priority consumer takes over at
// once from an active one with nothing checked out.
func TestFifoSingleActiveSwapsIdle(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1, SingleActive: true})
	f.Apply(CheckoutPriority("low", 1, 0))
	f.Apply(CheckoutPriority("high", 1, 2))
	if f.Active() != "high" {
		t.Fatalf("active %q, want high", f.Active())
	}
	if e := f.Apply(Enqueue(1, msg("1"))); !reflect.DeepEqual(bodies(e.Deliveries), []string{"high:1"}) {
		t.Fatalf("got %v", bodies(e.Deliveries))
	}
	// high at its prefetch: low waits all the same.
	if e := f.Apply(Enqueue(2, msg("2"))); len(e.Deliveries) != 0 {
		t.Fatalf("a waiting consumer got %v", bodies(e.Deliveries))
	}
}

// TestFifoMaxLengthBytesCountsReady: x-max-length-bytes counts ready
// messages only, not those checked out (rabbit_fifo msg_bytes_enqueue).
// RabbitMQ 3.10.8 asked, x-max-length-bytes 10, drop-head: AAAAAA
// checked out to a consumer, then BBBBBB and CCCCCC published: CCCCCC
// left, BBBBBB dead-lettered with reason maxlen.
func TestFifoMaxLengthBytesCountsReady(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1, MaxLengthBytes: 10})
	f.Apply(Enqueue(1, msg("AAAAAA")))
	f.Apply(Checkout("c", 1))
	f.Apply(Cancel("c"))
	if e := f.Apply(Enqueue(2, msg("BBBBBB"))); len(e.DeadLetters) != 0 {
		t.Fatalf("BBBBBB: dropped %v; 6 bytes ready of 10", reasons(e.DeadLetters))
	}
	e := f.Apply(Enqueue(3, msg("CCCCCC")))
	if got := reasons(e.DeadLetters); !reflect.DeepEqual(got, []string{"maxlen:BBBBBB"}) {
		t.Fatalf("CCCCCC: dropped %v, want BBBBBB", got)
	}
	if got := drainGet(f); !reflect.DeepEqual(got, []string{"CCCCCC"}) || f.Len() != 1 {
		t.Fatalf("left %v (len %d), want CCCCCC ready and AAAAAA checked out", got, f.Len())
	}
}

// TestFifoDropHeadAfterDeliveries: drop-head drops what is left ready once
// the command's deliveries are made (rabbit_fifo evaluate_limit follows
// checkout), and it drops the message served next: a returned one, then
// the highest priority.
func TestFifoDropHeadAfterDeliveries(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1, MaxLength: 1})
	f.Apply(Checkout("c", 1))
	e := f.Apply(Enqueue(1, msg("1")))
	e2 := f.Apply(Enqueue(2, msg("2")))
	if len(e.DeadLetters)+len(e2.DeadLetters) != 0 || !reflect.DeepEqual(bodies(e.Deliveries), []string{"c:1"}) {
		t.Fatalf("one delivered, one ready of 1: %+v %+v", e, e2)
	}
	e = f.Apply(Enqueue(3, pmsg("3", 9)))
	if got := reasons(e.DeadLetters); !reflect.DeepEqual(got, []string{"maxlen:3"}) {
		t.Fatalf("dropped %v, want 3: the highest priority goes next, so it goes first", got)
	}
}

// TestFifoRejectPublishSoftLimit: reject-publish refuses publishes from
// the one after the publish that went over the limit until the ready
// messages are back at 80% of it (rabbit_fifo is_below_soft_limit,
// ?LOW_LIMIT 0.8; RabbitMQ 3.10.8 asked, x-max-length 2: after one of
// the 3 was taken and acked, a publish was still nacked).
func TestFifoRejectPublishSoftLimit(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1, MaxLength: 5, RejectPublish: true})
	for i := 1; i <= 6; i++ {
		if e := f.Apply(Enqueue(int64(i), msg(fmt.Sprint(i)))); !e.Accepted {
			t.Fatalf("publish %d refused", i)
		}
	}
	if e := f.Apply(Enqueue(7, msg("7"))); e.Accepted || !f.Blocked() {
		t.Fatal("publish 7 taken over the limit")
	}
	f.Apply(Dequeue("g1", true)) // 5 ready: not over, not at 80% (4)
	if e := f.Apply(Enqueue(8, msg("8"))); e.Accepted {
		t.Fatal("publish taken at 5 ready, above 80% of 5")
	}
	f.Apply(Dequeue("g2", true)) // 4 ready: at 80%
	if e := f.Apply(Enqueue(9, msg("9"))); !e.Accepted || f.Blocked() {
		t.Fatal("publish refused at 4 ready, 80% of 5")
	}
	b := NewFifo(FifoConfig{DeliveryLimit: -1, MaxLengthBytes: 10, RejectPublish: true})
	b.Apply(Enqueue(1, msg("123456")))
	if e := b.Apply(Enqueue(2, msg("123456"))); !e.Accepted {
		t.Fatal("the publish going over the byte limit is taken")
	}
	if e := b.Apply(Enqueue(3, msg("1"))); e.Accepted {
		t.Fatal("a publish after the byte limit was passed is refused")
	}
}

// TestFifoUnused: x-expires runs from the last use (a consumer attaching
// or leaving, a basic.get; Touch stamps the start), never while a
// consumer is attached; a publish is no use (rabbit_fifo is_expired;
// RabbitMQ 3.10.8 asked, x-expires 2000: a queue published to every 0.7 s
// was deleted, one read by basic.get so was not).
func TestFifoUnused(t *testing.T) {
	f := NewFifo(FifoConfig{DeliveryLimit: -1, Expires: 1000})
	if f.Unused(1 << 40) {
		t.Fatal("unused before any use was stamped")
	}
	f.Apply(Touch(100))
	if f.Unused(1100) || !f.Unused(1101) {
		t.Fatal("x-expires 1000 from 100: used at 1100, unused at 1101")
	}
	f.Apply(Enqueue(1000, msg("x")))
	if !f.Unused(1101) {
		t.Fatal("a publish counted as use")
	}
	d := Dequeue("g", true)
	d.Now = 1050
	f.Apply(d)
	if f.Unused(2050) || !f.Unused(2051) {
		t.Fatal("a get at 1050 is use")
	}
	c := Checkout("c", 1)
	c.Now = 3000
	f.Apply(c)
	if f.Unused(1 << 40) {
		t.Fatal("unused with a consumer attached")
	}
	x := Cancel("c")
	x.Now = 5000
	f.Apply(x)
	if f.Unused(6000) || !f.Unused(6001) {
		t.Fatal("the last consumer's cancel at 5000 starts the period")
	}
	if NewFifo(FifoConfig{}).Unused(1 << 40) {
		t.Fatal("no x-expires: never unused")
	}
}

// TestCheckoutPriorityCodec: a checkout with a priority has its own kind;
// one without keeps a plain checkout's bytes.
func TestCheckoutPriorityCodec(t *testing.T) {
	for _, tc := range []struct {
		c   Command
		hex string
	}{
		{CheckoutPriority("ctag", 10, 0), "02000000000000000000000004637461670000000a"},
		{CheckoutPriority("ctag", 10, 5), fmt.Sprintf("%02x000000000000000000000004637461670000000a00000005", cmdCheckoutPriority)},
		{CheckoutPriority("ctag", 10, -1), fmt.Sprintf("%02x000000000000000000000004637461670000000affffffff", cmdCheckoutPriority)},
		{Touch(7), fmt.Sprintf("%02x0000000000000007", cmdTouch)},
	} {
		got := tc.c.Encode(nil)
		if hex.EncodeToString(got) != tc.hex {
			t.Errorf("%+v encodes to %x, want %s", tc.c, got, tc.hex)
		}
		c, err := DecodeCommand(got)
		if err != nil || !reflect.DeepEqual(c, tc.c) {
			t.Errorf("%s decodes to %+v, %v", tc.hex, c, err)
		}
	}
	// A priority checkout carrying priority 0 is not what Encode writes.
	if _, err := DecodeCommand([]byte{cmdCheckoutPriority, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'c', 0, 0, 0, 1, 0, 0, 0, 0}); err == nil {
		t.Error("a priority checkout with priority 0 decoded")
	}
}

// TestFifoDeterministicOrdering: with message and consumer priorities,
// single active consumer and reject-publish, a member restored from a
// snapshot taken midway and fed the rest of the log (decoded from its
// encoding) makes the same effects and reaches the same state.
func TestFifoDeterministicOrdering(t *testing.T) {
	cfgs := []FifoConfig{
		{DeliveryLimit: 3, MaxLength: 50, MessageTTL: 500, SingleActive: true},
		{DeliveryLimit: 3, MaxLengthBytes: 200, RejectPublish: true, Expires: 100},
	}
	for seed := int64(1); seed <= 10; seed++ {
		log := randomLog(seed, 2000)
		for i := range log {
			c := &log[i]
			switch c.Kind {
			case cmdEnqueue:
				c.Msg.Props = props("", nil, 0, int(seed*7+int64(i))%40-3)
			case cmdCheckout:
				c.Priority = int32(i % 3)
				c.Now = int64(i)
			case cmdTick:
				if i%5 == 0 {
					*c = Touch(c.Now)
				}
			}
		}
		for _, cfg := range cfgs {
			a := NewFifo(cfg)
			var restored *Fifo
			for i, c := range log {
				dc, err := DecodeCommand(c.Encode(nil))
				if err != nil {
					t.Fatalf("seed %d entry %d: %v", seed, i, err)
				}
				ea := a.Apply(dc)
				if restored != nil {
					er := restored.Apply(dc)
					if fmt.Sprint(bodies(ea.Deliveries), reasons(ea.DeadLetters), ea.Accepted, ea.Refused) != fmt.Sprint(bodies(er.Deliveries), reasons(er.DeadLetters), er.Accepted, er.Refused) {
						t.Fatalf("seed %d %+v entry %d: the restored member's effects differ", seed, cfg, i)
					}
				}
				if i == len(log)/2 {
					restored = restoreCopy(t, a)
				}
			}
			if !sameState(t, a, restored) || a.ready.bytes != restored.ready.bytes {
				t.Fatalf("seed %d %+v: the restored member's final state differs", seed, cfg)
			}
		}
	}
}
