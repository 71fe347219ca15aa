package exchange

import (
	"strconv"
	"testing"

	"github.com/railmq/railmq/amqp"
)

// Sizes compared by the routing benchmarks: a route's cost should depend on
// the key and on how many bindings match, not on how many exist.
var benchSizes = []int{10, 10_000}

func BenchmarkRouteDirect(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			e := New("d", Direct, false, false, false, nil)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "orders.region-" + strconv.Itoa(i)
				e.Bind(Binding{Dest: q("q" + strconv.Itoa(i)), Key: keys[i]})
			}
			out := make([]Dest, 0, 8)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				out = e.Route(keys[i%n], nil, out[:0])
			}
			if len(out) != 1 {
				b.Fatalf("routed to %d", len(out))
			}
		})
	}
}

// topicPattern mixes literal words, "*" and "#", and spreads bindings over
// many first words, as per-tenant or per-device topics do.
func topicPattern(i int) string {
	s := strconv.Itoa(i)
	switch i % 4 {
	case 0:
		return "stock." + s + ".*"
	case 1:
		return "logs." + s + ".#"
	case 2:
		return "*.eu." + s
	default:
		return "#.alert." + s
	}
}

func BenchmarkRouteTopic(b *testing.B) {
	// Each key matches exactly one binding present at both sizes, after
	// walking the "*" and "#" branches at the root.
	keys := []string{"stock.4.nyse", "logs.5.app.error", "dc1.eu.6", "host.cpu.alert.7"}
	for _, n := range benchSizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			e := New("t", Topic, false, false, false, nil)
			for i := range n {
				e.Bind(Binding{Dest: q("q" + strconv.Itoa(i)), Key: topicPattern(i)})
			}
			out := make([]Dest, 0, 8)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				out = e.Route(keys[i%len(keys)], nil, out[:0])
			}
			if len(out) != 1 {
				b.Fatalf("routed to %d", len(out))
			}
		})
	}
}

func BenchmarkRouteFanout(b *testing.B) {
	e := New("f", Fanout, false, false, false, nil)
	for i := range 10 {
		e.Bind(Binding{Dest: q("q" + strconv.Itoa(i))})
	}
	out := make([]Dest, 0, 16)
	b.ReportAllocs()
	for b.Loop() {
		out = e.Route("", nil, out[:0])
	}
}

func BenchmarkRouteHeaders(b *testing.B) {
	e := New("h", Headers, false, false, false, nil)
	for i := range 10 {
		e.Bind(Binding{Dest: q("q" + strconv.Itoa(i)), Args: amqp.Table{"x-match": "all", "type": "report", "n": int32(i)}})
	}
	hdrs := amqp.Table{"type": "report", "n": int64(3)}
	out := make([]Dest, 0, 16)
	b.ReportAllocs()
	for b.Loop() {
		out = e.Route("", hdrs, out[:0])
	}
}

// BenchmarkBind measures one Bind+Unbind pair into an exchange that already
// holds n bindings: copy-on-write must copy a path, not the table.
func BenchmarkBind(b *testing.B) {
	for _, kind := range []Kind{Direct, Topic} {
		for _, n := range benchSizes {
			b.Run(kind.String()+"/"+strconv.Itoa(n), func(b *testing.B) {
				e := New("x", kind, false, false, false, nil)
				for i := range n {
					e.Bind(Binding{Dest: q("q" + strconv.Itoa(i)), Key: topicPattern(i)})
				}
				nb := Binding{Dest: q("new"), Key: "stock.new.*"}
				b.ReportAllocs()
				for b.Loop() {
					e.Bind(nb)
					e.Unbind(nb)
				}
			})
		}
	}
}

// BenchmarkRoute16 routes keys over 16 bound queues, one each: a direct
// exchange with a binding per key, and a consistent-hash exchange with 16
// queues of weight 1 (the plugin's phash2 and jump hash), by routing key
// and by a message_id property.
func BenchmarkRoute16(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "order-" + strconv.Itoa(i)
	}
	direct := New("d", Direct, false, false, false, nil)
	chash := New("c", ConsistentHash, false, false, false, nil)
	byProp := New("p", ConsistentHash, false, false, false, amqp.Table{"hash-property": "message_id"})
	for i := range 16 {
		dq := q("q" + strconv.Itoa(i))
		for j := i; j < len(keys); j += 16 {
			direct.Bind(Binding{Dest: dq, Key: keys[j]})
		}
		chash.Bind(Binding{Dest: dq, Key: "1"})
		byProp.Bind(Binding{Dest: dq, Key: "1"})
	}
	props := make([][]byte, len(keys))
	for i, k := range keys {
		props[i] = append([]byte{0, 0x80, byte(len(k))}, k...) // message-id only
	}
	out := make([]Dest, 0, 8)
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			out = direct.Route(keys[i%len(keys)], nil, out[:0])
		}
	})
	b.Run("consistent-hash", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			out = chash.RouteContent(keys[i%len(keys)], nil, nil, out[:0])
		}
	})
	b.Run("consistent-hash-property", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			out = byProp.RouteContent("", nil, props[i%len(keys)], out[:0])
		}
	})
	if len(out) != 1 {
		b.Fatalf("routed to %d", len(out))
	}
}
