package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// TestMigrationFromRabbitMQ is the blue-green migration of a live
// application from RabbitMQ 3.10.8 to railmq, as docs/migrating.md tells
// an operator to do it, with both brokers real processes on this machine
// (make compat-migrate; RAILMQ_MIGRATION=1):
//
//  1. a private RabbitMQ node (its own node name, ports, epmd, cookie and
//     data: the machine's shared RabbitMQ is not touched) holds the
//     application's vhost, user, exchange, two queues and bindings;
//     producers (amqp091-go, confirms, a unique id in each body) publish
//     to it and four consumers consume the work queue there;
//  2. its definitions are exported (GET /api/definitions) and imported
//     into a fresh railmq (POST /api/definitions): the application's
//     user logs in to railmq with the password hash RabbitMQ exported;
//  3. railmq gets a federation-upstream pointing at the RabbitMQ node and
//     a policy federation-upstream-set "all" on the queues;
//  4. the consumers move to railmq one at a time; railmq is killed with
//     SIGKILL and restarted on its data after the second, RabbitMQ's
//     beam.smp after the third;
//  5. the producers switch to railmq, one at a time;
//  6. RabbitMQ's work queue drains through federation; what federation
//     does not move (the queue no one consumed) a dynamic shovel on
//     railmq moves (src RabbitMQ, ack-mode on-confirm, src-delete-after
//     queue-length);
//  7. the policy and the upstream are removed; everything is consumed.
//
// Then the history decides (migLoad.check): every confirmed message
// delivered, a repeat delivery only flagged (or explained by a kill -9's
// at-least-once window, as check states), and no consumer idle for
// longer than migMaxIdle while the producers ran, less the time a broker
// was down.
func TestMigrationFromRabbitMQ(t *testing.T) {
	testutil.InProcess(t)
	if os.Getenv("RAILMQ_MIGRATION") == "" {
		requireRabbitMQ(t) // fails in CI without rabbitmq-server
		t.Skip("RAILMQ_MIGRATION is not set: the migration test runs in make compat-migrate (make compat)")
	}
	m := &migration{t: t, began: time.Now()}
	m.rabbit = newRabbitNode(t)
	m.rail = newRailmqNode(t)
	m.progress("starting RabbitMQ node %s (AMQP 127.0.0.1:%d, management :%d) and railmq (%s)", m.rabbit.name, m.rabbit.amqp, m.rabbit.mgmt, m.rail.amqp)
	m.rabbit.start()
	m.rail.start()
	m.progress("both up")
	m.declareOnRabbit()
	m.load = newMigLoad([2]string{m.rabbit.url(migUser, migPass, migVhost), m.rail.url(migUser, migPass, migVhost)})
	defer m.stopLoad()
	for i := range migProducers {
		p := newMigClient(fmt.Sprintf("producer%d", i+1))
		m.producers = append(m.producers, p)
		m.load.run(p, m.load.produce)
	}
	for i := range 4 {
		c := newMigClient(fmt.Sprintf("consumer%d", i+1))
		m.consumers = append(m.consumers, c)
		m.load.run(c, m.load.consumer(migWork, migConsumerRate))
	}
	m.dwell("the application runs on RabbitMQ", 5*time.Second)

	m.importDefinitions()
	m.federate()
	for i, c := range m.consumers {
		m.moveConsumer(c)
		m.dwell(fmt.Sprintf("%d of 4 consumers on railmq", i+1), 6*time.Second)
		switch i {
		case 1:
			m.killRailmq()
			m.dwell("after railmq's restart", 5*time.Second)
		case 2:
			m.killRabbit()
			m.dwell("after RabbitMQ's restart", 5*time.Second)
		}
	}
	for i, p := range m.producers {
		p.moveTo(onRailmq)
		m.waitFor(60*time.Second, func() bool { return p.got[onRailmq].Load() > 50 }, "%s publishes to railmq", p.name)
		m.progress("%s moved to railmq", p.name)
		m.dwell(fmt.Sprintf("%d of %d producers on railmq", i+1, migProducers), 4*time.Second)
	}
	m.drainRabbit()
	m.finish()
}

// migMaxIdle is the longest a consumer may go without a delivery while
// the producers run, the time a broker was down left out: a move
// (cancel, reconnect, the link's pull starting), a reconnect after a
// restart (the clients retry every 200 ms, the link after its
// reconnect-delay of 1 s), on a busy machine.
const migMaxIdle = 10 * time.Second

type migration struct {
	t           *testing.T
	began       time.Time
	rabbit      *rabbitNode
	rail        *railmqNode
	load        *migLoad
	producers   []*migClient
	consumers   []*migClient
	exported    []byte
	loadStopped bool
	shovelled   int // messages left on RabbitMQ for the shovels
}

func (m *migration) progress(format string, args ...any) {
	m.t.Helper()
	l := m.load
	counts := ""
	if l != nil {
		l.h.mu.Lock()
		pub := len(l.h.published)
		l.h.mu.Unlock()
		counts = fmt.Sprintf(" [published %d, confirmed %d on rabbitmq + %d on railmq, delivered %d on rabbitmq + %d on railmq]",
			pub, l.confirmedOn[onRabbit].Load(), l.confirmedOn[onRailmq].Load(), l.deliveredOn[onRabbit].Load(), l.deliveredOn[onRailmq].Load())
	}
	m.t.Logf("migrate %6.1fs: %s%s", time.Since(m.began).Seconds(), fmt.Sprintf(format, args...), counts)
}

// dwell lets the load run for d (the application at work between two
// steps), with a progress line.
func (m *migration) dwell(what string, d time.Duration) {
	m.t.Helper()
	m.progress("%s: running %v", what, d)
	time.Sleep(d)
}

func (m *migration) waitFor(within time.Duration, cond func() bool, format string, args ...any) {
	m.t.Helper()
	testutil.Eventually(m.t, within, func() bool {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
		return false
	}, format, args...)
}

func (m *migration) stopLoad() {
	if !m.loadStopped {
		m.loadStopped = true
		close(m.load.stop)
		m.load.wg.Wait()
	}
}

// must2xx fails the test unless an API call answered 2xx.
func (m *migration) must2xx(who, method, path string, code int, body []byte) {
	m.t.Helper()
	if code < 200 || code > 299 {
		m.t.Fatalf("%s %s %s: %d %s", who, method, path, code, body)
	}
}

func (m *migration) onRabbit(method, path string, body any) []byte {
	m.t.Helper()
	code, out := m.rabbit.api(method, path, body)
	m.must2xx("RabbitMQ", method, path, code, out)
	return out
}

func (m *migration) onRailmq(method, path string, body any) []byte {
	m.t.Helper()
	code, out := m.rail.api(method, path, body)
	m.must2xx("railmq", method, path, code, out)
	return out
}

// declareOnRabbit makes the application's topology on RabbitMQ, as it
// would be there before the migration.
func (m *migration) declareOnRabbit() {
	m.t.Helper()
	m.onRabbit("PUT", "/api/vhosts/"+migVhost, map[string]any{})
	m.onRabbit("PUT", "/api/users/"+migUser, map[string]any{"password": migPass, "tags": ""})
	for _, u := range []string{migUser, "guest"} {
		m.onRabbit("PUT", "/api/permissions/"+migVhost+"/"+u, map[string]string{"configure": ".*", "write": ".*", "read": ".*"})
	}
	m.onRabbit("PUT", "/api/exchanges/"+migVhost+"/"+migExchange, map[string]any{"type": "direct", "durable": true})
	for _, q := range []string{migWork, migAudit} {
		m.onRabbit("PUT", "/api/queues/"+migVhost+"/"+q, map[string]any{"durable": true, "arguments": map[string]any{"x-queue-type": "classic"}})
	}
	m.onRabbit("POST", "/api/bindings/"+migVhost+"/e/"+migExchange+"/q/"+migWork, map[string]any{"routing_key": "work"})
	m.onRabbit("POST", "/api/bindings/"+migVhost+"/e/"+migExchange+"/q/"+migAudit, map[string]any{"routing_key": "audit"})
	m.progress("RabbitMQ has vhost %s, user %s, exchange %s, queues %s and %s", migVhost, migUser, migExchange, migWork, migAudit)
}

// importDefinitions exports RabbitMQ's definitions and imports them into
// railmq, then checks that railmq has the application's objects and that
// its user logs in there.
func (m *migration) importDefinitions() {
	t := m.t
	t.Helper()
	m.exported = m.onRabbit("GET", "/api/definitions", nil)
	m.onRailmq("POST", "/api/definitions", m.exported)
	var defs struct {
		Users     []struct{ Name string }
		Queues    []struct{ Name, Vhost string }
		Exchanges []struct{ Name, Vhost string }
		Bindings  []struct {
			Source, Destination string
			RoutingKey          string `json:"routing_key"`
		}
	}
	must(t, json.Unmarshal(m.onRailmq("GET", "/api/definitions", nil), &defs))
	has := func(what string, names []string, want ...string) {
		t.Helper()
		for _, w := range want {
			found := false
			for _, n := range names {
				found = found || n == w
			}
			if !found {
				t.Fatalf("railmq's definitions after the import: no %s %q in %v", what, w, names)
			}
		}
	}
	var users, queues, exchanges, bindings []string
	for _, u := range defs.Users {
		users = append(users, u.Name)
	}
	for _, q := range defs.Queues {
		queues = append(queues, q.Vhost+"/"+q.Name)
	}
	for _, e := range defs.Exchanges {
		exchanges = append(exchanges, e.Vhost+"/"+e.Name)
	}
	for _, b := range defs.Bindings {
		bindings = append(bindings, b.Source+"->"+b.Destination+":"+b.RoutingKey)
	}
	has("user", users, migUser)
	has("queue", queues, migVhost+"/"+migWork, migVhost+"/"+migAudit)
	has("exchange", exchanges, migVhost+"/"+migExchange)
	has("binding", bindings, migExchange+"->"+migWork+":work", migExchange+"->"+migAudit+":audit")
	c, err := rmq.Dial(m.rail.url(migUser, migPass, migVhost))
	if err != nil {
		t.Fatalf("%s (imported with RabbitMQ's password hash) cannot log in to railmq: %v", migUser, err)
	}
	c.Close()
	m.progress("definitions exported from RabbitMQ (%d bytes) and imported into railmq: %s logs in there", len(m.exported), migUser)
}

// upstreamName is the federation upstream railmq gets.
const upstreamName = "rabbitmq-blue"

// federate gives railmq the upstream and the policy, and waits until
// both queues' links run.
func (m *migration) federate() {
	m.t.Helper()
	upstream := map[string]any{"value": map[string]any{
		"uri": m.rabbit.url(migUser, migPass, migVhost), "ack-mode": "on-confirm", "reconnect-delay": 1}}
	m.onRailmq("PUT", "/api/parameters/federation-upstream/"+migVhost+"/"+upstreamName, upstream)
	m.onRailmq("PUT", "/api/policies/"+migVhost+"/migrate", map[string]any{
		"pattern": `^mig\.`, "apply-to": "queues", "priority": 0, "definition": map[string]any{"federation-upstream-set": "all"}})
	m.waitFor(60*time.Second, func() bool { return m.linksRunning() == 2 }, "railmq's federation links of %s and %s running", migWork, migAudit)
	m.progress("railmq federates %s and %s from RabbitMQ (upstream %s, policy migrate)", migWork, migAudit, upstreamName)
}

// linksRunning is how many of railmq's federation links run.
func (m *migration) linksRunning() int {
	code, body := m.rail.api("GET", "/api/federation-links/"+migVhost, nil)
	if code != 200 {
		return -1
	}
	var links []struct{ Queue, Status, Upstream string }
	if json.Unmarshal(body, &links) != nil {
		return -1
	}
	n := 0
	for _, l := range links {
		if l.Status == "running" && l.Upstream == upstreamName {
			n++
		}
	}
	return n
}

// moveConsumer moves a consumer to railmq and waits until it gets
// messages there.
func (m *migration) moveConsumer(c *migClient) {
	m.t.Helper()
	before := c.got[onRailmq].Load()
	c.moveTo(onRailmq)
	m.waitFor(60*time.Second, func() bool { return c.got[onRailmq].Load() > before }, "%s gets messages on railmq", c.name)
	m.progress("%s moved to railmq and gets messages there", c.name)
}

// receiving waits until every consumer on broker b has had a delivery
// since the counts in since.
func (m *migration) receiving(b int32, since []int64, what string) {
	m.t.Helper()
	for i, c := range m.consumers {
		if c.target.Load() != b {
			continue
		}
		m.waitFor(90*time.Second, func() bool { return c.got[b].Load() > since[i] }, "%s gets messages on %s %s", c.name, brokerName[b], what)
	}
}

func (m *migration) counts(b int32) []int64 {
	var n []int64
	for _, c := range m.consumers {
		n = append(n, c.got[b].Load())
	}
	return n
}

func (m *migration) killRailmq() {
	m.t.Helper()
	m.progress("kill -9 railmq (pid %d)", m.rail.cmd.Process.Pid)
	from := time.Now()
	m.rail.kill9()
	m.rail.start()
	back := time.Now()
	m.load.down(onRailmq, from, back)
	m.progress("railmq restarted on its data dir after %.1fs", back.Sub(from).Seconds())
	seen := m.counts(onRailmq)
	m.waitFor(60*time.Second, func() bool { return m.linksRunning() == 2 }, "the federation links run again after railmq's restart")
	m.receiving(onRailmq, seen, "after railmq's restart")
	m.progress("railmq's consumers and federation links are back")
}

func (m *migration) killRabbit() {
	m.t.Helper()
	m.progress("kill -9 RabbitMQ (beam.smp pid %d)", m.rabbit.pid())
	from := time.Now()
	m.rabbit.kill9()
	m.rabbit.start()
	back := time.Now()
	m.load.down(onRabbit, from, back)
	m.progress("RabbitMQ restarted on its data after %.1fs", back.Sub(from).Seconds())
	seen := [2][]int64{m.counts(onRabbit), m.counts(onRailmq)}
	confirmed := m.load.confirmedOn[onRabbit].Load()
	m.waitFor(60*time.Second, func() bool { return m.load.confirmedOn[onRabbit].Load() > confirmed+50 }, "RabbitMQ confirms again after its restart")
	m.waitFor(60*time.Second, func() bool { return m.linksRunning() == 2 }, "the federation links run again after RabbitMQ's restart")
	m.receiving(onRabbit, seen[0], "after RabbitMQ's restart")
	m.receiving(onRailmq, seen[1], "after RabbitMQ's restart")
	m.progress("the producers, consumers and federation links are back on RabbitMQ")
}

func (m *migration) rabbitDepth(q string) int {
	return readyIn(m.rabbit.url(migUser, migPass, migVhost), q)
}

// drainRabbit waits while federation drains RabbitMQ's work queue (the
// consumers, all on railmq, take more than the producers send), until it
// is empty or has stopped going down for 15 s; then a dynamic shovel on
// railmq moves what is left of each queue (the audit queue has no
// consumer, so federation never pulls from it).
func (m *migration) drainRabbit() {
	t := m.t
	t.Helper()
	best, since := m.rabbitDepth(migWork), time.Now()
	m.progress("RabbitMQ's %s has %d messages; federation drains it", migWork, best)
	for best != 0 && time.Since(since) < 15*time.Second {
		time.Sleep(500 * time.Millisecond)
		if d := m.rabbitDepth(migWork); d >= 0 && d < best {
			best, since = d, time.Now()
		}
	}
	audit := m.rabbitDepth(migAudit)
	if best < 0 || audit < 0 {
		t.Fatalf("RabbitMQ's queues: %s has %d messages, %s %d", migWork, best, migAudit, audit)
	}
	m.shovelled = best + audit
	m.progress("federation drained RabbitMQ's %s to %d; %s has %d", migWork, best, migAudit, audit)
	for _, q := range []string{migWork, migAudit} {
		name := "drain-" + q
		m.onRailmq("PUT", "/api/parameters/shovel/"+migVhost+"/"+name, map[string]any{"value": map[string]any{
			"src-protocol": "amqp091", "src-uri": m.rabbit.url(migUser, migPass, migVhost), "src-queue": q,
			"src-delete-after": "queue-length",
			"dest-protocol":    "amqp091", "dest-uri": "amqp:///" + migVhost, "dest-queue": q,
			"dest-add-forward-headers": true, "ack-mode": "on-confirm"}})
	}
	m.waitFor(120*time.Second, func() bool {
		code, _ := m.rail.api("GET", "/api/parameters/shovel/"+migVhost+"/drain-"+migWork, nil)
		code2, _ := m.rail.api("GET", "/api/parameters/shovel/"+migVhost+"/drain-"+migAudit, nil)
		return code == 404 && code2 == 404
	}, "the shovels finished (src-delete-after queue-length: each deletes itself)")
	if w, a := m.rabbitDepth(migWork), m.rabbitDepth(migAudit); w != 0 || a != 0 {
		t.Fatalf("after the shovels RabbitMQ's %s has %d messages, %s %d: want 0", migWork, w, migAudit, a)
	}
	m.progress("the shovels moved what was left: RabbitMQ's queues are empty")
}

// finish stops the producers, lets the consumers empty railmq's work
// queue, consumes its audit queue, removes the federation and checks the
// history.
func (m *migration) finish() {
	t := m.t
	t.Helper()
	loadEnd := time.Now()
	for _, p := range m.producers {
		p.end()
	}
	m.progress("producers stopped; the consumers empty railmq's %s", migWork)
	railURL := m.rail.url(migUser, migPass, migVhost)
	m.waitFor(120*time.Second, func() bool { return readyIn(railURL, migWork) == 0 && m.unacked(migWork) == 0 },
		"railmq's %s empty", migWork)
	audit := newMigClient("audit")
	audit.target.Store(onRailmq)
	m.load.run(audit, m.load.consumer(migAudit, 0))
	m.waitFor(120*time.Second, func() bool { return readyIn(railURL, migAudit) == 0 && m.unacked(migAudit) == 0 },
		"railmq's %s consumed", migAudit)
	m.progress("railmq's queues are empty; cleanup: the policy and the upstream removed")
	m.onRailmq("DELETE", "/api/policies/"+migVhost+"/migrate", nil)
	m.onRailmq("DELETE", "/api/parameters/federation-upstream/"+migVhost+"/"+upstreamName, nil)
	m.waitFor(30*time.Second, func() bool { return m.linksRunning() == 0 && m.links() == 0 }, "no federation link once the policy and the upstream are gone")
	m.stopLoad()
	m.verdict(loadEnd)
}

// unacked is railmq's count of queue q's delivered, unacked messages
// (its management API); -1 if it could not say.
func (m *migration) unacked(q string) int {
	code, body := m.rail.api("GET", "/api/queues/"+migVhost+"/"+q, nil)
	var v struct {
		Unacked *int `json:"messages_unacknowledged"`
	}
	if code != 200 || json.Unmarshal(body, &v) != nil || v.Unacked == nil {
		return -1
	}
	return *v.Unacked
}

// links is how many federation links railmq lists, whatever their state.
func (m *migration) links() int {
	code, body := m.rail.api("GET", "/api/federation-links/"+migVhost, nil)
	var links []json.RawMessage
	if code != 200 || json.Unmarshal(body, &links) != nil {
		return -1
	}
	return len(links)
}

// readyIn is how many messages are ready in queue q of the broker at
// url (queue.declare passive: exact, where RabbitMQ's management figures
// lag by its statistics interval); -1 if it could not say.
func readyIn(url, q string) int {
	c, err := rmq.DialConfig(url, rmq.Config{Dial: rmq.DefaultDial(2 * time.Second)})
	if err != nil {
		return -1
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return -1
	}
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		return -1
	}
	return st.Messages
}

// verdict checks the history and reports the run's figures.
func (m *migration) verdict(loadEnd time.Time) {
	t := m.t
	l := m.load
	v := l.check()
	var worst time.Duration
	var idle []string
	for _, c := range m.consumers {
		gap, at := l.longestIdle(c, loadEnd, true)
		idle = append(idle, fmt.Sprintf("%s %v (from %s; %d on rabbitmq, %d on railmq)", c.name, gap.Round(time.Millisecond),
			l.since(at), c.got[onRabbit].Load(), c.got[onRailmq].Load()))
		worst = max(worst, gap)
		if gap > migMaxIdle {
			t.Errorf("%s went %v without a delivery from %s while the producers ran (broker down time left out), over %v",
				c.name, gap.Round(time.Millisecond), l.since(at), migMaxIdle)
		}
		if c.got[onRabbit].Load() == 0 || c.got[onRailmq].Load() == 0 {
			t.Errorf("%s: %d deliveries on rabbitmq, %d on railmq: want some on each", c.name, c.got[onRabbit].Load(), c.got[onRailmq].Load())
		}
	}
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	redelivered := 0
	for _, ds := range l.dels {
		for _, d := range ds {
			if d.redelivered {
				redelivered++
			}
		}
	}
	hops := map[string]int{}
	for _, ds := range l.dels {
		for _, d := range ds {
			hops[d.hop]++
		}
	}
	var raw time.Duration
	for _, c := range m.consumers {
		gap, _ := l.longestIdle(c, loadEnd, false)
		raw = max(raw, gap)
	}
	deliveries := l.deliveredOn[onRabbit].Load() + l.deliveredOn[onRailmq].Load()
	t.Logf("migrate: longest consumer idle gap (broker down time left out): %s", strings.Join(idle, "; "))
	t.Logf("migrate: the events: %s", strings.Join(l.h.events, "; "))
	t.Logf("migrate: %.1fs; %d published (%d confirmed by rabbitmq, %d by railmq; %d refused, %d returned), "+
		"%d ids delivered in %d deliveries (%d on rabbitmq, %d on railmq), %d ids more than once; "+
		"%d deliveries flagged redelivered; repeats: %d flagged, %d flagged at the upstream (x-received-from), "+
		"%d unflagged explained by RabbitMQ's kill -9, %d by railmq's (the copy it kept); "+
		"%d deliveries came through the federation link, %d through the shovels (%d messages left on RabbitMQ for them); "+
		"kill -9: railmq %d, RabbitMQ %d; longest consumer idle %v (%v counting the time a broker was down)",
		time.Since(m.began).Seconds(), len(l.h.published), l.confirmedOn[onRabbit].Load(), l.confirmedOn[onRailmq].Load(),
		len(l.h.refused), len(l.h.returned), len(l.h.delivered), deliveries, l.deliveredOn[onRabbit].Load(), l.deliveredOn[onRailmq].Load(),
		v.duplicated, redelivered, v.flagged, v.hopFlag, v.byRabbitKill, v.keptByRailmq, hops["federation"], hops["shovel"], m.shovelled,
		m.rail.killed9, m.rabbit.killed9, worst.Round(time.Millisecond), raw.Round(time.Millisecond))
	if hops["federation"] == 0 {
		t.Errorf("no delivery came through the federation link")
	}
	if hops["shovel"] < m.shovelled {
		t.Errorf("%d deliveries came through the shovels (x-shovelled), want at least the %d messages left on RabbitMQ", hops["shovel"], m.shovelled)
	}
	if len(v.lost) > 0 {
		t.Errorf("%d confirmed messages never delivered, ids %v", len(v.lost), someIDs(v.lost))
	}
	if len(v.unexplained) > 0 {
		t.Errorf("%d repeat deliveries neither flagged nor explained by a kill -9:\n%s", len(v.unexplained), strings.Join(v.why, "\n"))
	}
	if len(l.h.unknown) > 0 || len(l.h.corrupted) > 0 {
		t.Errorf("deliveries of unpublished ids %v, corrupted bodies %d", someIDs(l.h.unknown), len(l.h.corrupted))
	}
	if len(l.h.confirmed) < 5000 {
		t.Errorf("only %d confirmed publishes: the load did not run", len(l.h.confirmed))
	}
}
