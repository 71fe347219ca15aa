package exchange

import (
	"encoding/binary"
	"errors"
	"strconv"
	"testing"

	"github.com/railmq/railmq/amqp"
)

func chx(args amqp.Table) *Exchange { return New("chx", ConsistentHash, false, false, false, args) }

// ringOf lists the snapshot's ring as dest:buckets.
func ringOf(e *Exchange) []string {
	var out []string
	start := int64(0)
	for _, r := range e.snap.Load().ring {
		out = append(out, r.dest.Name+":"+strconv.FormatInt(r.end-start, 10))
		start = r.end
	}
	return out
}

func sameList(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRingBindings follows the plugin's add_binding and remove_bindings:
// a destination joins the ring once, at the end, with its first binding's
// weight; removing any binding to it takes all its buckets out.
func TestRingBindings(t *testing.T) {
	e := chx(nil)
	steps := []struct {
		bind bool
		dest string
		key  string
		want []string
	}{
		{true, "a", "2", []string{"a:2"}},
		{true, "b", "3", []string{"a:2", "b:3"}},
		{true, "c", "1", []string{"a:2", "b:3", "c:1"}},
		{true, "b", "10", []string{"a:2", "b:3", "c:1"}}, // a second binding to b
		{false, "b", "10", []string{"a:2", "c:1"}},       // takes b out all the same
		{false, "b", "3", []string{"a:2", "c:1"}},
		{true, "b", "3", []string{"a:2", "c:1", "b:3"}},
		{false, "a", "2", []string{"c:1", "b:3"}},
	}
	for i, s := range steps {
		b := Binding{Dest: q(s.dest), Key: s.key}
		if s.bind {
			e.Bind(b)
		} else {
			e.Unbind(b)
		}
		if got := ringOf(e); !sameList(got, s.want) {
			t.Fatalf("step %d: ring %v, want %v", i, got, s.want)
		}
	}
	if n := e.RemoveDest(q("b")); n != 1 {
		t.Fatalf("RemoveDest: %d", n)
	}
	if got := ringOf(e); !sameList(got, []string{"c:1"}) {
		t.Fatalf("after RemoveDest: %v", got)
	}
	// Exchange destinations take buckets like queues.
	e.Bind(Binding{Dest: Dest{Name: "x", Exchange: true}, Key: "1"})
	if got := e.Route("k", nil, nil); len(got) != 1 {
		t.Fatalf("route: %v", got)
	}
}

// TestRouteBuckets checks the destination picked for a key against the
// bucket the plugin's jump hash picks, with weights.
func TestRouteBuckets(t *testing.T) {
	e := chx(nil)
	e.Bind(Binding{Dest: q("q1"), Key: "1"})
	e.Bind(Binding{Dest: q("q2"), Key: "2"})
	e.Bind(Binding{Dest: q("q3"), Key: "3"})
	owner := []string{"q1", "q2", "q2", "q3", "q3", "q3"}
	counts := map[string]int{}
	for i := range 6000 {
		k := "key-" + strconv.Itoa(i)
		got := e.Route(k, nil, nil)
		if want := owner[jumpBucket(hashBinary(k), 6)]; len(got) != 1 || got[0].Name != want {
			t.Fatalf("%s: %v, want %s", k, got, want)
		}
		counts[got[0].Name]++
	}
	// Weights share the keys out roughly 1:2:3.
	if counts["q1"] < 800 || counts["q2"] < 1700 || counts["q3"] < 2700 {
		t.Fatalf("spread %v", counts)
	}
	if got := chx(nil).Route("k", nil, nil); len(got) != 0 {
		t.Fatalf("empty ring routed to %v", got)
	}
}

// TestAddMovesOnlyItsShare: a destination bound at the end takes keys
// from the others and moves no key between them.
func TestAddMovesOnlyItsShare(t *testing.T) {
	e := chx(nil)
	for i := range 8 {
		e.Bind(Binding{Dest: q("q" + strconv.Itoa(i)), Key: "1"})
	}
	before := map[string]string{}
	for i := range 20000 {
		k := strconv.Itoa(i)
		before[k] = e.Route(k, nil, nil)[0].Name
	}
	e.Bind(Binding{Dest: q("new"), Key: "1"})
	moved := 0
	for k, was := range before {
		now := e.Route(k, nil, nil)[0].Name
		if now != was {
			if now != "new" {
				t.Fatalf("key %s moved from %s to %s", k, was, now)
			}
			moved++
		}
	}
	if moved < 20000/9-400 || moved > 20000/9+400 {
		t.Fatalf("%d keys moved to the new queue, want about %d", moved, 20000/9)
	}
}

func hdrs(fields ...[]byte) []byte {
	var b []byte
	for _, f := range fields {
		b = append(b, f...)
	}
	return b
}

func props(flags uint16, fields ...[]byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, flags)
	for _, f := range fields {
		b = append(b, f...)
	}
	return b
}

func shortstr(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// TestRouteContent hashes a header's {Type, Value} or a property, and a
// missing one as undefined.
func TestRouteContent(t *testing.T) {
	const n = 1000
	pick := func(e *Exchange, h, p []byte) int64 {
		got := e.RouteContent("ignored", h, p, nil)
		if len(got) != 1 {
			t.Fatalf("routed to %v", got)
		}
		i, _ := strconv.Atoi(got[0].Name)
		return int64(i)
	}
	bound := func(args amqp.Table) *Exchange {
		e := chx(args)
		for i := range n {
			e.Bind(Binding{Dest: q(strconv.Itoa(i)), Key: "1"})
		}
		return e
	}
	undefined := jumpBucket(phash2(atomUndefined), n)

	h := bound(amqp.Table{"hash-header": "user"})
	var th termHash
	th.hashField(S("alice"))
	if got, want := pick(h, hdrs(named("other", I(1)), named("user", S("alice"))), nil), jumpBucket(phash2(th.h), n); got != want {
		t.Fatalf("header: %d, want %d", got, want)
	}
	// The first field of the name counts, as table_lookup finds it.
	if a, b := pick(h, hdrs(named("user", S("alice")), named("user", S("bob"))), nil), pick(h, hdrs(named("user", S("alice"))), nil); a != b {
		t.Fatalf("duplicate header: %d vs %d", a, b)
	}
	if got := pick(h, hdrs(named("other", S("alice"))), nil); got != undefined {
		t.Fatalf("missing header: %d, want %d", got, undefined)
	}
	if got := pick(h, nil, nil); got != undefined {
		t.Fatalf("no headers: %d, want %d", got, undefined)
	}

	m := bound(amqp.Table{"hash-property": "message_id"})
	p := props(amqp.FlagContentType|amqp.FlagCorrelationID|amqp.FlagMessageID, shortstr("text/plain"), shortstr("corr"), shortstr("m-1"))
	if got, want := pick(m, nil, p), jumpBucket(hashBinary("m-1"), n); got != want {
		t.Fatalf("message_id: %d, want %d", got, want)
	}
	c := bound(amqp.Table{"hash-property": "correlation_id"})
	if got, want := pick(c, nil, p), jumpBucket(hashBinary("corr"), n); got != want {
		t.Fatalf("correlation_id: %d, want %d", got, want)
	}
	ts := bound(amqp.Table{"hash-property": "timestamp"})
	if got := pick(ts, nil, p); got != undefined {
		t.Fatalf("missing timestamp: %d, want %d", got, undefined)
	}
	p = props(amqp.FlagTimestamp, binary.BigEndian.AppendUint64(nil, 1700000000))
	if got, want := pick(ts, nil, p), jumpBucket(hashBinary("1700000000"), n); got != want {
		t.Fatalf("timestamp: %d, want %d", got, want)
	}
}

func TestRouteContentAllocs(t *testing.T) {
	e := chx(amqp.Table{"hash-property": "timestamp"})
	for i := range 16 {
		e.Bind(Binding{Dest: q("q" + strconv.Itoa(i)), Key: "1"})
	}
	p := props(amqp.FlagTimestamp, binary.BigEndian.AppendUint64(nil, 1700000000))
	out := make([]Dest, 0, 4)
	if n := testing.AllocsPerRun(100, func() { out = e.RouteContent("", nil, p, out[:0]) }); n != 0 {
		t.Fatalf("%v allocs per route", n)
	}
}

// TestValidateConsistentHash pins the plugin's checks, with RabbitMQ's
// texts (seen from RabbitMQ 3.10.8 with the plugin).
func TestValidateConsistentHash(t *testing.T) {
	for _, tt := range []struct {
		key  string
		want string
	}{
		{"1", ""}, {"+5", ""}, {"07", ""}, {"16777216", ""},
		{"abc", `The binding key must be an integer: <<"abc">>`},
		{"", `The binding key must be an integer: <<>>`},
		{" 5", `The binding key must be an integer: <<" 5">>`},
		{"1.5", `The binding key must be an integer: <<"1.5">>`},
		{"0", "The binding key must be greater than 0"},
		{"-3", "The binding key must be greater than 0"},
		{"-99999999999999999999", "The binding key must be greater than 0"},
		{"16777217", "The binding key must be at most 16777216"},
		{"99999999999999999999", "The binding key must be at most 16777216"},
	} {
		err := ValidateBinding(ConsistentHash, tt.key, nil)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.key, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.want || !errors.Is(err, ErrInvalidArgs) {
			t.Errorf("%q: %v, want %s", tt.key, err, tt.want)
		}
	}
	for _, tt := range []struct {
		args amqp.Table
		want string
	}{
		{nil, ""},
		{amqp.Table{"hash-header": ""}, ""},
		{amqp.Table{"hash-property": "timestamp"}, ""},
		{amqp.Table{"hash-header": "h", "hash-property": "message_id"}, "hash-header and hash-property are mutually exclusive"},
		{amqp.Table{"hash-header": "h", "hash-property": "foo"}, "hash-header and hash-property are mutually exclusive"},
		{amqp.Table{"hash-property": "foo"}, "Unsupported property: foo"},
		{amqp.Table{"hash-header": int32(5)}, ErrUnhashable.Error()},
		{amqp.Table{"hash-property": []byte("message_id")}, ErrUnhashable.Error()},
	} {
		err := ValidateArgs(ConsistentHash, tt.args)
		if (err == nil) != (tt.want == "") || err != nil && err.Error() != tt.want {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
	if err := ValidateArgs(Direct, amqp.Table{"hash-property": "foo"}); err != nil {
		t.Errorf("direct: %v", err)
	}
}

// FuzzHashHeader: the header and property scans never panic, whatever the
// bytes (the broker validates them first, but they must not rely on it).
func FuzzHashHeader(f *testing.F) {
	f.Add(hdrs(named("user", S("alice"))), []byte{0, 0x80, 3, 'm', '-', '1'})
	f.Add(hdrs(named("a", F(named("b", A(S("x"), I(1))))), named("user", raw('D', 2, 0, 0, 0, 5))), []byte{0, 0x40, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{4, 'u', 's', 'e', 'r', 'S', 0xff, 0xff, 0xff, 0xff}, []byte{0xff, 0xfe})
	f.Fuzz(func(t *testing.T, h, p []byte) {
		hashHeaderValue(h, "user")
		for _, flag := range []uint16{amqp.FlagMessageID, amqp.FlagCorrelationID, amqp.FlagTimestamp} {
			hashPropertyValue(p, flag)
		}
	})
}
