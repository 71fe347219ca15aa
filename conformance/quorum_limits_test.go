package conformance

import (
	"fmt"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Quorum queues' delivery limit, consumer timeout and delayed retry, as
// RabbitMQ 4.3 has them (issue [17]), on a standalone node. RabbitMQ
// 3.10.8 differs in each (asked on this machine, quoted per test), so
// these run in process only.

// qqLimitsEnv starts a broker whose sweeper checks consumer timeouts
// often, with a dead-letter exchange qql-dlx routing to the classic queue
// qql-dead.
func qqLimitsEnv(t *testing.T) *env {
	t.Helper()
	testutil.InProcess(t)
	e := setup(t, broker.Options{TimeoutCheckInterval: 50 * time.Millisecond})
	must(t, e.ch.ExchangeDeclare("qql-dlx", "fanout", false, false, false, false, nil))
	e.queue("qql-dead", nil)
	must(t, e.ch.QueueBind("qql-dead", "", "qql-dlx", false, nil))
	return e
}

// declareQQ declares a quorum queue with args (and the dead-letter
// exchange) and publishes body into it.
func (e *env) declareQQ(name string, args rmq.Table, body string) {
	e.t.Helper()
	a := rmq.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "qql-dlx"}
	for k, v := range args {
		a[k] = v
	}
	_, err := e.ch.QueueDeclare(name, true, false, false, false, a)
	must(e.t, err)
	e.t.Cleanup(func() {
		if c, err := rmq.Dial(e.b.URL); err == nil {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(name, false, false, false)
			}
			c.Close()
		}
	})
	if body != "" {
		e.publishConfirmed("", name, rmq.Publishing{Body: []byte(body)})
	}
}

// header reads an integer header (absent: -1).
func header(d rmq.Delivery, k string) int64 {
	v, ok := d.Headers[k]
	if !ok {
		return -1
	}
	n, _ := amqp.Int(v)
	return n
}

// deadReason waits for the dead-lettered copy in qql-dead and returns
// its x-death reason.
func (e *env) deadReason() (string, rmq.Delivery) {
	e.t.Helper()
	d := e.get(e.ch, "qql-dead", true)
	deaths, _ := d.Headers["x-death"].([]any)
	if len(deaths) == 0 {
		e.t.Fatalf("dead-lettered %q without x-death: %v", d.Body, d.Headers)
	}
	reason, _ := deaths[0].(rmq.Table)["reason"].(string)
	return reason, d
}

// TestQuorumDeliveryLimitDefault: a quorum queue declared without
// x-delivery-limit has RabbitMQ 4's default of 20
// (rabbit_quorum_queue.erl v4.3.5 get_delivery_limit,
// ?DEFAULT_DELIVERY_LIMIT): a message rejected with requeue is delivered
// 21 times, the n-th redelivery carrying x-delivery-count n, then
// dead-lettered with reason delivery_limit. (RabbitMQ 3.10.8 has no
// default: "probe-default round 2: redelivered=true
// x-delivery-count:2", never dropped.)
func TestQuorumDeliveryLimitDefault(t *testing.T) {
	e := qqLimitsEnv(t)
	e.declareQQ("qql-default", nil, "m")
	for i := 0; i <= 20; i++ {
		d := e.get(e.ch, "qql-default", false)
		want := int64(i)
		if i == 0 {
			want = -1 // the first delivery carries none
		}
		if got := header(d, "x-delivery-count"); got != want || d.Redelivered != (i > 0) {
			t.Fatalf("delivery %d: x-delivery-count %d redelivered %v, want %d %v", i+1, got, d.Redelivered, want, i > 0)
		}
		must(t, d.Reject(true))
	}
	if reason, _ := e.deadReason(); reason != "delivery_limit" {
		t.Fatalf("dead-lettered for %q, want delivery_limit", reason)
	}
	e.waitCount("qql-default", 0)
}

// TestQuorumNackCountsOnlyAcquired: RabbitMQ 4.3's counting
// (rabbit_channel.erl v4.3.5: basic.nack with requeue is the settle op
// requeue, basic.reject with requeue {modify, DeliveryFailed = true};
// rabbit_fifo.erl v4.3.5 incr_msg_headers, return_one checks the
// delivery count): a nack raises only the acquired count
// (x-acquired-count), so with x-delivery-limit 1 a message nacked ten
// times is still delivered, without x-delivery-count; then a reject
// counts one failed delivery, and the second goes past the limit.
// RabbitMQ 3.10.8 counts nacks too: with x-delivery-limit 2, "probe-nack
// round 3: gone" after three nacked deliveries.
func TestQuorumNackCountsOnlyAcquired(t *testing.T) {
	e := qqLimitsEnv(t)
	e.declareQQ("qql-nack", rmq.Table{"x-delivery-limit": int32(1)}, "m")
	must(t, e.get(e.ch, "qql-nack", false).Nack(false, true))
	var d rmq.Delivery
	for i := 1; i <= 10; i++ {
		d = e.get(e.ch, "qql-nack", false)
		if !d.Redelivered || header(d, "x-delivery-count") != -1 || header(d, "x-acquired-count") != int64(i) {
			t.Fatalf("after %d nacks: redelivered %v headers %v, want x-acquired-count %d and no x-delivery-count", i, d.Redelivered, d.Headers, i)
		}
		if i < 10 {
			must(t, d.Nack(false, true))
		}
	}
	must(t, d.Reject(true))
	d = e.get(e.ch, "qql-nack", false)
	if header(d, "x-delivery-count") != 1 || header(d, "x-acquired-count") != 11 {
		t.Fatalf("after a reject: %v, want x-delivery-count 1, x-acquired-count 11", d.Headers)
	}
	must(t, d.Reject(true))
	if reason, _ := e.deadReason(); reason != "delivery_limit" {
		t.Fatalf("dead-lettered for %q, want delivery_limit", reason)
	}
}

// TestQuorumDeliveryLimitOff: x-delivery-limit -1 takes the limit off
// (rabbit_fifo.erl v4.3.5 init: a negative limit is undefined). RabbitMQ
// 3.10.8 takes -1 literally: "probe-neg round 1: gone" after one reject.
func TestQuorumDeliveryLimitOff(t *testing.T) {
	e := qqLimitsEnv(t)
	e.declareQQ("qql-off", rmq.Table{"x-delivery-limit": int32(-1)}, "m")
	for i := 0; i < 25; i++ {
		must(t, e.get(e.ch, "qql-off", false).Reject(true))
	}
	d := e.get(e.ch, "qql-off", false)
	if header(d, "x-delivery-count") != 25 {
		t.Fatalf("after 25 rejects: %v", d.Headers)
	}
}

// TestQuorumConsumerGoneCounts: a consumer whose channel closes with the
// message unacked fails its delivery (rabbit_fifo.erl v4.3.5 handle_down,
// cancel_consumer with Reason down, return_all with DeliveryFailed
// true): with x-delivery-limit 1, the first close makes it x-delivery-count
// 1, the second dead-letters it.
func TestQuorumConsumerGoneCounts(t *testing.T) {
	e := qqLimitsEnv(t)
	e.declareQQ("qql-gone", rmq.Table{"x-delivery-limit": int32(1)}, "m")
	for i := 0; i < 2; i++ {
		ch := e.channel(e.conn)
		ds, err := ch.Consume("qql-gone", "", false, false, false, false, nil)
		must(t, err)
		d := recv(t, ds)
		if want := int64(i); (i == 0 && header(d, "x-delivery-count") != -1) || (i > 0 && header(d, "x-delivery-count") != want) {
			t.Fatalf("delivery %d: %v", i+1, d.Headers)
		}
		must(t, ch.Close())
	}
	if reason, _ := e.deadReason(); reason != "delivery_limit" {
		t.Fatalf("dead-lettered for %q, want delivery_limit", reason)
	}
}

// TestQuorumDeliveryLimitPolicyLive: a delivery-limit policy reaches a
// live quorum queue (RabbitMQ 4.3.0 release notes: "Quorum queue
// delivery limit can now be changed via policy without queue
// redeclaration", #16035; rabbit_quorum_queue.erl v4.3.5 policy_changed);
// the lower of the argument and the policy wins, a negative one giving way
// to the other (resolve_delivery_limit). Lowered to 2, a message already
// rejected 3 times goes at its next reject; a policy of -1 takes the
// default off a queue without the argument; an operator policy caps it.
// RabbitMQ 3.10.8 leaves a live queue's limit as declared: with
// x-delivery-limit 10 and a policy delivery-limit 2 set on the live queue,
// 6 rejects were all redelivered ("round 5: x-delivery-count:5").
func TestQuorumDeliveryLimitPolicyLive(t *testing.T) {
	e := qqLimitsEnv(t)
	a := newAPI(t, e.b)
	e.declareQQ("qql-pol", rmq.Table{"x-delivery-limit": int32(10)}, "m")
	for i := 0; i < 3; i++ {
		must(t, e.get(e.ch, "qql-pol", false).Reject(true))
	}
	a.admin("PUT", "/api/policies/%2F/qql-p", map[string]any{"pattern": "^qql-pol$", "apply-to": "queues",
		"definition": map[string]any{"delivery-limit": 2}}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/policies/%2F/qql-p", "guest", "guest", nil, nil) })
	testutil.Eventually(t, 10*time.Second, func() bool {
		var q struct {
			Policy string `json:"policy"`
		}
		a.call("GET", "/api/queues/%2F/qql-pol", "guest", "guest", nil, &q)
		return q.Policy == "qql-p"
	}, "the policy on the queue")
	must(t, e.get(e.ch, "qql-pol", false).Reject(true))
	if reason, d := e.deadReason(); reason != "delivery_limit" || string(d.Body) != "m" {
		t.Fatalf("dead-lettered %q for %q, want m for delivery_limit", d.Body, reason)
	}

	// -1 by policy: no limit on a queue that has the default.
	a.admin("PUT", "/api/policies/%2F/qql-off", map[string]any{"pattern": "^qql-nolim$", "apply-to": "queues",
		"definition": map[string]any{"delivery-limit": -1}}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/policies/%2F/qql-off", "guest", "guest", nil, nil) })
	e.declareQQ("qql-nolim", nil, "n")
	for i := 0; i < 23; i++ {
		must(t, e.get(e.ch, "qql-nolim", false).Reject(true))
	}
	if d := e.get(e.ch, "qql-nolim", false); header(d, "x-delivery-count") != 23 {
		t.Fatalf("policy -1: after 23 rejects %v", d.Headers)
	}

	// An operator policy caps it: 1 on a queue whose own limit is 10.
	a.admin("PUT", "/api/operator-policies/%2F/qql-op", map[string]any{"pattern": "^qql-capped$", "apply-to": "queues",
		"definition": map[string]any{"delivery-limit": 1}}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/operator-policies/%2F/qql-op", "guest", "guest", nil, nil) })
	e.declareQQ("qql-capped", rmq.Table{"x-delivery-limit": int32(10)}, "o")
	must(t, e.get(e.ch, "qql-capped", false).Reject(true))
	must(t, e.get(e.ch, "qql-capped", false).Reject(true))
	if reason, d := e.deadReason(); reason != "delivery_limit" || string(d.Body) != "o" {
		t.Fatalf("operator policy: dead-lettered %q for %q, want o for delivery_limit", d.Body, reason)
	}
}

// TestQuorumConsumerTimeoutCancels: a quorum queue's consumer holding a
// delivery past its timeout, on a client that takes basic.cancel
// (amqp091-go advertises consumer_cancel_notify), is cancelled: basic.cancel,
// the channel stays open, the message is back in the queue, returned
// without failing (x-acquired-count 1, no x-delivery-count), and a late
// ack of it changes nothing (rabbit_fifo.erl v4.3.5
// evaluate_consumer_timeout returns with DeliveryFailed false;
// rabbit_channel.erl v4.3.5 handle_queue_actions {released, ..., timeout}
// sends basic.cancel when server_consumer_cancel_supported). The
// consumer's x-consumer-timeout (300 ms) wins over the queue's (1 h)
// (rabbit_queue_type.erl v4.3.5 consume).
func TestQuorumConsumerTimeoutCancels(t *testing.T) {
	e := qqLimitsEnv(t)
	e.declareQQ("qql-ct", rmq.Table{"x-consumer-timeout": int32(3_600_000)}, "m")
	ch := e.channel(e.conn)
	closed := ch.NotifyClose(make(chan *rmq.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 1))
	ds, err := ch.Consume("qql-ct", "slow", false, false, false, false, rmq.Table{"x-consumer-timeout": int32(300)})
	must(t, err)
	d := recv(t, ds)
	select {
	case tag := <-cancelled:
		if tag != "slow" {
			t.Fatalf("basic.cancel for %q", tag)
		}
	case err := <-closed:
		t.Fatalf("channel closed: %v, want basic.cancel", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no basic.cancel within 10s of a 300 ms consumer timeout")
	}
	again := e.get(e.ch, "qql-ct", false)
	if !again.Redelivered || header(again, "x-acquired-count") != 1 || header(again, "x-delivery-count") != -1 {
		t.Fatalf("the timed-out message: redelivered %v headers %v, want x-acquired-count 1, no x-delivery-count", again.Redelivered, again.Headers)
	}
	must(t, d.Ack(false)) // late: the queue has it back; the channel stays open
	if _, err := ch.QueueDeclarePassive("qql-ct", true, false, false, false, nil); err != nil {
		t.Fatalf("the channel after a late ack: %v", err)
	}
	must(t, again.Ack(false))
	e.waitCount("qql-ct", 0)
}

// TestQuorumConsumerTimeoutClosesWithoutCancelNotify: a client that does
// not advertise consumer_cancel_notify gets the channel close of RabbitMQ
// 3.x (rabbit_channel.erl v4.3.5 handle_queue_actions falls back to
// handle_consumer_timed_out), the 406 text as 3.10.8 words it
// (RABBITMQ-COMPAT.md); the message is back, not counted as a failed
// delivery. The timeout here is a policy's consumer-timeout (300 ms),
// lower than the queue's argument (1 h): the lower wins
// (rabbit_queue_type.erl v4.3.5 get_consumer_timeout, args_policy_lookup
// with min).
func TestQuorumConsumerTimeoutClosesWithoutCancelNotify(t *testing.T) {
	e := qqLimitsEnv(t)
	a := newAPI(t, e.b)
	a.admin("PUT", "/api/policies/%2F/qql-ctp", map[string]any{"pattern": "^qql-ctraw$", "apply-to": "queues",
		"definition": map[string]any{"consumer-timeout": 300}}, 201)
	t.Cleanup(func() { a.call("DELETE", "/api/policies/%2F/qql-ctp", "guest", "guest", nil, nil) })
	e.declareQQ("qql-ctraw", rmq.Table{"x-consumer-timeout": int32(3_600_000)}, "m")
	r := testutil.DialRaw(t, e.b.Addr)
	r.Handshake(amqp.Table{}, 0, true)
	r.Send(1, &amqp.BasicConsume{Queue: "qql-ctraw", ConsumerTag: "raw"})
	r.Expect((*amqp.BasicConsumeOk)(nil))
	r.Expect((*amqp.BasicDeliver)(nil))
	var cc *amqp.ChannelClose
	deadline := time.Now().Add(15 * time.Second)
	for cc == nil && time.Now().Before(deadline) {
		_, m, err := r.Next()
		if err != nil {
			continue // the read deadline: no frame yet
		}
		switch m := m.(type) {
		case *amqp.BasicCancel:
			t.Fatal("basic.cancel sent to a client without consumer_cancel_notify")
		case *amqp.ChannelClose:
			cc = m
		}
	}
	want := "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 300 ms. " +
		"This timeout value can be configured, see consumers doc guide to learn more"
	if cc == nil || cc.ReplyCode != 406 || cc.ReplyText != want {
		t.Fatalf("got %+v, want channel.close 406 %q", cc, want)
	}
	d := e.get(e.ch, "qql-ctraw", false)
	if header(d, "x-delivery-count") != -1 || header(d, "x-acquired-count") != 1 {
		t.Fatalf("the timed-out message: %v, want x-acquired-count 1, no x-delivery-count", d.Headers)
	}
}

// TestDelayedRetryBothQueueTypes: RabbitMQ 4.3's x-delayed-retry-type,
// -min and -max (rabbit_quorum_queue.erl v4.3.5 get_delayed_retry_config;
// rabbit_fifo.erl v4.3.5 should_delay0, calculate_ready_at: the n-th
// failed delivery waits min(min * n, max) ms) work on quorum and classic
// queues alike, through one backoff computation (queue.Retry): with type
// failed, a reject is held (not there at once, back later, redelivered),
// a nack is not (type failed holds failed deliveries only); while held,
// the management API counts it in messages_held. RabbitMQ
// 3.10.8 has no delayed retry; it accepts the arguments on a quorum
// queue and ignores them ("probe-qq-retry ...: <nil>").
func TestDelayedRetryBothQueueTypes(t *testing.T) {
	e := qqLimitsEnv(t)
	a := newAPI(t, e.b)
	for _, typ := range []string{"quorum", "classic"} {
		t.Run(typ, func(t *testing.T) {
			name := "qql-retry-" + typ
			args := rmq.Table{"x-queue-type": typ, "x-delayed-retry-type": "failed",
				"x-delayed-retry-min": int32(5000), "x-delayed-retry-max": int32(10000)}
			_, err := e.ch.QueueDeclare(name, true, false, false, false, args)
			must(t, err)
			defer e.ch.QueueDelete(name, false, false, false)
			e.publishConfirmed("", name, rmq.Publishing{Body: []byte("m")})
			must(t, e.get(e.ch, name, false).Nack(false, true))
			d := e.get(e.ch, name, false) // a nack is not held
			at := time.Now()
			must(t, d.Reject(true))
			if d, ok, err := e.ch.Get(name, false); err != nil || ok {
				t.Fatalf("%q there at once after a reject (ok=%v err=%v), want held 5 s", d.Body, ok, err)
			}
			var st struct {
				Held int `json:"messages_held"`
			}
			a.call("GET", "/api/queues/%2F/"+name, "guest", "guest", nil, &st)
			if st.Held != 1 && time.Since(at) < 5*time.Second {
				t.Fatalf("messages_held %d while held, want 1", st.Held)
			}
			var back rmq.Delivery
			testutil.Eventually(t, 20*time.Second, func() bool {
				var ok bool
				back, ok, err = e.ch.Get(name, false)
				must(t, err)
				return ok
			}, "the held message back")
			if w := time.Since(at); w < 5*time.Second || !back.Redelivered {
				t.Fatalf("back after %v redelivered %v, want after 5 s, redelivered", w, back.Redelivered)
			}
			must(t, back.Ack(false))
		})
	}
}

// TestDelayedRetryPolicyChecks: the delayed-retry policy keys are
// checked as RabbitMQ 4.3 checks them, with its texts
// (rabbit_quorum_queue.erl v4.3.5 validate_policy0,
// validate_delayed_retry_constraints); a delivery-limit that is not an
// integer is refused in rabbit_policies' words.
func TestDelayedRetryPolicyChecks(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	for _, tc := range []struct {
		def  map[string]any
		want string
	}{
		{map[string]any{"delayed-retry-type": "bogus", "delayed-retry-min": 10}, `<<"bogus">> is not a valid delayed retry type. Must be one of: all, failed, returned, disabled`},
		{map[string]any{"delayed-retry-type": "all", "delayed-retry-min": 0}, `0 is not a valid delayed retry minimum delay. Must be a positive integer`},
		{map[string]any{"delayed-retry-type": "all", "delayed-retry-min": 10, "delayed-retry-max": "x"}, `<<"x">> is not a valid delayed retry maximum delay. Must be a positive integer`},
		{map[string]any{"delayed-retry-type": "returned"}, `delayed-retry-min is required when delayed-retry-type is returned`},
		{map[string]any{"delayed-retry-type": "all", "delayed-retry-min": 100, "delayed-retry-max": 50}, `delayed-retry-max (50) must not be smaller than delayed-retry-min (100)`},
		{map[string]any{"delivery-limit": 2.5}, `2.5 is not a valid delivery limit`},
	} {
		code, _, body := a.callWithHeaders("PUT", "/api/policies/%2F/qql-bad", map[string]any{"pattern": "^x$", "definition": tc.def})
		if code != 400 || body.Reason != "Validation failed\n\n"+tc.want+"\n" {
			t.Errorf("%v: %d %q, want 400 %q", tc.def, code, body.Reason, tc.want)
		}
	}
	for _, def := range []map[string]any{
		{"delayed-retry-type": "disabled"},
		{"delayed-retry-type": "all", "delayed-retry-min": 100, "delayed-retry-max": 1000},
		{"delivery-limit": -1},
	} {
		name := fmt.Sprintf("qql-ok-%d", len(def))
		if code, _, body := a.callWithHeaders("PUT", "/api/policies/%2F/"+name, map[string]any{"pattern": "^x$", "definition": def}); code != 201 && code != 204 {
			t.Errorf("%v refused: %d %q", def, code, body.Reason)
		}
	}
}

// TestQuorumRecoverDoesNotCount: basic.recover with requeue returns a
// quorum queue's unacked messages without failing them
// (rabbit_channel.erl v4.3.5 basic.recover_async settles with requeue, a
// return: rabbit_fifo.erl v4.3.5 #return{}, DeliveryFailed false): with
// x-delivery-limit 0 the message survives five recovers, x-acquired-count
// counting them, and goes at the first reject.
func TestQuorumRecoverDoesNotCount(t *testing.T) {
	e := qqLimitsEnv(t)
	e.declareQQ("qql-recover", rmq.Table{"x-delivery-limit": int32(0)}, "m")
	ch := e.channel(e.conn)
	ds, err := ch.Consume("qql-recover", "", false, false, false, false, nil)
	must(t, err)
	d := recv(t, ds)
	for i := 1; i <= 5; i++ {
		//lint:ignore SA1019 basic.recover is the return under test
		must(t, ch.Recover(true))
		d = recv(t, ds)
		if !d.Redelivered || header(d, "x-acquired-count") != int64(i) || header(d, "x-delivery-count") != -1 {
			t.Fatalf("after %d recovers: redelivered %v headers %v", i, d.Redelivered, d.Headers)
		}
	}
	must(t, d.Reject(true))
	if reason, _ := e.deadReason(); reason != "delivery_limit" {
		t.Fatalf("dead-lettered for %q, want delivery_limit", reason)
	}
}

// TestQuorumDeliveryLimitPolicyInCluster: in a cluster of three, a
// delivery-limit policy set through one node's API reaches a live quorum
// queue as an entry of its log (rabbit_quorum_queue.erl v4.3.5
// policy_changed: the new machine config goes to the queue's Raft
// cluster), so a reject through another node is judged by it: the
// message, rejected three times under x-delivery-limit 10, is
// dead-lettered at its next reject under the policy's 2.
func TestQuorumDeliveryLimitPolicyInCluster(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	declareQuorum(t, nodes[0].b.URL, "qql-cl", rmq.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(10),
		"x-dead-letter-exchange": "qql-cdlx"})
	chans := clusterChannels(t, nodes)
	must(t, chans[0].ExchangeDeclare("qql-cdlx", "fanout", true, false, false, false, nil))
	_, err := chans[0].QueueDeclare("qql-cdead", true, false, false, false, nil)
	must(t, err)
	must(t, chans[0].QueueBind("qql-cdead", "", "qql-cdlx", false, nil))
	must(t, chans[0].Confirm(false))
	conf := chans[0].NotifyPublish(make(chan rmq.Confirmation, 1))
	must(t, chans[0].Publish("", "qql-cl", false, false, rmq.Publishing{Body: []byte("m")}))
	if c := <-conf; !c.Ack {
		t.Fatal("publish nacked")
	}
	getOn := func(ch *rmq.Channel, q string) rmq.Delivery {
		t.Helper()
		var d rmq.Delivery
		testutil.Eventually(t, 10*time.Second, func() bool {
			var ok bool
			d, ok, err = ch.Get(q, false)
			must(t, err)
			return ok
		}, "a message on %s", q)
		return d
	}
	for i := 0; i < 3; i++ {
		must(t, getOn(chans[2], "qql-cl").Reject(true))
	}
	a1, a2 := &api{t: t, url: nodes[0].api}, &api{t: t, url: nodes[1].api}
	testutil.Eventually(t, 15*time.Second, func() bool {
		return a1.call("PUT", "/api/policies/%2F/qql-clp", "guest", "guest", map[string]any{"pattern": "^qql-cl$",
			"definition": map[string]any{"delivery-limit": 2}, "apply-to": "queues"}, nil) == 201
	}, "PUT policy on node 1 did not succeed")
	// The policy reaches the queue's log as an entry of its own, after
	// the metadata shows it (as RabbitMQ's policy_changed): node 2's
	// member shows the limit once it applied that entry (delivery_limit,
	// as RabbitMQ 4.1's queue stats), and a reject sent after it is
	// judged by it.
	testutil.Eventually(t, 10*time.Second, func() bool {
		var q struct {
			Policy        string `json:"policy"`
			DeliveryLimit any    `json:"delivery_limit"`
		}
		a2.call("GET", "/api/queues/%2F/qql-cl", "guest", "guest", nil, &q)
		return q.Policy == "qql-clp" && q.DeliveryLimit == float64(2)
	}, "node 2's queue has the policy and its delivery limit")
	d := getOn(chans[1], "qql-cl")
	if header(d, "x-delivery-count") != 3 {
		t.Fatalf("before the 4th reject: %v", d.Headers)
	}
	must(t, d.Reject(true))
	dead := getOn(chans[0], "qql-cdead")
	deaths, _ := dead.Headers["x-death"].([]any)
	if len(deaths) == 0 || deaths[0].(rmq.Table)["reason"] != "delivery_limit" {
		t.Fatalf("dead-lettered with %v, want reason delivery_limit", dead.Headers["x-death"])
	}
}
