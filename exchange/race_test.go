package exchange

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/railmq/railmq/amqp"
)

// TestConcurrentRouteAndBind routes from several goroutines while one
// writer binds and unbinds; run it under -race. Readers check what every
// snapshot must satisfy: the permanent binding is always routed to, and no
// destination appears twice.
func TestConcurrentRouteAndBind(t *testing.T) {
	for _, kind := range []Kind{Direct, Fanout, Topic, Headers} {
		t.Run(kind.String(), func(t *testing.T) {
			e := New("x", kind, false, false, false, nil)
			match := amqp.Table{"h": "v"}
			e.Bind(Binding{Dest: q("stable"), Key: "a.b", Args: match})
			var stop atomic.Bool
			var wg sync.WaitGroup
			errs := make(chan string, 4)
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out := make([]Dest, 0, 64)
					for !stop.Load() {
						out = e.Route("a.b", amqp.Table{"h": "v"}, out[:0])
						seen := make(map[Dest]bool, len(out))
						for _, d := range out {
							if seen[d] {
								errs <- "duplicate " + d.Name
								return
							}
							seen[d] = true
						}
						if !seen[q("stable")] {
							errs <- "lost the stable binding"
							return
						}
					}
				}()
			}
			// Enough distinct keys that the direct table resizes under readers.
			keys := []string{"a.b", "a.*", "#", "a.#", "#.#.b"}
			for i := range 2000 {
				d := q(strconv.Itoa(i % 17))
				key := keys[i%len(keys)]
				if i%2 == 0 {
					key = "k" + strconv.Itoa(i%97)
				}
				b := Binding{Dest: d, Key: key, Args: match}
				e.Bind(b)
				switch i % 3 {
				case 0:
					e.Unbind(b)
				case 1:
					e.RemoveDest(q(strconv.Itoa((i + 5) % 17)))
				}
				_ = e.HasBindingTo(d)
				_ = e.Bindings()
			}
			stop.Store(true)
			wg.Wait()
			close(errs)
			for msg := range errs {
				t.Fatal(msg)
			}
		})
	}
}
