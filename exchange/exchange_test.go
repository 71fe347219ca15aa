package exchange

import (
	"slices"
	"testing"

	"github.com/railmq/railmq/amqp"
)

var xd = func(name string) Dest { return Dest{Name: name, Exchange: true} }

func bindAll(e *Exchange, bs ...Binding) {
	for _, b := range bs {
		e.Bind(b)
	}
}

func sorted(ds []Dest) []Dest {
	slices.SortFunc(ds, compareDest)
	return ds
}

func TestRouteDirectFanout(t *testing.T) {
	bs := []Binding{
		{Dest: q("q1"), Key: "a"},
		{Dest: q("q2"), Key: "a"},
		{Dest: q("q2"), Key: "a", Args: amqp.Table{"x": 1}}, // second binding, same dest and key
		{Dest: q("q3"), Key: "b"},
		{Dest: q("q4"), Key: ""},
		{Dest: xd("q1"), Key: "a"}, // an exchange named like a queue is another dest
		{Dest: q("q5"), Key: "a.b"},
	}
	tests := []struct {
		kind Kind
		key  string
		want []Dest
	}{
		{Direct, "a", []Dest{q("q1"), q("q2"), xd("q1")}},
		{Direct, "b", []Dest{q("q3")}},
		{Direct, "", []Dest{q("q4")}},
		{Direct, "a.b", []Dest{q("q5")}},
		{Direct, "A", nil},
		{Direct, "a.*", nil},
		{Fanout, "zzz", []Dest{q("q1"), q("q2"), q("q3"), q("q4"), q("q5"), xd("q1")}},
		{Fanout, "", []Dest{q("q1"), q("q2"), q("q3"), q("q4"), q("q5"), xd("q1")}},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String()+"|"+tt.key, func(t *testing.T) {
			e := New("x", tt.kind, false, false, false, nil)
			bindAll(e, bs...)
			got := sorted(e.Route(tt.key, amqp.Table{"ignored": 1}, nil))
			if !slices.Equal(got, sorted(tt.want)) {
				t.Fatalf("Route(%q) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}

func TestBindIdentity(t *testing.T) {
	base := Binding{Dest: q("q"), Key: "k", Args: amqp.Table{"a": int32(1), "b": "x"}}
	tests := []struct {
		name  string
		first Binding
		again Binding
		same  bool
	}{
		{"identical", base, base, true},
		{"args rebuilt", base, Binding{Dest: q("q"), Key: "k", Args: amqp.Table{"b": "x", "a": int32(1)}}, true},
		{"nil vs empty args", Binding{Dest: q("q"), Key: "k"}, Binding{Dest: q("q"), Key: "k", Args: amqp.Table{}}, true},
		{"int vs int64 (same wire type)", Binding{Dest: q("q"), Args: amqp.Table{"a": 1}}, Binding{Dest: q("q"), Args: amqp.Table{"a": int64(1)}}, true},
		{"nested tables by value", Binding{Dest: q("q"), Args: amqp.Table{"t": amqp.Table{"a": []any{"x", nil}}}}, Binding{Dest: q("q"), Args: amqp.Table{"t": amqp.Table{"a": []any{"x", nil}}}}, true},
		{"int32 vs int64", base, Binding{Dest: q("q"), Key: "k", Args: amqp.Table{"a": int64(1), "b": "x"}}, false},
		{"string vs bytes", base, Binding{Dest: q("q"), Key: "k", Args: amqp.Table{"a": int32(1), "b": []byte("x")}}, false},
		{"extra arg", base, Binding{Dest: q("q"), Key: "k", Args: amqp.Table{"a": int32(1), "b": "x", "c": nil}}, false},
		{"other key", base, Binding{Dest: q("q"), Key: "k2", Args: base.Args}, false},
		{"exchange dest", base, Binding{Dest: xd("q"), Key: "k", Args: base.Args}, false},
		{"length-prefix ambiguity", Binding{Dest: q("ab"), Key: "c"}, Binding{Dest: q("a"), Key: "bc"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New("x", Direct, false, false, false, nil)
			if !e.Bind(tt.first) {
				t.Fatal("first Bind = false")
			}
			if got := e.Bind(tt.again); got == tt.same {
				t.Fatalf("second Bind = %v, want %v", got, !tt.same)
			}
			want := 2
			if tt.same {
				want = 1
			}
			if n := len(e.Bindings()); n != want {
				t.Fatalf("%d bindings, want %d", n, want)
			}
			if !e.Unbind(tt.again) || (e.Unbind(tt.first) == tt.same) {
				t.Fatal("Unbind did not mirror Bind")
			}
			if e.HasBindings() {
				t.Fatal("bindings left after unbinding both")
			}
		})
	}
}

// TestUnbindAndRemoveDest runs the same scenario on every kind: routing
// must drop a destination exactly when its last binding goes.
func TestUnbindAndRemoveDest(t *testing.T) {
	a1 := amqp.Table{"m": "1"}
	a2 := amqp.Table{"m": "1", "x-n": int32(2)} // same headers match, different binding
	for _, kind := range []Kind{Direct, Fanout, Topic, Headers} {
		t.Run(kind.String(), func(t *testing.T) {
			e := New("x", kind, false, false, false, nil)
			hdrs := amqp.Table{"m": "1"}
			route := func() []Dest { return sorted(e.Route("k", hdrs, nil)) }
			bindAll(e,
				Binding{Dest: q("q1"), Key: "k", Args: a1},
				Binding{Dest: q("q1"), Key: "k", Args: a2},
				Binding{Dest: q("q2"), Key: "k", Args: a1},
				Binding{Dest: xd("x2"), Key: "k", Args: a1},
			)
			if got := route(); !slices.Equal(got, []Dest{q("q1"), q("q2"), xd("x2")}) {
				t.Fatalf("initial route %v", got)
			}
			if e.Unbind(Binding{Dest: q("q1"), Key: "other", Args: a1}) {
				t.Fatal("Unbind of an absent binding = true")
			}
			if !e.Unbind(Binding{Dest: q("q1"), Key: "k", Args: a1}) {
				t.Fatal("Unbind = false")
			}
			if got := route(); !slices.Equal(got, []Dest{q("q1"), q("q2"), xd("x2")}) {
				t.Fatalf("q1 still has a binding, route %v", got)
			}
			e.Unbind(Binding{Dest: q("q1"), Key: "k", Args: a2})
			if e.HasBindingTo(q("q1")) {
				t.Fatal("HasBindingTo(q1) after its last Unbind")
			}
			if got := route(); !slices.Equal(got, []Dest{q("q2"), xd("x2")}) {
				t.Fatalf("after unbinding q1, route %v", got)
			}
			e.Bind(Binding{Dest: q("q2"), Key: "k2", Args: a2})
			if n := e.RemoveDest(q("q2")); n != 2 {
				t.Fatalf("RemoveDest(q2) = %d, want 2", n)
			}
			if n := e.RemoveDest(q("q2")); n != 0 {
				t.Fatalf("second RemoveDest(q2) = %d", n)
			}
			if got := route(); !slices.Equal(got, []Dest{xd("x2")}) {
				t.Fatalf("after RemoveDest, route %v", got)
			}
			if !e.HasBindingTo(xd("x2")) || e.HasBindingTo(q("x2")) || !e.HasBindings() {
				t.Fatal("HasBindingTo confuses queues and exchanges")
			}
			e.RemoveDest(xd("x2"))
			if e.HasBindings() || len(e.Bindings()) != 0 || len(route()) != 0 {
				t.Fatal("bindings left")
			}
			if s := e.snap.Load(); (s.direct != nil && s.direct.n != 0) || s.fanout != nil || s.topic != nil || len(s.headers) != 0 {
				t.Fatalf("snapshot not emptied: %+v", s)
			}
		})
	}
}

func TestBindingsSnapshot(t *testing.T) {
	e := New("x", Topic, false, false, false, nil)
	in := []Binding{
		{Dest: xd("a"), Key: "k"},
		{Dest: q("b"), Key: "z"},
		{Dest: q("b"), Key: "a", Args: amqp.Table{"x": 1}},
		{Dest: q("a"), Key: "k"},
	}
	bindAll(e, in...)
	got := e.Bindings()
	want := []string{"q/a/k", "q/b/a", "q/b/z", "e/a/k"}
	if len(got) != len(want) {
		t.Fatalf("got %d bindings", len(got))
	}
	for i, b := range got {
		s := "q/"
		if b.Dest.Exchange {
			s = "e/"
		}
		if s += b.Dest.Name + "/" + b.Key; s != want[i] {
			t.Fatalf("Bindings()[%d] = %s, want %s", i, s, want[i])
		}
	}
	got[0].Key = "mutated"
	if e.Bindings()[0].Key != "k" {
		t.Fatal("Bindings returned shared storage")
	}
}

func TestAlternateExchange(t *testing.T) {
	tests := []struct {
		name string
		args amqp.Table
		want string
		ok   bool
	}{
		{"set", amqp.Table{"alternate-exchange": "ae"}, "ae", true},
		{"absent", nil, "", false},
		{"not a string", amqp.Table{"alternate-exchange": []byte("ae")}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New("x", Direct, true /* durable */, false, false, tt.args)
			got, ok := e.AlternateExchange()
			if got != tt.want || ok != tt.ok {
				t.Fatalf("AlternateExchange() = %q, %v", got, ok)
			}
		})
	}
}

// TestRouteAllocs pins the hot-path promise: no allocation with a reused
// out slice, including topic routes that need dedupe and the nested-"#"
// memo.
func TestRouteAllocs(t *testing.T) {
	direct := New("d", Direct, false, false, false, nil)
	fanout := New("f", Fanout, false, false, false, nil)
	topic := New("t", Topic, false, false, false, nil)
	headers := New("h", Headers, false, false, false, nil)
	for _, b := range []Binding{
		{Dest: q("q1"), Key: "a.b.c"}, {Dest: q("q2"), Key: "a.*.c"}, {Dest: q("q1"), Key: "#"},
		{Dest: q("q3"), Key: "#.#.c"}, {Dest: q("q4"), Key: "a.#.#"},
	} {
		bindAll(direct, b)
		bindAll(fanout, b)
		bindAll(topic, b)
	}
	headers.Bind(Binding{Dest: q("q1"), Args: amqp.Table{"a": int32(1)}})
	headers.Bind(Binding{Dest: q("q1"), Args: amqp.Table{"x-match": "any", "a": int64(1), "b": nil}})
	hdrs := amqp.Table{"a": int8(1)}
	tests := []struct {
		name string
		e    *Exchange
		key  string
		n    int
	}{
		{"direct", direct, "a.b.c", 1},
		{"direct miss", direct, "nope", 0},
		{"fanout", fanout, "", 4},
		{"topic", topic, "a.b.c", 4},
		{"topic long key", topic, "a.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.b.c", 3},
		{"headers", headers, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]Dest, 0, 16)
			allocs := testing.AllocsPerRun(100, func() {
				out = tt.e.Route(tt.key, hdrs, out[:0])
			})
			if len(out) != tt.n {
				t.Fatalf("routed to %v, want %d dests", out, tt.n)
			}
			if allocs != 0 {
				t.Fatalf("%v allocs per Route", allocs)
			}
		})
	}
}
