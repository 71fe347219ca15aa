package vhost

import (
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

func TestDefNameRoundTrip(t *testing.T) {
	for _, parts := range [][]string{
		{"/"},
		{"/", "x"},
		{"vh", "", "q", "dest", "key", ""},
		{"a\x00b", strings.Repeat("n", 300)},
	} {
		got, err := SplitDefName(DefName(parts...))
		if err != nil || !reflect.DeepEqual(got, parts) {
			t.Errorf("split(def(%q)) = %q, %v", parts, got, err)
		}
	}
	for _, b := range [][]byte{{0}, {0, 5, 'a'}} {
		if _, err := SplitDefName(b); err == nil {
			t.Errorf("split(%x) accepted", b)
		}
	}
}

func TestDefinitionsAdd(t *testing.T) {
	args := amqp.Table{"alternate-exchange": "ae"}
	binding := exchange.Binding{Dest: exchange.Dest{Name: "x2", Exchange: true}, Key: "k", Args: amqp.Table{"x-match": "all"}}
	for _, tc := range []struct {
		name      string
		kind      byte
		key       []byte
		val       []byte
		want      definitions
		wantError string
	}{
		{
			name: "exchange", kind: persist.DefExchange, key: DefName("v", "x"),
			val:  encodeDef(amqp.Table{"type": "topic", "durable": true, "auto_delete": true, "internal": false, "arguments": args}),
			want: definitions{exchanges: []exchangeDef{{name: "x", kind: exchange.Topic, autoDelete: true, args: args}}},
		},
		{
			name: "exchange without arguments", kind: persist.DefExchange, key: DefName("v", "x"),
			val:  encodeDef(amqp.Table{"type": "headers", "internal": true, "arguments": amqp.Table{}}),
			want: definitions{exchanges: []exchangeDef{{name: "x", kind: exchange.Headers, internal: true}}},
		},
		{
			name: "exchange of another vhost", kind: persist.DefExchange, key: DefName("other", "x"),
			val: encodeDef(amqp.Table{"type": "topic"}),
		},
		{
			name: "exchange of unknown type", kind: persist.DefExchange, key: DefName("v", "x"),
			val: encodeDef(amqp.Table{"type": "bogus"}), wantError: `exchange "x": unknown type bogus`,
		},
		{
			name: "exchange undecodable", kind: persist.DefExchange, key: DefName("v", "x"),
			val: []byte{1}, wantError: `exchange "x": `,
		},
		{
			name: "queue", kind: persist.DefQueue, key: DefName("v", "q"),
			val:  encodeDef(amqp.Table{"id": int64(42), "auto_delete": true, "arguments": amqp.Table{"x-message-ttl": int32(5)}}),
			want: definitions{queues: []queueDef{{name: "q", id: 42, autoDelete: true, args: amqp.Table{"x-message-ttl": int32(5)}}}},
		},
		{
			name: "queue undecodable", kind: persist.DefQueue, key: DefName("v", "q"),
			val: []byte{1}, wantError: `queue "q": `,
		},
		{
			name: "queue with a short key", kind: persist.DefQueue, key: DefName("v"),
			val: encodeDef(amqp.Table{"id": int64(1)}),
		},
		{
			name: "binding", kind: persist.DefBinding, key: bindingName("v", "x1", binding),
			val:  encodeDef(amqp.Table{"arguments": binding.Args}),
			want: definitions{bindings: []bindingDef{{source: "x1", binding: binding}}},
		},
		{
			name: "binding to a queue, value undecodable", kind: persist.DefBinding,
			key: bindingName("v", "x1", exchange.Binding{Dest: exchange.Dest{Name: "q"}, Key: "k"}), val: []byte{1},
			want: definitions{bindings: []bindingDef{{source: "x1", binding: exchange.Binding{Dest: exchange.Dest{Name: "q"}, Key: "k"}}}},
		},
		{
			name: "binding of another vhost", kind: persist.DefBinding, key: bindingName("w", "x1", binding),
			val: encodeDef(amqp.Table{}),
		},
		{
			name: "corrupt key", kind: persist.DefBinding, key: []byte{0, 9, 'v'},
			val: encodeDef(amqp.Table{}), wantError: "corrupt definition key",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d definitions
			err := d.add("v", tc.kind, tc.key, tc.val)
			if tc.wantError != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantError) {
					t.Fatalf("error %v, want %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d, tc.want) {
				t.Fatalf("got %+v\nwant %+v", d, tc.want)
			}
		})
	}
}

// openStoreVHost opens the store in dir (no value-log GC) and a vhost "v"
// on it, as a broker's restart would.
func openStoreVHost(t *testing.T, dir string, log *zap.Logger) (*persist.Store, *VHost) {
	t.Helper()
	s, err := persist.Open(persist.Options{Dir: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s, New("v", new(atomic.Int64), log, s, 0, 0)
}

// TestRecover declares durable definitions and messages, reopens the store
// and recovers them, with progress lines every two queues.
func TestRecover(t *testing.T) {
	dir := t.TempDir()
	open := func(log *zap.Logger) (*persist.Store, *VHost) { return openStoreVHost(t, dir, log) }
	s, v := open(nil)
	for _, d := range []ExchangeDecl{
		{Name: "x", Type: "topic", Durable: true},
		{Name: "ae", Type: "fanout", Durable: true, AutoDelete: true, Args: amqp.Table{"x-custom": "a"}},
		{Name: "tx", Type: "direct"}, // transient: gone after a restart
	} {
		if err := v.DeclareExchange(d); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"q1", "q2", "q3", "q4", "q5"}
	for _, n := range names {
		if _, _, _, err := v.DeclareQueue(QueueDecl{Name: n, Durable: true, Args: amqp.Table{"x-max-length": int32(100)}}, queue.Config{}); err != nil {
			t.Fatal(err)
		}
		if err := v.Bind(0, n, false, "x", "k.#", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, err := v.DeclareQueue(QueueDecl{Name: "tq"}, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := v.Bind(0, "ae", true, "x", "a.*", nil); err != nil {
		t.Fatal(err)
	}
	var sc Scratch
	qs, err := v.Route("x", "k.1", &sc)
	if err != nil || len(qs) != len(names) {
		t.Fatalf("routed to %d queues, %v", len(qs), err)
	}
	conf := &countConf{all: make(chan struct{})}
	_, waited := FanOut(v.Store(), &queue.Message{Exchange: "x", RoutingKey: "k.1", Body: []byte("m"), Persistent: true}, qs, false,
		func(n int) queue.Confirmer { conf.want = int32(n); return conf }, nil)
	if !waited {
		t.Fatal("a persistent message to durable queues not waited for")
	}
	select {
	case <-conf.all:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d confirms", conf.got.Load(), conf.want)
	}
	v.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	defer func(n int) { recoveryProgressEvery = n }(recoveryProgressEvery)
	recoveryProgressEvery = 2
	core, logs := observer.New(zap.InfoLevel)
	s, v = open(zap.New(core))
	defer func() {
		v.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := v.Recover(queue.Config{}); err != nil {
		t.Fatal(err)
	}
	if v.exchanges["tx"] != nil || v.queues["tq"] != nil {
		t.Fatal("transient definitions recovered")
	}
	if x := v.exchanges["ae"]; x == nil || x.Kind != exchange.Fanout || !x.AutoDelete || !x.Durable || x.Args["x-custom"] != "a" {
		t.Fatalf("exchange ae %+v", x)
	}
	if got := v.Queues(); len(got) != len(names) {
		t.Fatalf("%d queues recovered", len(got))
	}
	for _, n := range names {
		q, err := v.Queue(0, n)
		if err != nil {
			t.Fatal(err)
		}
		if m, _, err := q.Stats(); err != nil || m != 1 || q.Config().Args["x-max-length"] != int32(100) {
			t.Fatalf("queue %s: %d messages, args %v, %v", n, m, q.Config().Args, err)
		}
	}
	if qs, err := v.Route("x", "k.2", &sc); err != nil || len(qs) != len(names) {
		t.Fatalf("bindings: routed to %d queues, %v", len(qs), err)
	}
	if !v.exchanges["x"].HasBindingTo(exchange.Dest{Name: "ae", Exchange: true}) {
		t.Fatal("exchange-to-exchange binding not recovered")
	}
	// New queues do not reuse a recovered queue's id.
	q, _, _, err := v.DeclareQueue(QueueDecl{Name: "q6", Durable: true}, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if old, _ := v.Queue(0, n); old.Config().ID == q.Config().ID {
			t.Fatalf("q6 has %s's id %d", n, q.Config().ID)
		}
	}

	var progress []int64
	var summary map[string]any
	for _, e := range logs.All() {
		switch e.Message {
		case "recovering queues":
			progress = append(progress, e.ContextMap()["queues_so_far"].(int64))
			if e.ContextMap()["queues"] != int64(len(names)) {
				t.Errorf("progress line %v", e.ContextMap())
			}
		case "definitions and messages recovered":
			summary = e.ContextMap()
		}
	}
	if !reflect.DeepEqual(progress, []int64{2, 4}) {
		t.Errorf("progress lines at %v queues, want 2 and 4", progress)
	}
	if summary == nil || summary["exchanges"] != int64(2) || summary["queues"] != int64(5) || summary["bindings"] != int64(6) ||
		summary["messages"] != int64(5) || summary["took"] == nil {
		t.Errorf("summary %v", summary)
	}
}

// A priority queue's entries stored before its lanes paged apart are all
// under the queue's own id (lane 0): recovery reads them back whatever
// their priority, and their acks delete them there, so that none come
// back after another restart.
func TestRecoverPriorityEntriesOfLaneZero(t *testing.T) {
	dir := t.TempDir()
	open := func() (*persist.Store, *VHost) { return openStoreVHost(t, dir, nil) }
	s, v := open()
	q, _, _, err := v.DeclareQueue(QueueDecl{Name: "pq", Durable: true, Args: amqp.Table{"x-max-priority": int32(10)}}, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := q.Config().ID
	b := &persist.Batch{}
	for i := range 40 {
		m := &queue.Message{Body: []byte{byte(i)}, Persistent: true, Priority: uint8(9 * (i % 2))}
		b.PutEntryInline(id, uint64(i+1), s.NewMessageID(), false, false, 0, queue.EncodeMessage(m))
	}
	if err := s.CommitSync(b); err != nil {
		t.Fatal(err)
	}
	v.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		s, v = open()
		if err := v.Recover(queue.Config{Window: 8}); err != nil {
			t.Fatal(err)
		}
		q, err := v.Queue(0, "pq")
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for {
			d, ok, _, err := q.Get(false)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			got++
			q.Ack([]queue.Delivery{d}, nil)
		}
		if _, _, err := q.Stats(); err != nil { // the acks applied, their deletes committed below
			t.Fatal(err)
		}
		if want := []int{40, 0}[round]; got != want {
			t.Fatalf("restart %d: %d messages, want %d", round+1, got, want)
		}
		v.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
