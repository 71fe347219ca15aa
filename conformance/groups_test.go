package conformance

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Message groups (x-message-group-header, docs/groups.md): railmq's own;
// RabbitMQ 3.10.8 and 4.x have no such argument (an unknown x- argument
// is accepted and ignored there), so these tests state railmq's rule.

const groupHeader = "JMSXGroupID"

func groupArgs() rmq.Table { return rmq.Table{"x-message-group-header": groupHeader} }

// groupMsg is message n of group g ("" : no header), numbered in its
// header "n".
func groupMsg(g string, n int, persistent bool) rmq.Publishing {
	p := rmq.Publishing{Headers: rmq.Table{"n": int32(n)}, Body: []byte(fmt.Sprintf("%s:%d", g, n))}
	if g != "" {
		p.Headers[groupHeader] = g
	}
	if persistent {
		p.DeliveryMode = rmq.Persistent
	}
	return p
}

// groupChecker sees every delivery and every settlement of a grouped
// queue's consumers: it counts a message of a group delivered out of its
// group's order (after a later one, without the earlier ones returned),
// and a group delivered to a consumer while another holds it (has one of
// its messages unacked).
type groupChecker struct {
	mu         sync.Mutex
	next       map[string]int    // the group's next number expected
	holder     map[string]string // consumer holding the group
	held       map[string]int    // its unacked messages
	violations []string
	delivered  int
	order      []string // groups in delivery order
}

func newGroupChecker() *groupChecker {
	return &groupChecker{next: map[string]int{}, holder: map[string]string{}, held: map[string]int{}}
}

func groupOf(d rmq.Delivery) (string, int) {
	g, _ := d.Headers[groupHeader].(string)
	n, _ := d.Headers["n"].(int32)
	return g, int(n)
}

// delivered records d to consumer who.
func (c *groupChecker) deliver(who string, d rmq.Delivery) {
	g, n := groupOf(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delivered++
	c.order = append(c.order, g)
	if h := c.holder[g]; h != "" && h != who {
		c.violations = append(c.violations, fmt.Sprintf("group %s to %s while %s holds it", g, who, h))
	}
	c.holder[g] = who
	c.held[g]++
	if n != c.next[g] {
		c.violations = append(c.violations, fmt.Sprintf("group %s: got %d, want %d", g, n, c.next[g]))
	}
	c.next[g] = n + 1
}

// settle records d settled; requeued: put back (its group restarts there).
// Called before the settlement is sent, so the broker cannot act on it
// first.
func (c *groupChecker) settle(d rmq.Delivery, requeued bool) {
	g, n := groupOf(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held[g]--
	if c.held[g] == 0 {
		delete(c.holder, g)
		delete(c.held, g)
	}
	if requeued && n < c.next[g] {
		c.next[g] = n
	}
}

func (c *groupChecker) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.violations) > 0 {
		t.Fatalf("%d violations, first: %v", len(c.violations), c.violations[:min(5, len(c.violations))])
	}
}

// publishAll publishes ps to q on a confirm channel and waits for every
// confirm.
func publishAll(t *testing.T, conn *rmq.Connection, q string, ps []rmq.Publishing) {
	t.Helper()
	ch, err := conn.Channel()
	must(t, err)
	defer ch.Close()
	must(t, ch.Confirm(false))
	var dcs []*rmq.DeferredConfirmation
	for _, p := range ps {
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, p)
		must(t, err)
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if !dc.Wait() {
			t.Fatal("publish nacked")
		}
	}
}

// interleaved is groups×per messages, the groups' messages interleaved.
func interleaved(groups, per int, persistent bool) []rmq.Publishing {
	var ps []rmq.Publishing
	for n := range per {
		for g := range groups {
			ps = append(ps, groupMsg("g"+strconv.Itoa(g), n, persistent))
		}
	}
	return ps
}

// Four competing consumers with random ack delays: every group's messages
// arrive in publish order and never at two consumers at once, all of
// them, and the groups are spread over the consumers.
func TestGroupsOrderCompetingConsumers(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("grp-order", groupArgs())
	// Fewer groups than the messages in flight (4 × 10): a plain queue
	// gives one group to several consumers at once.
	const groups, per = 8, 200
	publishAll(t, e.conn, q, interleaved(groups, per, false))
	chk := newGroupChecker()
	served := consumeChecked(t, e, q, 4, 10, chk, groups*per, func(d rmq.Delivery) bool { return false })
	chk.check(t)
	for who, n := range served {
		if n == 0 {
			t.Fatalf("consumer %s got nothing: groups not spread (%v)", who, served)
		}
	}
}

// consumeChecked runs n consumers on q (prefetch each, their own
// channels) until total messages are acked, each delivery seen by chk;
// nack says which deliveries to nack with requeue instead. It returns the
// count each consumer acked.
func consumeChecked(t *testing.T, e *env, q string, n, prefetch int, chk *groupChecker, total int, nack func(rmq.Delivery) bool) map[string]int {
	t.Helper()
	var mu sync.Mutex
	acked := 0
	served := map[string]int{}
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for i := range n {
		ch := e.channel(e.conn)
		must(t, ch.Qos(prefetch, 0, false))
		who := fmt.Sprintf("c%d", i)
		ds, err := ch.Consume(q, who, false, false, false, false, nil)
		must(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ch.Close()
			for {
				select {
				case <-done:
					return
				case d := <-ds:
					chk.deliver(who, d)
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					if !d.Redelivered && nack(d) {
						chk.settle(d, true)
						_ = d.Nack(false, true)
						continue
					}
					chk.settle(d, false)
					if d.Ack(false) != nil {
						return
					}
					mu.Lock()
					acked++
					served[who]++
					if acked == total {
						once.Do(func() { close(done) })
					}
					mu.Unlock()
				}
			}
		}()
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		mu.Lock()
		t.Errorf("acked %d of %d", acked, total)
		mu.Unlock()
		once.Do(func() { close(done) })
	}
	wg.Wait()
	return served
}

// A nack with requeue puts the message back ahead of its group's later
// ones: the group goes on from it, in order, with competing consumers.
// Prefetch 1: a consumer holding several of a group's messages keeps
// those delivered before its nack (docs/groups.md), so the checker's
// strict order at delivery holds for one at a time.
func TestGroupsNackRequeueKeepsOrder(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("grp-nack", groupArgs())
	const groups, per = 2, 150
	publishAll(t, e.conn, q, interleaved(groups, per, false))
	chk := newGroupChecker()
	consumeChecked(t, e, q, 3, 1, chk, groups*per, func(d rmq.Delivery) bool {
		_, n := groupOf(d)
		return n%7 == 3 // nacked once (the redelivery is acked)
	})
	chk.check(t)
}

// A group is held by the consumer with its unacked message: another
// consumer with room gets other groups only; closing the holder's channel
// returns the group's messages, which the other then gets from the first
// unacked one, in order. basic.cancel leaves the deliveries with the
// channel (AMQP lets it ack them): the group waits for their ack.
func TestGroupsReleaseOnCancelAndClose(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("grp-release", groupArgs())
	publishAll(t, e.conn, q, []rmq.Publishing{groupMsg("a", 0, false), groupMsg("a", 1, false), groupMsg("a", 2, false), groupMsg("a", 3, false)})
	chA := e.channel(e.conn)
	must(t, chA.Qos(2, 0, false))
	dsA, err := chA.Consume(q, "A", false, false, false, false, nil)
	must(t, err)
	a0, a1 := recv(t, dsA), recv(t, dsA)
	if _, n := groupOf(a0); n != 0 {
		t.Fatalf("A got %s first", a0.Body)
	}
	if _, n := groupOf(a1); n != 1 {
		t.Fatalf("A got %s second", a1.Body)
	}
	chB := e.channel(e.conn)
	must(t, chB.Qos(10, 0, false))
	dsB, err := chB.Consume(q, "B", false, false, false, false, nil)
	must(t, err)
	publishAll(t, e.conn, q, []rmq.Publishing{groupMsg("b", 0, false)})
	if d := recv(t, dsB); string(d.Body) != "b:0" {
		t.Fatalf("B got %s, want b:0 (group a is held by A)", d.Body)
	} else {
		must(t, d.Ack(false))
	}
	none(t, dsB, 200*time.Millisecond)
	// Cancelled, A still holds a:0 and a:1: B gets nothing of a.
	must(t, chA.Cancel("A", false))
	none(t, dsB, 200*time.Millisecond)
	must(t, a0.Ack(false)) // a:1 still held
	none(t, dsB, 200*time.Millisecond)
	must(t, a1.Ack(false)) // released
	for _, want := range []string{"a:2", "a:3"} {
		if d := recv(t, dsB); string(d.Body) != want {
			t.Fatalf("B got %s, want %s", d.Body, want)
		}
	}
	must(t, chB.Close()) // with a:2 and a:3 unacked
	// Both back, in order, ahead of anything later.
	conn2 := dial(t, e.b.URL)
	chC, err := conn2.Channel()
	must(t, err)
	dsC, err := chC.Consume(q, "C", false, false, false, false, nil)
	must(t, err)
	for _, want := range []string{"a:2", "a:3"} {
		d := recv(t, dsC)
		if string(d.Body) != want || !d.Redelivered {
			t.Fatalf("C got %s (redelivered %v), want %s redelivered", d.Body, d.Redelivered, want)
		}
		must(t, d.Ack(false))
	}
	// Connection loss: D holds group c; its connection drops; E gets c
	// from its first message.
	publishAll(t, e.conn, q, []rmq.Publishing{groupMsg("c", 0, false), groupMsg("c", 1, false)})
	d1 := recv(t, dsC)
	if string(d1.Body) != "c:0" {
		t.Fatalf("C got %s, want c:0", d1.Body)
	}
	chE := e.channel(e.conn)
	dsE, err := chE.Consume(q, "E", false, false, false, false, nil)
	must(t, err)
	d2 := recv(t, dsC) // c:1 to its holder, C
	if string(d2.Body) != "c:1" {
		t.Fatalf("C got %s, want c:1", d2.Body)
	}
	none(t, dsE, 200*time.Millisecond)
	conn2.Close()
	for _, want := range []string{"c:0", "c:1"} {
		d := recv(t, dsE)
		if string(d.Body) != want {
			t.Fatalf("E got %s, want %s", d.Body, want)
		}
		must(t, d.Ack(false))
	}
}

// Messages without the header are in no group: they go to any consumer
// with room, both consumers at once.
func TestGroupsNoHeaderIsFree(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("grp-free", groupArgs())
	publishAll(t, e.conn, q, []rmq.Publishing{groupMsg("", 0, false), groupMsg("", 1, false)})
	var ds []<-chan rmq.Delivery
	for _, who := range []string{"A", "B"} {
		ch := e.channel(e.conn)
		must(t, ch.Qos(1, 0, false))
		d, err := ch.Consume(q, who, false, false, false, false, nil)
		must(t, err)
		ds = append(ds, d)
	}
	recv(t, ds[0])
	recv(t, ds[1]) // both unacked at once: no group holds them
}

// Fairness: a group with a backlog of 10,000 does not starve 50 groups of
// one message published after it; the dispatcher serves groups in turn,
// so the 50 singles are all delivered among the first ~100 deliveries.
// The queue is durable with a window of 64 messages, so most of the
// backlog and every single wait in the store (the group index works on
// paged messages).
func TestGroupsFairness(t *testing.T) {
	e := setup(t, broker.Options{QueueWindow: 64})
	q := "grp-fair"
	_, err := e.ch.QueueDeclare(q, true, false, false, false, groupArgs())
	must(t, err)
	var ps []rmq.Publishing
	for n := range 10000 {
		ps = append(ps, groupMsg("noisy", n, true))
	}
	for g := range 50 {
		ps = append(ps, groupMsg("single"+strconv.Itoa(g), 0, true))
	}
	publishAll(t, e.conn, q, ps)
	chk := newGroupChecker()
	ch := e.channel(e.conn)
	must(t, ch.Qos(1, 0, false))
	ds, err := ch.Consume(q, "c", false, false, false, false, nil)
	must(t, err)
	singles := 0
	for i := 1; singles < 50; i++ {
		d := recv(t, ds)
		chk.deliver("c", d)
		if g, _ := groupOf(d); strings.HasPrefix(g, "single") {
			singles++
		}
		chk.settle(d, false)
		must(t, d.Ack(false))
		if i > 110 {
			t.Fatalf("%d deliveries and only %d of the 50 singles", i, singles)
		}
	}
	chk.check(t)
}

// A durable grouped queue keeps each group's order across a restart:
// acked messages stay gone, unacked ones come back first, redelivered,
// and the rest follow in order (the index is rebuilt from the store).
func TestGroupsRestartKeepsOrder(t *testing.T) {
	testutil.InProcess(t)
	dir := t.TempDir()
	opts := broker.Options{DataDir: dir, QueueWindow: 16}
	b, stop := testutil.StartStoppable(t, opts)
	conn := dial(t, b.URL)
	ch, err := conn.Channel()
	must(t, err)
	q := "grp-restart"
	_, err = ch.QueueDeclare(q, true, false, false, false, groupArgs())
	must(t, err)
	const groups, per = 5, 40
	publishAll(t, conn, q, interleaved(groups, per, true))
	// Take some: ack the first 10 of each group, leave 5 more unacked.
	must(t, ch.Qos(groups*15, 0, false))
	ds, err := ch.Consume(q, "c", false, false, false, false, nil)
	must(t, err)
	for range groups * 15 {
		d := recv(t, ds)
		if _, n := groupOf(d); n < 10 {
			must(t, d.Ack(false))
		}
	}
	conn.Close()
	stop()
	b, _ = testutil.StartStoppable(t, opts)
	// Two competing consumers after the restart: each group goes on from
	// its first unacked message, in order, one consumer at a time.
	e := &env{t: t, b: b, conn: dial(t, b.URL)}
	chk := newGroupChecker()
	for g := range groups {
		chk.next["g"+strconv.Itoa(g)] = 10
	}
	var mu sync.Mutex
	unflagged := []string{}
	consumeChecked(t, e, q, 2, 5, chk, groups*(per-10), func(d rmq.Delivery) bool {
		// The unacked ones are flagged; a later one may be too (the store
		// keeps the highest sequence delivered, and groups are delivered
		// out of the queue's sequence: redelivered is a "may have been").
		if _, n := groupOf(d); n < 15 && !d.Redelivered {
			mu.Lock()
			unflagged = append(unflagged, string(d.Body))
			mu.Unlock()
		}
		return false
	})
	chk.check(t)
	if len(unflagged) > 0 {
		t.Fatalf("not flagged redelivered: %v", unflagged)
	}
	if n := e.count(q); n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

// The policy key message-group-header makes a queue grouped; a bad value
// is refused (400); the queue's own argument wins over the policy's.
func TestGroupsPolicy(t *testing.T) {
	e := setup(t, broker.Options{})
	a := newAPI(t, e.b)
	t.Cleanup(func() { a.call("DELETE", "/api/policies/%2F/grppol", "guest", "guest", nil, nil) })
	for _, bad := range []any{"", 5} {
		if code := a.call("PUT", "/api/policies/%2F/grppol-bad", "guest", "guest", map[string]any{"pattern": "^grppol-", "apply-to": "queues",
			"definition": map[string]any{"message-group-header": bad}}, nil); code != 400 {
			t.Fatalf("message-group-header %v: %d, want 400", bad, code)
		}
	}
	a.admin("PUT", "/api/policies/%2F/grppol", map[string]any{"pattern": "^grppol-", "apply-to": "queues", "priority": 1,
		"definition": map[string]any{"message-group-header": "tenant"}}, 201)
	q := e.queue("grppol-q", nil)
	own := e.queue("grppol-own", groupArgs()) // its own header wins: JMSXGroupID
	// A queue declared before the policy, with messages: grouped from the
	// policy on, its ready messages filed in order.
	late := e.queue("grplate-q", nil)
	e.publish("", late, "")
	a.admin("PUT", "/api/policies/%2F/grplate", map[string]any{"pattern": "^grplate-", "apply-to": "queues", "priority": 1,
		"definition": map[string]any{"message-group-header": "tenant"}}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/policies/%2F/grplate", "guest", "guest", nil, nil) })
	testutil.Eventually(t, 5*time.Second, func() bool {
		var raw map[string]any
		a.call("GET", "/api/queues/%2F/"+late, "guest", "guest", nil, &raw)
		return raw["policy"] == "grplate"
	}, "the policy applied")
	e.get(e.ch, late, true) // the message from before
	for _, c := range []struct {
		q, header string
	}{{q, "tenant"}, {own, groupHeader}, {late, "tenant"}} {
		publishAll(t, e.conn, c.q, []rmq.Publishing{
			{Headers: rmq.Table{c.header: "x"}, Body: []byte("x0")},
			{Headers: rmq.Table{c.header: "x"}, Body: []byte("x1")},
		})
		chA, chB := e.channel(e.conn), e.channel(e.conn)
		must(t, chA.Qos(1, 0, false))
		must(t, chB.Qos(1, 0, false))
		dA, err := chA.Consume(c.q, "A", false, false, false, false, nil)
		must(t, err)
		if d := recv(t, dA); string(d.Body) != "x0" {
			t.Fatalf("%s: A got %s", c.q, d.Body)
		}
		dB, err := chB.Consume(c.q, "B", false, false, false, false, nil)
		must(t, err)
		none(t, dB, 200*time.Millisecond) // x1 waits for A's ack: grouped by c.header
		must(t, chA.Close())
		if d := recv(t, dB); string(d.Body) != "x0" {
			t.Fatalf("%s: B got %s after A closed, want x0", c.q, d.Body)
		}
		must(t, chB.Close())
	}
}

// A bad x-message-group-header is refused with 406, in the words RabbitMQ
// uses for a bad argument; a redeclare must match it.
func TestGroupsBadArgument(t *testing.T) {
	e := setup(t, broker.Options{})
	for _, c := range []struct {
		v    any
		text string
	}{
		{int32(5), "PRECONDITION_FAILED - invalid arg 'x-message-group-header' for queue 'grp-bad' in vhost '/': {unacceptable_type,signedint}"},
		{"", "PRECONDITION_FAILED - invalid arg 'x-message-group-header' for queue 'grp-bad' in vhost '/': {value_empty,<<>>}"},
		{true, "PRECONDITION_FAILED - invalid arg 'x-message-group-header' for queue 'grp-bad' in vhost '/': {unacceptable_type,bool}"},
	} {
		ch := e.channel(e.conn)
		_, err := ch.QueueDeclare("grp-bad", false, false, false, false, rmq.Table{"x-message-group-header": c.v})
		expectErr(t, err, 406, c.text)
	}
	q := e.queue("grp-eq", groupArgs())
	if _, err := e.ch.QueueDeclare(q, false, false, false, false, groupArgs()); err != nil {
		t.Fatalf("redeclare with the same arguments: %v", err)
	}
	ch := e.channel(e.conn)
	_, err := ch.QueueDeclare(q, false, false, false, false, rmq.Table{"x-message-group-header": "other"})
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-message-group-header' for queue 'grp-eq' in vhost '/': received 'other' but current is 'JMSXGroupID'")
	ch = e.channel(e.conn)
	_, err = ch.QueueDeclare(q, false, false, false, false, nil)
	expectErr(t, err, 406, "PRECONDITION_FAILED - inequivalent arg 'x-message-group-header' for queue 'grp-eq' in vhost '/': received none but current is the value 'JMSXGroupID' of type 'longstr'")
	// Quorum queues take the argument (quorum_groups_test.go), checked
	// alike.
	ch = e.channel(e.conn)
	_, err = ch.QueueDeclare("grp-qq", true, false, false, false, rmq.Table{"x-queue-type": "quorum", "x-message-group-header": int32(5)})
	expectErr(t, err, 406, "PRECONDITION_FAILED - invalid arg 'x-message-group-header' for queue 'grp-qq' in vhost '/': {unacceptable_type,signedint}")
	ch = e.channel(e.conn)
	if _, err := ch.QueueDeclare("grp-qq", true, false, false, false, rmq.Table{"x-queue-type": "quorum", "x-message-group-header": groupHeader}); err != nil {
		t.Fatalf("a grouped quorum queue: %v", err)
	}
}

// groupsPikaScript publishes 3 groups of 30 and consumes them on two
// pika channels of prefetch 5, checking order and holders.
const groupsPikaScript = `
import sys, pika
url, q = sys.argv[1], sys.argv[2]
conn = pika.BlockingConnection(pika.URLParameters(url))
pub = conn.channel()
pub.confirm_delivery()
for n in range(30):
    for g in ("a", "b", "c"):
        pub.basic_publish("", q, b"%s:%d" % (g.encode(), n), pika.BasicProperties(headers={"JMSXGroupID": g, "n": n}))
nxt, holder, held, bad, done = {}, {}, {}, [], [0]
chans = {}
def on(who):
    def cb(ch, m, props, body):
        g, n = props.headers["JMSXGroupID"], props.headers["n"]
        if holder.get(g, who) != who:
            bad.append("%s to %s while %s holds it" % (g, who, holder[g]))
        if n != nxt.get(g, 0):
            bad.append("%s: got %d want %d" % (g, n, nxt.get(g, 0)))
        nxt[g] = n + 1
        holder[g] = who
        held[g] = held.get(g, 0) + 1
        chans[who].append((ch, m.delivery_tag, g))
    return cb
for who in ("A", "B"):
    ch = conn.channel()
    ch.basic_qos(prefetch_count=5)
    chans[who] = []
    ch.basic_consume(q, on(who))
while done[0] < 90:
    conn.process_data_events(time_limit=0.05)
    for who, pending in chans.items():
        while pending:
            ch, tag, g = pending.pop(0)
            held[g] -= 1
            if held[g] == 0:
                del holder[g]
            ch.basic_ack(tag)
            done[0] += 1
print("delivered", done[0], "violations", len(bad), bad[:3])
sys.exit(1 if bad else 0)
`

// The same rule through pika (Python): two consumers on one connection,
// prefetch 5 each, three groups; a checker sees every delivery.
func TestGroupsPika(t *testing.T) {
	e := setup(t, broker.Options{})
	q := e.queue("grp-pika", groupArgs())
	out, err := exec.Command("/usr/bin/python3", "-c", groupsPikaScript, e.b.URL, q).CombinedOutput()
	if err != nil {
		t.Fatalf("pika: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "delivered 90 violations 0") {
		t.Fatalf("pika: %s", out)
	}
}
