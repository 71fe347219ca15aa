package vhost

import (
	"reflect"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// roundTrip encodes and decodes props, as a dead-lettered message's
// properties are when it dies again.
func roundTrip(t *testing.T, p amqp.Properties) amqp.Properties {
	t.Helper()
	out, err := amqp.DecodeProperties(p.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// death is an x-death entry as a test expects it, without its time.
type death struct {
	count      int64
	reason     string
	queue      string
	exchange   string
	keys       []any
	expiration any // nil: no original-expiration
}

func fieldNames(e amqp.OrderedTable) []string {
	var ns []string
	for _, f := range e {
		ns = append(ns, f.Name)
	}
	return ns
}

// checkDeaths checks p's x-death header, entry by entry in order, each
// entry's fields in RabbitMQ's order.
func checkDeaths(t *testing.T, p amqp.Properties, want []death, before time.Time) {
	t.Helper()
	got, ok := p.Headers["x-death"].([]any)
	if !ok || len(got) != len(want) {
		t.Fatalf("x-death %#v, want %d entries", p.Headers["x-death"], len(want))
	}
	for i, w := range want {
		e, ok := got[i].(amqp.OrderedTable)
		if !ok {
			t.Fatalf("entry %d is %T", i, got[i])
		}
		names := []string{"count", "reason", "queue", "time", "exchange", "routing-keys"}
		if w.expiration != nil {
			names = append(names, "original-expiration")
		}
		if !reflect.DeepEqual(fieldNames(e), names) {
			t.Fatalf("entry %d fields %v, want %v", i, fieldNames(e), names)
		}
		f := map[string]any{}
		for _, x := range e {
			f[x.Name] = x.Value
		}
		if f["count"] != w.count || f["reason"] != w.reason || f["queue"] != w.queue || f["exchange"] != w.exchange ||
			!reflect.DeepEqual(f["routing-keys"], w.keys) || f["original-expiration"] != w.expiration {
			t.Fatalf("entry %d %v, want %+v", i, e, w)
		}
		ts, ok := f["time"].(time.Time)
		if !ok || ts.Location() != time.UTC || ts.Before(before.Truncate(time.Second)) || ts.After(time.Now()) || ts.Nanosecond() != 0 {
			t.Fatalf("entry %d time %v (%T)", i, f["time"], f["time"])
		}
	}
}

func TestAddDeath(t *testing.T) {
	start := time.Now()
	type step struct {
		queue, reason, exchange string
		keys                    []string
	}
	for _, tc := range []struct {
		name   string
		props  amqp.Properties
		steps  []step
		want   []death
		first  [3]string // x-first-death-queue, -reason, -exchange
		last   [3]string
		others amqp.Table // other headers that must come through
	}{
		{
			name:  "first death",
			props: amqp.Properties{Flags: amqp.FlagContentType, ContentType: "text/plain"},
			steps: []step{{"q1", queue.ReasonRejected, "ex", []string{"rk"}}},
			want:  []death{{1, "rejected", "q1", "ex", []any{"rk"}, nil}},
			first: [3]string{"q1", "rejected", "ex"}, last: [3]string{"q1", "rejected", "ex"},
		},
		{
			name: "per-message expiration moves to original-expiration",
			props: amqp.Properties{Flags: amqp.FlagExpiration | amqp.FlagHeaders, Expiration: "5000",
				Headers: amqp.Table{"app": "kept"}},
			steps: []step{{"q1", queue.ReasonExpired, "", []string{"q1"}}},
			want:  []death{{1, "expired", "q1", "", []any{"q1"}, "5000"}},
			first: [3]string{"q1", "expired", ""}, last: [3]string{"q1", "expired", ""},
			others: amqp.Table{"app": "kept"},
		},
		{
			name:  "CC keys listed after the routing key",
			props: amqp.Properties{},
			steps: []step{{"q1", queue.ReasonMaxLen, "ex", []string{"rk", "cc1", "cc2"}}},
			want:  []death{{1, "maxlen", "q1", "ex", []any{"rk", "cc1", "cc2"}, nil}},
			first: [3]string{"q1", "maxlen", "ex"}, last: [3]string{"q1", "maxlen", "ex"},
		},
		{
			name:  "repeated death increments its entry",
			props: amqp.Properties{Flags: amqp.FlagExpiration, Expiration: "100"},
			steps: []step{
				{"q1", queue.ReasonExpired, "ex", []string{"rk"}},
				{"q1", queue.ReasonExpired, "dlx", []string{"other"}},
				{"q1", queue.ReasonExpired, "dlx", []string{"other"}},
			},
			// The entry keeps its first exchange, keys and expiration.
			want:  []death{{3, "expired", "q1", "ex", []any{"rk"}, "100"}},
			first: [3]string{"q1", "expired", "ex"}, last: [3]string{"q1", "expired", "dlx"},
		},
		{
			name:  "another queue's death goes first",
			props: amqp.Properties{},
			steps: []step{
				{"q1", queue.ReasonExpired, "ex", []string{"rk"}},
				{"q2", queue.ReasonRejected, "dlx", []string{"rk"}},
			},
			want: []death{
				{1, "rejected", "q2", "dlx", []any{"rk"}, nil},
				{1, "expired", "q1", "ex", []any{"rk"}, nil},
			},
			first: [3]string{"q1", "expired", "ex"}, last: [3]string{"q2", "rejected", "dlx"},
		},
		{
			name:  "same queue, other reason: a new entry",
			props: amqp.Properties{},
			steps: []step{
				{"q1", queue.ReasonExpired, "ex", []string{"rk"}},
				{"q1", queue.ReasonRejected, "dlx", []string{"rk"}},
			},
			want: []death{
				{1, "rejected", "q1", "dlx", []any{"rk"}, nil},
				{1, "expired", "q1", "ex", []any{"rk"}, nil},
			},
			first: [3]string{"q1", "expired", "ex"}, last: [3]string{"q1", "rejected", "dlx"},
		},
		{
			name:  "an incremented entry moves to the front",
			props: amqp.Properties{},
			steps: []step{
				{"q1", queue.ReasonExpired, "ex", []string{"rk"}},
				{"q2", queue.ReasonExpired, "dlx", []string{"rk"}},
				{"q3", queue.ReasonExpired, "dlx2", []string{"rk"}},
				{"q1", queue.ReasonExpired, "dlx3", []string{"rk"}},
			},
			want: []death{
				{2, "expired", "q1", "ex", []any{"rk"}, nil},
				{1, "expired", "q3", "dlx2", []any{"rk"}, nil},
				{1, "expired", "q2", "dlx", []any{"rk"}, nil},
			},
			first: [3]string{"q1", "expired", "ex"}, last: [3]string{"q1", "expired", "dlx3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.props
			var deaths []any
			for i, s := range tc.steps {
				if i > 0 {
					p = roundTrip(t, p)
				}
				deaths = addDeath(&p, s.queue, s.reason, s.exchange, s.keys)
			}
			if p.Flags&amqp.FlagHeaders == 0 || p.Flags&amqp.FlagExpiration != 0 || p.Expiration != "" {
				t.Fatalf("flags %016b expiration %q", p.Flags, p.Expiration)
			}
			checkDeaths(t, p, tc.want, start)
			// The returned deaths are the entries as tables, in order.
			if len(deaths) != len(tc.want) {
				t.Fatalf("returned %d deaths", len(deaths))
			}
			for i, w := range tc.want {
				if d, ok := deaths[i].(amqp.Table); !ok || d["queue"] != w.queue || d["reason"] != w.reason || d["count"] != w.count {
					t.Fatalf("returned death %d %v", i, deaths[i])
				}
			}
			h := p.Headers
			if h["x-first-death-queue"] != tc.first[0] || h["x-first-death-reason"] != tc.first[1] || h["x-first-death-exchange"] != tc.first[2] {
				t.Fatalf("x-first-death-* %v %v %v", h["x-first-death-queue"], h["x-first-death-reason"], h["x-first-death-exchange"])
			}
			if h["x-last-death-queue"] != tc.last[0] || h["x-last-death-reason"] != tc.last[1] || h["x-last-death-exchange"] != tc.last[2] {
				t.Fatalf("x-last-death-* %v %v %v", h["x-last-death-queue"], h["x-last-death-reason"], h["x-last-death-exchange"])
			}
			for k, v := range tc.others {
				if h[k] != v {
					t.Fatalf("header %s = %v, want %v", k, h[k], v)
				}
			}
			if n := 7 + len(tc.others); len(h) != n {
				t.Fatalf("%d headers, want %d: %v", len(h), n, h)
			}
		})
	}
}

// TestAddDeathCopies: the headers and x-death entries of the message that
// died are not changed (other queues may hold it).
func TestAddDeathCopies(t *testing.T) {
	entry := amqp.Table{"count": int64(1), "reason": "expired", "queue": "q1", "exchange": "", "routing-keys": []any{"q1"}}
	h := amqp.Table{"x-death": []any{entry}, "app": "a"}
	p := amqp.Properties{Flags: amqp.FlagHeaders, Headers: h}
	addDeath(&p, "q1", queue.ReasonExpired, "", []string{"q1"})
	if len(h) != 2 || entry["count"] != int64(1) || len(h["x-death"].([]any)) != 1 {
		t.Fatalf("input changed: %v", h)
	}
	if got := p.Headers["x-death"].([]any)[0].(amqp.OrderedTable)[0]; got.Name != "count" || got.Value != int64(2) {
		t.Fatalf("count field %v", got)
	}
}

func TestDeathEntryFieldOrder(t *testing.T) {
	e := deathEntry(amqp.Table{
		"zz": 1, "original-expiration": "5", "routing-keys": []any{}, "exchange": "x", "time": time.Unix(0, 0),
		"queue": "q", "reason": "r", "count": int64(1), "aa": 2,
	})
	want := []string{"count", "reason", "queue", "time", "exchange", "routing-keys", "original-expiration", "aa", "zz"}
	if !reflect.DeepEqual(fieldNames(e), want) {
		t.Fatalf("fields %v, want %v", fieldNames(e), want)
	}
}

func TestCCKeys(t *testing.T) {
	for _, tc := range []struct {
		h    amqp.Table
		want []string
	}{
		{nil, nil},
		{amqp.Table{"CC": "not an array"}, nil},
		{amqp.Table{"CC": []any{"a", int32(1), "b", []byte("c")}}, []string{"a", "b"}},
		{amqp.Table{"BCC": []any{"a"}}, nil},
	} {
		if got := ccKeys(tc.h); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ccKeys(%v) = %v, want %v", tc.h, got, tc.want)
		}
	}
}

func TestDeadLetterCycle(t *testing.T) {
	expired := amqp.Table{"queue": "q1", "reason": queue.ReasonExpired}
	rejected := amqp.Table{"queue": "q2", "reason": queue.ReasonRejected}
	for _, tc := range []struct {
		deaths       []any
		q            string
		in, rejected bool
	}{
		{nil, "q1", false, false},
		{[]any{expired}, "q1", true, false},
		{[]any{expired}, "q2", false, false},
		{[]any{expired, rejected}, "q2", true, true},
	} {
		if in, rej := inDeaths(tc.deaths, tc.q), anyRejected(tc.deaths); in != tc.in || rej != tc.rejected {
			t.Errorf("%v %s: inDeaths %v anyRejected %v, want %v %v", tc.deaths, tc.q, in, rej, tc.in, tc.rejected)
		}
	}
}
