package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// The consistent-hash exchange follows RabbitMQ 3.10.8's
// rabbitmq_consistent_hash_exchange. The bucket each test expects for a
// key was computed by the plugin's own algorithm run in erl (OTP 25):
// jump_consistent_hash(erlang:phash2(Term), Buckets) with
// rand:seed_s(exs1024, {H, H, H}) (exchange/testdata/chash_vectors.erl
// prints such values). These tests also run against RabbitMQ
// (RAILMQ_TEST_URL): their exchange and queue names are their own, and
// they delete what they declare. Every one that is not in-process only
// passed against RabbitMQ 3.10.8 with rabbitmq_consistent_hash_exchange
// enabled, buckets, reply codes and texts included; that RabbitMQ also
// rebuilt a restarted exchange's ring in the order TestConsistentHashDurable
// pins.

// chxRing declares consistent-hash exchange ex with args and queues bound
// in order with weights 1, 1 and 3: buckets 0, 1 and 2-4 of 5.
func chxRing(e *env, ex string, args rmq.Table) []string {
	e.t.Helper()
	must(e.t, e.ch.ExchangeDeclare(ex, "x-consistent-hash", false, false, false, false, args))
	e.t.Cleanup(func() {
		if c, err := rmq.Dial(e.b.URL); err == nil {
			if ch, err := c.Channel(); err == nil {
				_ = ch.ExchangeDelete(ex, false, false)
			}
			c.Close()
		}
	})
	qs := []string{ex + ".q1", ex + ".q2", ex + ".q3"}
	for i, q := range qs {
		e.queue(q, nil)
		must(e.t, e.ch.QueueBind(q, []string{"1", "1", "3"}[i], ex, false, nil))
	}
	return qs
}

// bucketQueue is the queue of chxRing's ring that owns bucket b.
func bucketQueue(qs []string, b int) string {
	switch b {
	case 0:
		return qs[0]
	case 1:
		return qs[1]
	}
	return qs[2]
}

// whereIs publishes one confirmed message per publishing and reports the
// queue each went to (by its body), checking it went to exactly one.
func (e *env) whereIs(ex string, qs []string, keys []string, pubs []rmq.Publishing) map[string]string {
	e.t.Helper()
	for i, p := range pubs {
		p.Body = []byte(strconv.Itoa(i))
		e.publishConfirmed(ex, keys[i], p)
	}
	where := map[string]string{}
	total := func() int {
		n := 0
		for _, q := range qs {
			n += e.count(q)
		}
		return n
	}
	testutil.Eventually(e.t, 5*time.Second, func() bool { return total() >= len(pubs) }, "%d messages in the queues", len(pubs))
	if n := total(); n != len(pubs) {
		e.t.Fatalf("%d messages in the queues, want %d (one each)", n, len(pubs))
	}
	ch := e.channel(e.conn)
	defer ch.Close()
	for _, q := range qs {
		for n := e.count(q); n > 0; n-- {
			d := e.get(ch, q, true)
			where[string(d.Body)] = q
		}
	}
	return where
}

func TestConsistentHashRoutingKey(t *testing.T) {
	e := setup(t, broker.Options{})
	qs := chxRing(e, "chx.key", nil)
	// Buckets of "k0".."k19" among 5, from the plugin's algorithm.
	want := []int{1, 3, 1, 1, 2, 4, 1, 3, 3, 2, 4, 4, 2, 2, 1, 0, 0, 0, 0, 1}
	keys := make([]string, len(want))
	pubs := make([]rmq.Publishing, len(want))
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	where := e.whereIs("chx.key", qs, keys, pubs)
	for i, b := range want {
		if got := where[strconv.Itoa(i)]; got != bucketQueue(qs, b) {
			t.Errorf("key %s went to %s, want %s (bucket %d)", keys[i], got, bucketQueue(qs, b), b)
		}
	}

	// CC and BCC keys take no part: one copy, placed by the publish's key.
	e.publishConfirmed("chx.key", "k0", rmq.Publishing{Body: []byte("cc"),
		Headers: rmq.Table{"CC": []any{"k1", "k15"}, "BCC": []any{"k5"}}})
	e.waitCount(bucketQueue(qs, want[0]), 1)
	total := 0
	for _, q := range qs {
		total += e.count(q)
	}
	if total != 1 {
		t.Fatalf("a message with CC and BCC keys made %d copies", total)
	}
}

func TestConsistentHashHeader(t *testing.T) {
	e := setup(t, broker.Options{})
	qs := chxRing(e, "chx.hdr", rmq.Table{"hash-header": "user"})
	// {Type, Value} is hashed: the signedint 42 and the long 42 differ.
	// Without the header, a message hashes as undefined.
	hdrs := []rmq.Table{{"user": "alice"}, {"user": "bob"}, {"user": "carol"},
		{"user": int32(42)}, {"user": int64(42)}, {"other": "alice"}, nil}
	want := []int{0, 3, 3, 4, 1, 1, 1}
	pubs := make([]rmq.Publishing, len(hdrs))
	keys := make([]string, len(hdrs))
	for i, h := range hdrs {
		pubs[i].Headers = h
		keys[i] = "same-key"
	}
	where := e.whereIs("chx.hdr", qs, keys, pubs)
	for i, b := range want {
		if got := where[strconv.Itoa(i)]; got != bucketQueue(qs, b) {
			t.Errorf("headers %v went to %s, want %s (bucket %d)", hdrs[i], got, bucketQueue(qs, b), b)
		}
	}

	// Every field type, as rabbit_binary_parser decodes it (a table with
	// one field: Go's map order would make two fields' order vary).
	vals := []any{rmq.Table{"a": "x"}, []any{"x", int32(1)}, 1.5, true, time.Unix(1700000000, 0),
		[]byte{1, 2, 3}, nil, 2.5, int64(-7), []any{}}
	want = []int{4, 4, 1, 4, 3, 1, 0, 4, 2, 0}
	pubs = make([]rmq.Publishing, len(vals))
	keys = make([]string, len(vals))
	for i, v := range vals {
		pubs[i].Headers = rmq.Table{"user": v}
		keys[i] = "same-key"
	}
	where = e.whereIs("chx.hdr", qs, keys, pubs)
	for i, b := range want {
		if got := where[strconv.Itoa(i)]; got != bucketQueue(qs, b) {
			t.Errorf("header value %#v went to %s, want %s (bucket %d)", vals[i], got, bucketQueue(qs, b), b)
		}
	}
}

func TestConsistentHashProperty(t *testing.T) {
	e := setup(t, broker.Options{})
	qs := chxRing(e, "chx.mid", rmq.Table{"hash-property": "message_id"})
	var pubs []rmq.Publishing
	var keys []string
	for i := 1; i <= 8; i++ {
		pubs = append(pubs, rmq.Publishing{MessageId: "m-" + strconv.Itoa(i)})
		keys = append(keys, "same-key")
	}
	pubs = append(pubs, rmq.Publishing{CorrelationId: "m-1"}) // no message_id: undefined
	keys = append(keys, "same-key")
	want := []int{4, 3, 4, 3, 1, 1, 3, 2, 1}
	where := e.whereIs("chx.mid", qs, keys, pubs)
	for i, b := range want {
		if got := where[strconv.Itoa(i)]; got != bucketQueue(qs, b) {
			t.Errorf("publishing %d went to %s, want %s (bucket %d)", i, got, bucketQueue(qs, b), b)
		}
	}

	// A timestamp is hashed as its decimal text.
	qs = chxRing(e, "chx.ts", rmq.Table{"hash-property": "timestamp"})
	pubs, keys = nil, nil
	for _, ts := range []int64{1700000000, 1700000001, 1700000002} {
		pubs = append(pubs, rmq.Publishing{Timestamp: time.Unix(ts, 0)})
		keys = append(keys, "k")
	}
	where = e.whereIs("chx.ts", qs, keys, pubs)
	for i, b := range []int{1, 1, 0} {
		if got := where[strconv.Itoa(i)]; got != bucketQueue(qs, b) {
			t.Errorf("timestamp %d went to %s, want %s (bucket %d)", i, got, bucketQueue(qs, b), b)
		}
	}
}

// TestConsistentHashAddQueue: binding one more queue moves only the keys
// that now go to it.
func TestConsistentHashAddQueue(t *testing.T) {
	e := setup(t, broker.Options{})
	const ex, n = "chx.grow", 600
	must(t, e.ch.ExchangeDeclare(ex, "x-consistent-hash", false, true, false, false, nil))
	var qs []string
	for i := range 6 {
		q := ex + ".q" + strconv.Itoa(i)
		qs = append(qs, q)
		e.queue(q, nil)
		must(t, e.ch.QueueBind(q, "1", ex, false, nil))
	}
	keys := make([]string, n)
	pubs := make([]rmq.Publishing, n)
	for i := range keys {
		keys[i] = "customer-" + strconv.Itoa(i)
	}
	before := e.whereIs(ex, qs, keys, pubs)
	added := ex + ".new"
	e.queue(added, nil)
	must(t, e.ch.QueueBind(added, "1", ex, false, nil))
	after := e.whereIs(ex, append(qs, added), keys, pubs)
	moved := 0
	for k, was := range before {
		if now := after[k]; now != was {
			if now != added {
				t.Fatalf("message %s moved from %s to %s", k, was, now)
			}
			moved++
		}
	}
	if moved < n/7/2 || moved > n/7*2 {
		t.Fatalf("%d of %d keys moved to the new queue, want about %d", moved, n, n/7)
	}
}

func TestConsistentHashBindingErrors(t *testing.T) {
	e := setup(t, broker.Options{})
	qs := chxRing(e, "chx.err", nil)
	must(t, e.ch.ExchangeDeclare("chx.err.fan", "fanout", false, true, false, false, nil))
	for _, tt := range []struct{ key, text string }{
		{"abc", `PRECONDITION_FAILED - The binding key must be an integer: <<"abc">>`},
		{"", `PRECONDITION_FAILED - The binding key must be an integer: <<>>`},
		{" 5", `PRECONDITION_FAILED - The binding key must be an integer: <<" 5">>`},
		{"1.5", `PRECONDITION_FAILED - The binding key must be an integer: <<"1.5">>`},
		{"0", "PRECONDITION_FAILED - The binding key must be greater than 0"},
		{"-3", "PRECONDITION_FAILED - The binding key must be greater than 0"},
	} {
		ch := e.channel(e.conn)
		expectErr(t, ch.QueueBind(qs[0], tt.key, "chx.err", false, nil), 406, tt.text)
		ch = e.channel(e.conn)
		expectErr(t, ch.ExchangeBind("chx.err.fan", tt.key, "chx.err", false, nil), 406, tt.text)
	}
	// "+5" and "07" are integers to Erlang too.
	ch := e.channel(e.conn)
	must(t, ch.QueueBind(qs[0], "+5", "chx.err", false, nil))
	must(t, ch.QueueBind(qs[1], "07", "chx.err", false, nil))
	// Unbinding checks nothing.
	must(t, ch.QueueUnbind(qs[0], "abc", "chx.err", nil))
	must(t, ch.ExchangeDelete("chx.err.fan", false, false)) // never bound, so never auto-deleted
}

func TestConsistentHashDeclareErrors(t *testing.T) {
	e := setup(t, broker.Options{})
	declare := func(name string, args rmq.Table) error {
		ch := e.channel(e.conn)
		err := ch.ExchangeDeclare(name, "x-consistent-hash", false, true, false, false, args)
		if err == nil {
			_ = ch.ExchangeDelete(name, false, false)
		}
		return err
	}
	expectErr(t, declare("chx.both", rmq.Table{"hash-header": "h", "hash-property": "message_id"}), 406,
		"PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive")
	expectErr(t, declare("chx.both2", rmq.Table{"hash-header": "h", "hash-property": "foo"}), 406,
		"PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive")
	expectErr(t, declare("chx.prop", rmq.Table{"hash-property": "foo"}), 406, "PRECONDITION_FAILED - Unsupported property: foo")
	must(t, declare("chx.empty", rmq.Table{"hash-header": ""}))
	// A redeclare checks the type (the atom's quotes and all) but not
	// these arguments, and does not validate them again: RabbitMQ keeps
	// the first ones.
	ch := e.channel(e.conn)
	must(t, ch.ExchangeDeclare("chx.redecl", "x-consistent-hash", false, true, false, false, rmq.Table{"hash-header": "a"}))
	must(t, ch.ExchangeDeclare("chx.redecl", "x-consistent-hash", false, true, false, false, rmq.Table{"hash-header": "b"}))
	must(t, ch.ExchangeDeclare("chx.redecl", "x-consistent-hash", false, true, false, false, rmq.Table{"hash-header": "a", "hash-property": "foo"}))
	expectErr(t, ch.ExchangeDeclare("chx.redecl", "direct", false, true, false, false, nil), 406,
		"PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'chx.redecl' in vhost '/': received 'direct' but current is ''x-consistent-hash''")
	ch = e.channel(e.conn)
	expectErr(t, ch.ExchangeDeclare("amq.direct", "x-consistent-hash", true, false, false, false, nil), 406,
		"PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'amq.direct' in vhost '/': received ''x-consistent-hash'' but current is 'direct'")
	ch = e.channel(e.conn)
	must(t, ch.ExchangeDelete("chx.redecl", false, false))
	must(t, declare("chx.other", rmq.Table{"foo": int32(1)}))
	// A hash-header or hash-property that is not a longstr crashes the
	// plugin's validate: RabbitMQ closes the connection with 541.
	for _, args := range []rmq.Table{{"hash-header": int32(5)}, {"hash-property": int32(5)}, {"hash-property": []byte("message_id")}} {
		c, err := rmq.Dial(e.b.URL)
		must(t, err)
		ch, err := c.Channel()
		must(t, err)
		closed := c.NotifyClose(make(chan *rmq.Error, 1))
		err = ch.ExchangeDeclare("chx.bad", "x-consistent-hash", false, true, false, false, args)
		expectErr(t, err, 541, "INTERNAL_ERROR")
		if ce := closeErr(t, closed, "connection"); ce == nil || ce.Code != 541 {
			t.Fatalf("%v: connection closed with %v, want 541", args, ce)
		}
		c.Close()
	}
}

// TestConsistentHashSameQueueTwice: a second binding of a queue (another
// weight) leaves the ring as it was; removing either binding takes the
// queue off the ring, as the plugin does.
func TestConsistentHashSameQueueTwice(t *testing.T) {
	e := setup(t, broker.Options{})
	qs := chxRing(e, "chx.twice", nil)
	must(t, e.ch.QueueBind(qs[0], "10", "chx.twice", false, nil))
	keys := make([]string, 20)
	pubs := make([]rmq.Publishing, 20)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	want := []int{1, 3, 1, 1, 2, 4, 1, 3, 3, 2, 4, 4, 2, 2, 1, 0, 0, 0, 0, 1}
	where := e.whereIs("chx.twice", qs, keys, pubs)
	for i, b := range want {
		if got := where[strconv.Itoa(i)]; got != bucketQueue(qs, b) {
			t.Fatalf("key %s went to %s, want %s", keys[i], got, bucketQueue(qs, b))
		}
	}
	must(t, e.ch.QueueUnbind(qs[0], "10", "chx.twice", nil))
	// Ring: q2 (bucket 0), q3 (buckets 1-3); q1's binding "1" is left but
	// routes nothing.
	where = e.whereIs("chx.twice", qs, keys, pubs)
	for i := range keys {
		if where[strconv.Itoa(i)] == qs[0] {
			t.Fatalf("key %s went to %s after its buckets were removed", keys[i], qs[0])
		}
	}
}

// TestConsistentHashToExchange: an exchange bound with a weight takes
// buckets like a queue; the message goes on through it.
func TestConsistentHashToExchange(t *testing.T) {
	e := setup(t, broker.Options{})
	must(t, e.ch.ExchangeDeclare("chx.e2e", "x-consistent-hash", false, true, false, false, nil))
	must(t, e.ch.ExchangeDeclare("chx.e2e.fan", "fanout", false, true, false, false, nil))
	a, b := e.queue("chx.e2e.a", nil), e.queue("chx.e2e.b", nil)
	must(t, e.ch.QueueBind(a, "", "chx.e2e.fan", false, nil))
	must(t, e.ch.QueueBind(b, "", "chx.e2e.fan", false, nil))
	must(t, e.ch.ExchangeBind("chx.e2e.fan", "2", "chx.e2e", false, nil))
	for i := range 5 {
		e.publishConfirmed("chx.e2e", "k"+strconv.Itoa(i), rmq.Publishing{Body: []byte("x")})
	}
	e.waitCount(a, 5)
	e.waitCount(b, 5)
}

// TestConsistentHashDurable: a durable exchange keeps its bindings over a
// restart, and its ring is rebuilt from them in the order the plugin
// re-adds them (sorted by binding key, then destination), whatever order
// they were bound in.
func TestConsistentHashDurable(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	must(t, ch.ExchangeDeclare("chx.dur", "x-consistent-hash", true, false, false, false, nil))
	qs := []string{"chx.dur.q1", "chx.dur.q2", "chx.dur.q3"}
	for i := len(qs) - 1; i >= 0; i-- { // q3 first: buckets 0-2 until the restart
		_, err := ch.QueueDeclare(qs[i], true, false, false, false, nil)
		must(t, err)
		must(t, ch.QueueBind(qs[i], []string{"1", "1", "3"}[i], "chx.dur", false, nil))
	}
	e := &env{t: t, b: r.b, conn: c, ch: ch}
	where := e.whereIs("chx.dur", qs, []string{"k15"}, make([]rmq.Publishing, 1))
	if where["0"] != qs[2] { // bucket 0 of 5
		t.Fatalf("before the restart, k15 went to %s, want %s", where["0"], qs[2])
	}
	c.Close()
	r.restart()
	c, ch = r.dial()
	defer c.Close()
	e = &env{t: t, b: r.b, conn: c, ch: ch}
	keys := make([]string, 20)
	pubs := make([]rmq.Publishing, 20)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	want := []int{1, 3, 1, 1, 2, 4, 1, 3, 3, 2, 4, 4, 2, 2, 1, 0, 0, 0, 0, 1}
	where = e.whereIs("chx.dur", qs, keys, pubs)
	for i, b := range want {
		if got := where[strconv.Itoa(i)]; got != bucketQueue(qs, b) {
			t.Errorf("after restart, key %s went to %s, want %s", keys[i], got, bucketQueue(qs, b))
		}
	}
}

// TestConsistentHashManagement: the management API lists the type among
// exchange_types, as RabbitMQ with the plugin does, and its exchanges.
func TestConsistentHashManagement(t *testing.T) {
	testutil.InProcess(t)
	e := setup(t, broker.Options{})
	hs := httptest.NewServer(e.b.ManagementHandler())
	defer hs.Close()
	get := func(path string, out any) {
		t.Helper()
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		must(t, json.NewDecoder(resp.Body).Decode(out))
	}
	var ov struct {
		ExchangeTypes []struct {
			Name, Description string
			Enabled           bool
		} `json:"exchange_types"`
	}
	get("/api/overview", &ov)
	found := false
	for _, x := range ov.ExchangeTypes {
		if x.Name == "x-consistent-hash" {
			found = x.Description == "Consistent Hashing Exchange" && x.Enabled
		}
	}
	if !found {
		t.Fatalf("exchange_types: %+v", ov.ExchangeTypes)
	}
	must(t, e.ch.ExchangeDeclare("chx.mgmt", "x-consistent-hash", true, false, false, false, rmq.Table{"hash-header": "user"}))
	var x struct {
		Name, Type string
		Durable    bool
		Arguments  map[string]any
	}
	get("/api/exchanges/"+url.PathEscape("/")+"/chx.mgmt", &x)
	if x.Type != "x-consistent-hash" || !x.Durable || x.Arguments["hash-header"] != "user" {
		t.Fatalf("exchange: %+v", x)
	}
	q := e.queue("chx.mgmt.q", nil)
	must(t, e.ch.QueueBind(q, "7", "chx.mgmt", false, nil))
	var bs []struct {
		Source, Destination string
		RoutingKey          string `json:"routing_key"`
	}
	get("/api/exchanges/"+url.PathEscape("/")+"/chx.mgmt/bindings/source", &bs)
	if len(bs) != 1 || bs[0].Destination != q || bs[0].RoutingKey != "7" {
		t.Fatalf("bindings: %+v", bs)
	}
}

// TestConsistentHashCluster: in cluster mode the exchange and its
// bindings are replicated like any other; every node routes a key to the
// same queue, the plugin's bucket.
func TestConsistentHashCluster(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "warmup", quorumArgs) // the cluster has its leaders
	chans := clusterChannels(t, nodes)
	must(t, chans[0].ExchangeDeclare("chx.cl", "x-consistent-hash", true, false, false, false, nil))
	qs := []string{"chx.cl.q1", "chx.cl.q2", "chx.cl.q3"}
	for i, q := range qs {
		_, err := chans[0].QueueDeclare(q, true, false, false, false, nil)
		must(t, err)
		must(t, chans[1].QueueBind(q, []string{"1", "1", "3"}[i], "chx.cl", false, nil))
	}
	expectErr(t, chans[2].QueueBind(qs[0], "abc", "chx.cl", false, nil), 406,
		`PRECONDITION_FAILED - The binding key must be an integer: <<"abc">>`)
	chans = clusterChannels(t, nodes)
	// A bind returns once applied on the node that took it; the others
	// apply it in log order soon after.
	for _, n := range nodes {
		testutil.Eventually(t, 10*time.Second, func() bool {
			req, _ := http.NewRequest("GET", n.api+"/api/exchanges/%2F/chx.cl/bindings/source", nil)
			req.SetBasicAuth("guest", "guest")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var bs []any
			return json.NewDecoder(resp.Body).Decode(&bs) == nil && len(bs) == len(qs)
		}, "%s has not applied the bindings", n.name)
	}
	// Buckets of "k0".."k19" among 5, as in TestConsistentHashRoutingKey.
	want := []int{1, 3, 1, 1, 2, 4, 1, 3, 3, 2, 4, 4, 2, 2, 1, 0, 0, 0, 0, 1}
	for n, ch := range chans {
		must(t, ch.Confirm(false))
		for i := range want {
			dc, err := ch.PublishWithDeferredConfirm("chx.cl", "k"+strconv.Itoa(i), false, false,
				rmq.Publishing{Body: []byte(strconv.Itoa(n) + "/" + strconv.Itoa(i))})
			must(t, err)
			if !dc.Wait() {
				t.Fatal("nacked")
			}
		}
	}
	for _, q := range qs {
		for {
			d, ok, err := chans[0].Get(q, true)
			must(t, err)
			if !ok {
				break
			}
			var node, i int
			if _, err := fmt.Sscanf(string(d.Body), "%d/%d", &node, &i); err != nil {
				t.Fatal(err)
			}
			if want := bucketQueue(qs, want[i]); q != want {
				t.Errorf("k%d published on node %d went to %s, want %s", i, node+1, q, want)
			}
		}
	}
}

// TestConsistentHashKill: the exchange and its bindings, declared on the
// real binary, survive kill -9 (no shutdown, no flush). Definitions are
// not fsynced on their own (nor are RabbitMQ's): they are durable once a
// persistent message confirmed after them is.
func TestConsistentHashKill(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	dir := t.TempDir()
	run := func() (*exec.Cmd, string) {
		cmd, url, _ := startBinary(t, bin, dir)
		return cmd, url
	}
	cmd, url := run()
	c := dial(t, url)
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.ExchangeDeclare("chx.kill", "x-consistent-hash", true, false, false, false, nil))
	qs := []string{"chx.kill.q1", "chx.kill.q2", "chx.kill.q3"}
	for i, q := range qs {
		_, err := ch.QueueDeclare(q, true, false, false, false, nil)
		must(t, err)
		must(t, ch.QueueBind(q, []string{"1", "1", "3"}[i], "chx.kill", false, nil))
	}
	must(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirm("", qs[2], false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("marker")})
	must(t, err)
	if !dc.Wait() {
		t.Fatal("marker nacked")
	}
	_ = cmd.Process.Kill() // SIGKILL
	_ = cmd.Wait()
	_, url = run()
	c = dial(t, url)
	ch, err = c.Channel()
	must(t, err)
	e := &env{t: t, b: &testutil.Broker{URL: url}, conn: c, ch: ch}
	if d := e.get(ch, qs[2], true); string(d.Body) != "marker" {
		t.Fatalf("got %q, want the marker", d.Body)
	}
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	want := []int{1, 3, 1, 1, 2, 4, 1, 3, 3, 2, 4, 4, 2, 2, 1, 0, 0, 0, 0, 1}
	where := e.whereIs("chx.kill", qs, keys, make([]rmq.Publishing, len(keys)))
	for i, b := range want {
		if got := where[strconv.Itoa(i)]; got != bucketQueue(qs, b) {
			t.Errorf("after kill -9, key %s went to %s, want %s", keys[i], got, bucketQueue(qs, b))
		}
	}
}

// TestConsistentHashPerKeyOrder is the recipe in docs/features.md: a consistent-hash
// exchange over single-active-consumer queues, two consumers on each.
// Every key's messages reach one queue and one consumer at a time, in
// publish order, while the keys spread over the queues.
func TestConsistentHashPerKeyOrder(t *testing.T) {
	e := setup(t, broker.Options{})
	const ex, keys, perKey = "chx.order", 12, 25
	must(t, e.ch.ExchangeDeclare(ex, "x-consistent-hash", false, true, false, false, nil))
	type delivery struct {
		queue, key string
		seq        int
	}
	got := make(chan delivery, keys*perKey)
	for i := range 3 {
		q := e.queue(ex+".w"+strconv.Itoa(i), rmq.Table{"x-single-active-consumer": true})
		must(t, e.ch.QueueBind(q, "1", ex, false, nil))
		for range 2 {
			ch := e.channel(e.conn)
			must(t, ch.Qos(5, 0, false))
			ds, err := ch.Consume(q, "", false, false, false, false, nil)
			must(t, err)
			go func() {
				for d := range ds {
					var key string
					var seq int
					if _, err := fmt.Sscanf(string(d.Body), "%s %d", &key, &seq); err == nil {
						got <- delivery{q, key, seq}
					}
					_ = d.Ack(false)
				}
			}()
		}
	}
	for n := range perKey {
		for k := range keys {
			key := "account-" + strconv.Itoa(k)
			must(t, e.ch.Publish(ex, key, false, false, rmq.Publishing{Body: []byte(key + " " + strconv.Itoa(n))}))
		}
	}
	next := map[string]int{}
	home := map[string]string{}
	queues := map[string]bool{}
	for i := range keys * perKey {
		var d delivery
		select {
		case d = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d deliveries", i, keys*perKey)
		}
		if d.seq != next[d.key] {
			t.Fatalf("%s: got %d, want %d", d.key, d.seq, next[d.key])
		}
		next[d.key]++
		if h, ok := home[d.key]; ok && h != d.queue {
			t.Fatalf("%s delivered from %s and %s", d.key, h, d.queue)
		}
		home[d.key] = d.queue
		queues[d.queue] = true
	}
	if len(queues) < 2 {
		t.Fatalf("%d keys all went to %v", keys, queues)
	}
}
