package channel

import (
	"errors"
	"fmt"
	"testing"

	"github.com/railmq/railmq/amqp"
)

// confirmChannel opens channel 1 on a recording sink and puts it in
// confirm mode.
func confirmChannel(t *testing.T) (*Channel, *sink) {
	t.Helper()
	s := &sink{}
	c := New(Config{Number: 1, Sink: s})
	t.Cleanup(c.Close)
	if err := c.HandleMethod(&amqp.ConfirmSelect{}); err != nil {
		t.Fatal(err)
	}
	if ms := s.take(); len(ms) != 1 {
		t.Fatalf("confirm.select answered %v", ms)
	} else if _, ok := ms[0].(*amqp.ConfirmSelectOk); !ok {
		t.Fatalf("confirm.select answered %#v", ms[0])
	}
	return c, s
}

// publishStored numbers a publish that waits for the store, as route does
// for one with a durable queue, and returns what the store's committer
// reports its writes to.
func publishStored(c *Channel, writes int32) *pubConfirm {
	c.published++
	p := &pubConfirm{c: c, tag: c.published}
	p.pending.Store(writes)
	c.trackConfirm(p.tag)
	return p
}

// confirm is a basic.ack or basic.nack as sent.
type confirm struct {
	nack     bool
	tag      uint64
	multiple bool
}

func (f confirm) String() string {
	kind := "ack"
	if f.nack {
		kind = "nack"
	}
	if f.multiple {
		return fmt.Sprintf("%s(%d, multiple)", kind, f.tag)
	}
	return fmt.Sprintf("%s(%d)", kind, f.tag)
}

func ack(tag uint64, multiple bool) confirm { return confirm{tag: tag, multiple: multiple} }
func nack(tag uint64) confirm               { return confirm{nack: true, tag: tag} }

func confirms(t *testing.T, ms []amqp.Method) []confirm {
	t.Helper()
	var out []confirm
	for _, m := range ms {
		switch m := m.(type) {
		case *amqp.BasicAck:
			out = append(out, confirm{tag: m.DeliveryTag, multiple: m.Multiple})
		case *amqp.BasicNack:
			if m.Requeue {
				t.Errorf("basic.nack(%d) with requeue set", m.DeliveryTag)
			}
			out = append(out, confirm{nack: true, tag: m.DeliveryTag, multiple: m.Multiple})
		default:
			t.Errorf("unexpected %#v", m)
		}
	}
	return out
}

// outcomes reads confirms as a client does (multiple settles every tag
// still pending up to its tag, §3.1.4 of the confirms extension) and
// fails if one settles no pending tag or a tag twice.
func outcomes(t *testing.T, pending map[uint64]bool, cs []confirm, got map[uint64]string) {
	t.Helper()
	for _, c := range cs {
		kind := "ack"
		if c.nack {
			kind = "nack"
		}
		n := 0
		for tag := range pending {
			if tag == c.tag || (c.multiple && tag < c.tag) {
				got[tag] = kind
				delete(pending, tag)
				n++
			}
		}
		if n == 0 || (c.multiple && n < 2) {
			t.Errorf("%v settles %d pending publishes", c, n)
		}
	}
}

// TestConfirms drives a confirm-mode channel through publishes that are
// due at once (confirmNow: nothing to store), publishes that wait on the
// store (settled by its committer, in any order), and the writer's Flush,
// and checks the exact confirms sent at each flush: a run of acks goes out
// as one basic.ack (multiple when it covers more than one publish), a
// failed publish as a basic.nack of its own, and nothing is confirmed
// while an earlier publish is still pending.
func TestConfirms(t *testing.T) {
	// A step: "now" publishes with nothing to store; "stored" publishes
	// waiting on one write; "ok N" / "fail N" report publish N's write;
	// "flush" runs the writer's hooks and expects want.
	type step struct {
		op   string
		tag  uint64
		want []confirm
	}
	now := step{op: "now"}
	stored := step{op: "stored"}
	ok := func(tag uint64) step { return step{op: "ok", tag: tag} }
	fail := func(tag uint64) step { return step{op: "fail", tag: tag} }
	flush := func(want ...confirm) step { return step{op: "flush", want: want} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"one immediate", []step{now, flush(ack(1, false))}},
		{"a run of immediates is one multiple ack", []step{now, now, now, flush(ack(3, true))}},
		{"a run of stored acks is one multiple ack", []step{stored, stored, stored, stored, ok(1), ok(2), ok(3), ok(4), flush(ack(4, true))}},
		{"stored acks settled in reverse", []step{stored, stored, stored, ok(3), ok(2), ok(1), flush(ack(3, true))}},
		{"a nack in the middle of a run", []step{
			stored, stored, stored, stored, stored, ok(1), ok(2), fail(3), ok(4), ok(5),
			flush(ack(2, true), nack(3), ack(5, true))}},
		{"a nack first", []step{stored, stored, stored, fail(1), ok(2), ok(3), flush(nack(1), ack(3, true))}},
		{"a nack last", []step{stored, stored, stored, ok(1), ok(2), fail(3), flush(ack(2, true), nack(3))}},
		{"one ack each side of a nack", []step{stored, stored, stored, ok(1), fail(2), ok(3), flush(ack(1, false), nack(2), ack(3, false))}},
		{"a nack between immediates", []step{now, now, stored, now, fail(3), flush(ack(2, true), nack(3), ack(4, false))}},
		{"out of order: later settles wait", []step{
			stored, stored, stored, ok(3), ok(2), flush(),
			ok(1), flush(ack(3, true))}},
		{"an immediate behind a pending publish waits", []step{
			stored, now, flush(),
			ok(1), flush(ack(2, true))}},
		{"an immediate ahead of a pending publish goes", []step{
			now, stored, flush(ack(1, false)),
			ok(2), flush(ack(2, false))}},
		{"a nack waits for earlier publishes too", []step{
			stored, stored, fail(2), flush(),
			ok(1), flush(ack(1, false), nack(2))}},
		{"flushes between settles", []step{
			stored, stored, stored, ok(1), flush(ack(1, false)),
			ok(2), ok(3), flush(ack(3, true)),
			now, flush(ack(4, false))}},
		{"nothing due: nothing sent", []step{stored, stored, flush()}},
		{"a write reported twice confirms once", []step{stored, ok(1), flush(ack(1, false)), ok(1), flush()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := confirmChannel(t)
			pubs := map[uint64]*pubConfirm{}
			pending := map[uint64]bool{}
			settled := map[uint64]string{} // as the client sees them
			want := map[uint64]string{}    // as the publishes went
			for i, st := range tc.steps {
				switch st.op {
				case "now":
					c.confirmNow()
					pending[c.published], want[c.published] = true, "ack"
				case "stored":
					p := publishStored(c, 1)
					pubs[p.tag] = p
					pending[p.tag] = true
				case "ok", "fail":
					var err error
					want[st.tag] = "ack"
					if st.op == "fail" {
						err, want[st.tag] = errors.New("disk on fire"), "nack"
					}
					pubs[st.tag].pending.Store(1) // for "reported twice"
					pubs[st.tag].Done(err)
				case "flush":
					s.runWriter()
					got := confirms(t, s.take())
					if fmt.Sprint(got) != fmt.Sprint(st.want) {
						t.Fatalf("step %d: sent %v, want %v", i, got, st.want)
					}
					outcomes(t, pending, got, settled)
				}
			}
			// After the last flush, a publish is settled, as it went, once
			// it and every earlier one have an outcome; others are not.
			for tag := uint64(1); tag <= c.published; tag++ {
				w := ""
				if allBefore(want, tag) {
					w = want[tag]
				}
				if settled[tag] != w {
					t.Errorf("publish %d: client saw %q, want %q", tag, settled[tag], w)
				}
			}
		})
	}
}

// allBefore reports whether every publish up to tag has an outcome.
func allBefore(want map[uint64]string, tag uint64) bool {
	for n := uint64(1); n <= tag; n++ {
		if _, ok := want[n]; !ok {
			return false
		}
	}
	return true
}

// TestConfirmsOneFlushPerBatch: however many confirms become due before
// the writer gets to them, they have it run Flush once, and go out as one
// basic.ack (STYLE.md, Confirms: batching comes from load).
func TestConfirmsOneFlushPerBatch(t *testing.T) {
	c, s := confirmChannel(t)
	var ps []*pubConfirm
	for range 100 {
		ps = append(ps, publishStored(c, 1))
	}
	c.confirmNow() // 101
	for _, p := range ps {
		p.Done(nil)
	}
	if n := s.runWriter(); n != 1 {
		t.Fatalf("Flush scheduled %d times for one batch", n)
	}
	if got := confirms(t, s.take()); fmt.Sprint(got) != fmt.Sprint([]confirm{ack(101, true)}) {
		t.Fatalf("sent %v", got)
	}
	// Due again: scheduled again.
	c.confirmNow()
	if n := s.runWriter(); n != 1 {
		t.Fatalf("Flush scheduled %d times for the next batch", n)
	}
	if got := confirms(t, s.take()); fmt.Sprint(got) != fmt.Sprint([]confirm{ack(102, false)}) {
		t.Fatalf("sent %v", got)
	}
}

// TestPubConfirmDone: a publish waiting on several writes (its record
// and each durable queue's entry) is confirmed by the last one, and
// nacked if any failed.
func TestPubConfirmDone(t *testing.T) {
	for _, tc := range []struct {
		name string
		errs []error
		want []confirm
	}{
		{"one write", []error{nil}, []confirm{ack(1, false)}},
		{"three writes", []error{nil, nil, nil}, []confirm{ack(1, false)}},
		{"the first fails", []error{errors.New("x"), nil, nil}, []confirm{nack(1)}},
		{"the last fails", []error{nil, nil, errors.New("x")}, []confirm{nack(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := confirmChannel(t)
			p := publishStored(c, int32(len(tc.errs)))
			for i, err := range tc.errs {
				p.Done(err)
				s.runWriter()
				got := confirms(t, s.take())
				if i < len(tc.errs)-1 {
					if len(got) != 0 {
						t.Fatalf("sent %v after %d of %d writes", got, i+1, len(tc.errs))
					}
					continue
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("sent %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestConfirmsAfterClose: once the channel is closed, nothing more is
// sent on its number, which the client may already be reusing: not by a
// Flush hook the writer runs after Close, nor for writes that become
// durable later. The reader's own Flush before a close sends what is due.
func TestConfirmsAfterClose(t *testing.T) {
	t.Run("hook run after close", func(t *testing.T) {
		c, s := confirmChannel(t)
		p := publishStored(c, 1)
		c.confirmNow()
		p.Done(nil) // schedules the hook
		c.Close()
		s.runWriter()
		if ms := s.take(); len(ms) != 0 {
			t.Fatalf("sent %v after close", ms)
		}
	})
	t.Run("settled after close", func(t *testing.T) {
		c, s := confirmChannel(t)
		p := publishStored(c, 1)
		c.Close()
		p.Done(nil)
		c.Flush()
		s.runWriter()
		if ms := s.take(); len(ms) != 0 {
			t.Fatalf("sent %v after close", ms)
		}
	})
	t.Run("flushed before close", func(t *testing.T) {
		c, s := confirmChannel(t)
		p := publishStored(c, 1)
		publishStored(c, 1) // never durable
		p.Done(nil)
		c.Flush() // the reader, before closing (broker closeChannel)
		c.Close()
		s.runWriter() // the hook scheduled by Done
		if got := confirms(t, s.take()); fmt.Sprint(got) != fmt.Sprint([]confirm{ack(1, false)}) {
			t.Fatalf("sent %v", got)
		}
	})
}
