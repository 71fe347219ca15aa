package conformance

import (
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Policies reach live queues at once, as RabbitMQ applies them: a length
// limit trims the backlog now, dead-lettering what it drops to the DLX
// the same policy sets; between a queue's own limit and a policy's the
// lower wins (RabbitMQ 3.10, measured); the queue shows the policy; an
// operator policy caps it lower; clearing them reverts. Also run against
// RabbitMQ.
func TestPoliciesApplyToLiveQueues(t *testing.T) { forEachType(t, testPoliciesApplyToLiveQueues) }

func testPoliciesApplyToLiveQueues(t *testing.T, qt queueKind) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, _ := c.Channel()
	for _, q := range []struct {
		name string
		args rmq.Table
	}{{"pol-q", qt.declareArgs(nil)}, {"pol-own", qt.declareArgs(rmq.Table{"x-max-length": int32(20)})}, {"pol-dlq", nil}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			t.Fatal(err)
		}
		name := q.name
		t.Cleanup(func() { a.call("DELETE", "/api/queues/%2F/"+name, "guest", "guest", nil, nil) })
	}
	t.Cleanup(func() {
		a.call("DELETE", "/api/policies/%2F/pol-p", "guest", "guest", nil, nil)
		a.call("DELETE", "/api/operator-policies/%2F/pol-op", "guest", "guest", nil, nil)
	})
	for i := range 20 {
		publishPersistent(t, ch, "", "pol-q", fmt.Sprintf("m%02d", i))
		publishPersistent(t, ch, "", "pol-own", fmt.Sprintf("o%02d", i))
	}
	count := func(q string) int {
		t.Helper()
		var out struct{ Messages int }
		a.call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &out)
		n, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return n.Messages
	}
	waitCounts := func(want map[string]int, what string) {
		t.Helper()
		got := map[string]int{}
		testutil.Eventually(t, 10*time.Second, func() bool {
			same := true
			for q, n := range want {
				got[q] = count(q)
				same = same && got[q] == n
			}
			return same
		}, "%s: counts %v, want %v", what, got, want)
	}
	a.admin("PUT", "/api/policies/%2F/pol-p", map[string]any{"pattern": "^pol-(q|own)$", "apply-to": "queues", "priority": 1,
		"definition": map[string]any{"max-length": 10, "dead-letter-exchange": "", "dead-letter-routing-key": "pol-dlq"}}, 201)
	// Both are trimmed to 10 at once (pol-own's x-max-length 20 is the
	// higher), the oldest dead-lettered through the policy's DLX.
	waitCounts(map[string]int{"pol-q": 10, "pol-own": 10, "pol-dlq": 20}, "the policy applied")
	// The oldest ten of each went, in order within each queue from a
	// classic queue. From a quorum queue RabbitMQ 3.10.8 dead-letters
	// them in any order ("o08" after "o09"): each dead letter is its own
	// publish from the queue's leader.
	var last = map[byte]string{}
	seen := map[string]bool{}
	for range 20 {
		d, ok, err := ch.Get("pol-dlq", true)
		if err != nil || !ok {
			t.Fatalf("dead-lettered: %v %v", ok, err)
		}
		body := string(d.Body)
		if body[1:] >= "10" || seen[body] || (!qt.quorum() && body <= last[body[0]]) {
			t.Fatalf("dead-lettered %q after %q", body, last[body[0]])
		}
		last[body[0]], seen[body] = body, true
	}
	var q struct {
		Policy    string         `json:"policy"`
		Effective map[string]any `json:"effective_policy_definition"`
	}
	testutil.Eventually(t, 10*time.Second, func() bool { // RabbitMQ shows it once its stats catch up
		a.call("GET", "/api/queues/%2F/pol-q", "guest", "guest", nil, &q)
		return q.Policy == "pol-p" && q.Effective["max-length"] == float64(10)
	}, "pol-q shows policy %q, effective %v", q.Policy, q.Effective)
	a.admin("PUT", "/api/operator-policies/%2F/pol-op", map[string]any{"pattern": "^pol-(q|own)$", "apply-to": "queues",
		"definition": map[string]any{"max-length": 5}}, 201)
	waitCounts(map[string]int{"pol-q": 5, "pol-own": 5, "pol-dlq": 5 + 5}, "the operator policy's cap")
	a.admin("DELETE", "/api/operator-policies/%2F/pol-op", nil, 204)
	a.admin("DELETE", "/api/policies/%2F/pol-p", nil, 204)
	for i := range 10 {
		publishPersistent(t, ch, "", "pol-q", fmt.Sprintf("n%02d", i))
	}
	waitCounts(map[string]int{"pol-q": 15}, "no limit once the policies are cleared")
}

// A message-ttl policy reaches the messages published after it, as in
// RabbitMQ 3.10, which stamps each message with its expiry when it is
// enqueued: the five queued before the policy stay; the three after it
// expire (once they reach the head, as RabbitMQ expires messages).
func TestTTLPolicyReachesLaterMessages(t *testing.T) {
	forEachType(t, testTTLPolicyReachesLaterMessages)
}

func testTTLPolicyReachesLaterMessages(t *testing.T, qt queueKind) {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, _ := c.Channel()
	if _, err := ch.QueueDeclare("ttlpol-q", true, false, false, false, qt.declareArgs(nil)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.call("DELETE", "/api/queues/%2F/ttlpol-q", "guest", "guest", nil, nil)
		a.call("DELETE", "/api/policies/%2F/ttlpol", "guest", "guest", nil, nil)
	})
	for i := range 5 {
		publishPersistent(t, ch, "", "ttlpol-q", fmt.Sprintf("old%d", i))
	}
	a.admin("PUT", "/api/policies/%2F/ttlpol", map[string]any{"pattern": "^ttlpol-q$", "apply-to": "queues",
		"definition": map[string]any{"message-ttl": 100}}, 201)
	testutil.Eventually(t, 10*time.Second, func() bool { // RabbitMQ applies policies asynchronously
		var q struct {
			Policy string `json:"policy"`
		}
		a.call("GET", "/api/queues/%2F/ttlpol-q", "guest", "guest", nil, &q)
		return q.Policy == "ttlpol"
	}, "the policy on the queue")
	for i := range 3 {
		publishPersistent(t, ch, "", "ttlpol-q", fmt.Sprintf("new%d", i))
	}
	time.Sleep(300 * time.Millisecond) // time passing: the new ones' TTL (100 ms) runs out
	for i := range 5 {
		d, ok, err := ch.Get("ttlpol-q", true)
		if err != nil || !ok || string(d.Body) != fmt.Sprintf("old%d", i) {
			t.Fatalf("get %d: %v %v %q, want old%d (queued before the policy: no TTL)", i, ok, err, d.Body, i)
		}
	}
	if d, ok, err := ch.Get("ttlpol-q", true); err != nil || ok {
		t.Fatalf("a message published under the TTL policy outlived it: %q %v", d.Body, err)
	}
}

// A policy's consumer-timeout reaches a live queue's consumers at once:
// one holding a delivery past it gets its channel closed (406, as for
// x-consumer-timeout). RabbitMQ 3.10.8 does not know this key (3.12 does):
// in-process only.
func TestConsumerTimeoutPolicyIsLive(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{TimeoutCheckInterval: 50 * time.Millisecond})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, _ := c.Channel()
	if _, err := ch.QueueDeclare("ctpol-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	a.admin("PUT", "/api/policies/%2F/ctpol", map[string]any{"pattern": "^ctpol-q$", "apply-to": "queues",
		"definition": map[string]any{"consumer-timeout": 200}}, 201)
	cch, _ := c.Channel()
	closed := cch.NotifyClose(make(chan *rmq.Error, 1))
	ds, err := cch.Consume("ctpol-q", "", false, false, false, false, nil)
	must(t, err)
	must(t, ch.Publish("", "ctpol-q", false, false, rmq.Publishing{Body: []byte("held")}))
	<-ds // held, never acked
	select {
	case e := <-closed:
		if e == nil || e.Code != 406 {
			t.Fatalf("closed with %v, want 406", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the policy's consumer timeout did not close the channel")
	}
}
