package vhost

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// wantAMQP checks that err is the *amqp.Error with code and text.
func wantAMQP(t *testing.T, err error, code uint16, text string) {
	t.Helper()
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		t.Fatalf("got %v, want %d %q", err, code, text)
	}
	if ae.Code != code || ae.Text != text {
		t.Fatalf("got %d %q\nwant %d %q", ae.Code, ae.Text, code, text)
	}
}

func TestValidateQueueArgsRefusals(t *testing.T) {
	const pre = "PRECONDITION_FAILED - invalid arg '"
	bad := func(arg, detail string) string {
		return pre + arg + "' for queue 'q' in vhost 'v': " + detail
	}
	for _, tc := range []struct {
		name string
		args amqp.Table
		text string
	}{
		// x-dead-letter-exchange: the channel's words (rabbit_misc:r_arg).
		{"dlx signedint", amqp.Table{"x-dead-letter-exchange": int32(5)}, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost 'v'"},
		{"dlx long", amqp.Table{"x-dead-letter-exchange": int64(5)}, "PRECONDITION_FAILED - invalid type 'long' for arg 'x-dead-letter-exchange' in queue 'q' in vhost 'v'"},
		{"dlx bool", amqp.Table{"x-dead-letter-exchange": true}, "PRECONDITION_FAILED - invalid type 'bool' for arg 'x-dead-letter-exchange' in queue 'q' in vhost 'v'"},
		{"dlx binary", amqp.Table{"x-dead-letter-exchange": []byte("dlx")}, "PRECONDITION_FAILED - invalid type 'binary' for arg 'x-dead-letter-exchange' in queue 'q' in vhost 'v'"},
		// x-queue-type.
		{"queue type unknown", amqp.Table{"x-queue-type": "quorum"}, bad("x-queue-type", `"unsupported queue type 'quorum'"`)},
		{"queue type not a string", amqp.Table{"x-queue-type": int32(1)}, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost 'v': received '1' but current is 'classic'"},
		// x-expires.
		{"expires type", amqp.Table{"x-expires": "1000"}, bad("x-expires", `"expected integer, got longstr"`)},
		{"expires zero", amqp.Table{"x-expires": int32(0)}, bad("x-expires", "{value_zero,0}")},
		{"expires negative", amqp.Table{"x-expires": int32(-5)}, bad("x-expires", "{value_negative,-5}")},
		{"expires too large", amqp.Table{"x-expires": int64(maxExpiry + 1)}, bad("x-expires", "{value_too_large,315360000001}")},
		// x-message-ttl.
		{"ttl longstr", amqp.Table{"x-message-ttl": "1000"}, bad("x-message-ttl", `"expected integer, got longstr"`)},
		{"ttl bool", amqp.Table{"x-message-ttl": true}, bad("x-message-ttl", `"expected integer, got bool"`)},
		{"ttl double", amqp.Table{"x-message-ttl": 1.5}, bad("x-message-ttl", `"expected integer, got double"`)},
		{"ttl negative", amqp.Table{"x-message-ttl": int32(-1)}, bad("x-message-ttl", "{value_negative,-1}")},
		{"ttl too large", amqp.Table{"x-message-ttl": int64(1099511627776)}, bad("x-message-ttl", "{value_too_large,1099511627776}")},
		// x-dead-letter-routing-key.
		{"dlrk type", amqp.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": int32(5)}, bad("x-dead-letter-routing-key", "{unacceptable_type,signedint}")},
		{"dlrk without dlx", amqp.Table{"x-dead-letter-routing-key": "rk"}, bad("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined")},
		// Lengths.
		{"max length type", amqp.Table{"x-max-length": "10"}, bad("x-max-length", `"expected integer, got longstr"`)},
		{"max length negative", amqp.Table{"x-max-length": int32(-5)}, bad("x-max-length", "{value_negative,-5}")},
		{"max length bytes type", amqp.Table{"x-max-length-bytes": 2.5}, bad("x-max-length-bytes", `"expected integer, got double"`)},
		{"max length bytes negative", amqp.Table{"x-max-length-bytes": int64(-1)}, bad("x-max-length-bytes", "{value_negative,-1}")},
		// x-max-priority.
		{"priority type", amqp.Table{"x-max-priority": "10"}, bad("x-max-priority", `"expected integer, got longstr"`)},
		{"priority negative", amqp.Table{"x-max-priority": int16(-1)}, bad("x-max-priority", "{value_negative,-1}")},
		{"priority too large", amqp.Table{"x-max-priority": int32(300)}, bad("x-max-priority", "{max_value_exceeded,300}")},
		// x-overflow.
		{"overflow type", amqp.Table{"x-overflow": int32(1)}, bad("x-overflow", "{unacceptable_type,signedint}")},
		{"overflow unknown", amqp.Table{"x-overflow": "bogus"}, bad("x-overflow", "invalid_overflow")},
		// x-queue-mode.
		{"mode type", amqp.Table{"x-queue-mode": int32(1)}, bad("x-queue-mode", "{unacceptable_type,signedint}")},
		{"mode unknown", amqp.Table{"x-queue-mode": "eager"}, bad("x-queue-mode", `"unsupported queue mode 'eager'"`)},
		// x-queue-version.
		{"version type", amqp.Table{"x-queue-version": "2"}, bad("x-queue-version", `"expected integer, got longstr"`)},
		{"version negative", amqp.Table{"x-queue-version": int32(-1)}, bad("x-queue-version", "{value_negative,-1}")},
		{"version unknown", amqp.Table{"x-queue-version": int32(3)}, bad("x-queue-version", `"unsupported queue version '3'"`)},
		// x-single-active-consumer.
		{"sac longstr", amqp.Table{"x-single-active-consumer": "yes"}, bad("x-single-active-consumer", "{unacceptable_type,longstr}")},
		{"sac signedint", amqp.Table{"x-single-active-consumer": int32(1)}, bad("x-single-active-consumer", "{unacceptable_type,signedint}")},
		// x-delivery-limit and x-consumer-timeout.
		{"delivery limit type", amqp.Table{"x-delivery-limit": "3"}, bad("x-delivery-limit", `"expected integer, got longstr"`)},
		{"consumer timeout type", amqp.Table{"x-consumer-timeout": true}, bad("x-consumer-timeout", `"expected integer, got bool"`)},
		{"consumer timeout negative", amqp.Table{"x-consumer-timeout": int64(-7)}, bad("x-consumer-timeout", "{value_negative,-7}")},
		// x-message-group-header (railmq's message groups).
		{"group header type", amqp.Table{"x-message-group-header": int64(1)}, bad("x-message-group-header", "{unacceptable_type,long}")},
		{"group header empty", amqp.Table{"x-message-group-header": ""}, bad("x-message-group-header", "{value_empty,<<>>}")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := validateQueueArgs("q", "v", tc.args)
			wantAMQP(t, err, amqp.PreconditionFailed, tc.text)
		})
	}
}

// TestValidateQueueArgsOrder declares with every argument bad, then drops
// the one reported each time: the next one in RabbitMQ's order is reported.
func TestValidateQueueArgsOrder(t *testing.T) {
	all := []struct {
		arg    string
		v      any
		detail string
	}{
		{"x-dead-letter-exchange", int32(1), ""}, // invalid type, in its own words
		{"x-queue-type", "stream", `"unsupported queue type 'stream'"`},
		{"x-expires", int32(0), "{value_zero,0}"},
		{"x-message-ttl", "1", `"expected integer, got longstr"`},
		{"x-dead-letter-routing-key", int32(1), "{unacceptable_type,signedint}"},
		{"x-max-length", int32(-1), "{value_negative,-1}"},
		{"x-max-length-bytes", int32(-2), "{value_negative,-2}"},
		{"x-max-priority", int32(300), "{max_value_exceeded,300}"},
		{"x-overflow", "bogus", "invalid_overflow"},
		{"x-queue-mode", "eager", `"unsupported queue mode 'eager'"`},
		{"x-queue-version", int32(9), `"unsupported queue version '9'"`},
		{"x-single-active-consumer", "yes", "{unacceptable_type,longstr}"},
		{"x-delivery-limit", "3", `"expected integer, got longstr"`},
		{"x-consumer-timeout", int32(-4), "{value_negative,-4}"},
		{"x-retry-delay", int32(-5), "{value_negative,-5}"},
		{"x-retry-backoff", 0.5, "{value_too_small,0.5}"},
		{"x-retry-delay-max", "1", `"expected integer, got longstr"`},
		{"x-retry-jitter", 2.0, "{value_out_of_range,2}"},
		{"x-deduplication-confirm", "maybe", "expected 'ack' or 'nack', got the value 'maybe' of type 'longstr'"},
		{"x-message-group-header", int32(1), "{unacceptable_type,signedint}"},
	}
	if len(all) != len(queueArgChecks) {
		t.Fatalf("%d checks, %d tested", len(queueArgChecks), len(all))
	}
	for i, a := range all {
		if queueArgChecks[i].name != a.arg {
			t.Fatalf("check %d is %s, want %s", i, queueArgChecks[i].name, a.arg)
		}
	}
	for i, a := range all {
		args := amqp.Table{}
		for _, b := range all[i:] {
			args[b.arg] = b.v
		}
		t.Run(a.arg, func(t *testing.T) {
			text := "PRECONDITION_FAILED - invalid arg '" + a.arg + "' for queue 'q' in vhost 'v': " + a.detail
			if a.arg == "x-dead-letter-exchange" {
				text = "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost 'v'"
			}
			_, err := validateQueueArgs("q", "v", args)
			wantAMQP(t, err, amqp.PreconditionFailed, text)
		})
	}
}

func TestValidateQueueArgsAccepted(t *testing.T) {
	for _, tc := range []struct {
		name string
		args amqp.Table
		want queueArgs // dlx and dlrk compared by value
	}{
		{"none", nil, queueArgs{policy: queue.NoPolicy}},
		{"unknown x- argument", amqp.Table{"x-custom": "yes", "x-queue-type": "classic"}, queueArgs{policy: queue.NoPolicy}},
		{"largest expiries", amqp.Table{"x-message-ttl": int64(maxExpiry), "x-expires": int64(maxExpiry)}, queueArgs{policy: func() queue.Policy {
			p := queue.NoPolicy
			p.MessageTTL = maxExpiry * time.Millisecond
			p.Expires = maxExpiry * time.Millisecond
			return p
		}()}},
		{"dedup confirm ack", amqp.Table{"x-message-deduplication": true, "x-deduplication-confirm": "ack"}, queueArgs{policy: func() queue.Policy {
			p := queue.NoPolicy
			p.Dedup, p.DedupConfirm = true, queue.DedupConfirmAck
			return p
		}()}},
		{"ttl zero", amqp.Table{"x-message-ttl": int32(0)}, queueArgs{policy: func() queue.Policy {
			p := queue.NoPolicy
			p.MessageTTL = 0
			return p
		}()}},
		{"limits", amqp.Table{"x-max-length": int64(1) << 40, "x-max-length-bytes": int8(0), "x-delivery-limit": uint16(3),
			"x-max-priority": uint8(255), "x-overflow": "reject-publish-dlx", "x-single-active-consumer": true,
			"x-queue-mode": "lazy", "x-queue-version": int32(2), "x-consumer-timeout": int32(1500)},
			queueArgs{consumerTimeout: 1500 * time.Millisecond, policy: func() queue.Policy {
				p := queue.NoPolicy
				p.MaxLength, p.MaxLengthBytes, p.DeliveryLimit, p.MaxPriority = 1<<40, 0, 3, 255
				p.DeliveryLimitSet = true
				p.Overflow, p.SingleActive = queue.RejectPublishDLX, true
				return p
			}()}},
		// A negative delivery limit is none, as RabbitMQ 4.3's quorum queues
		// take x-delivery-limit -1 (3.10.8 accepts it on a quorum queue
		// too: declare ok), on every queue.
		{"delivery limit off", amqp.Table{"x-delivery-limit": int32(-5)}, queueArgs{policy: func() queue.Policy {
			p := queue.NoPolicy
			p.DeliveryLimit, p.DeliveryLimitSet = -1, true
			return p
		}()}},
		{"reject-publish", amqp.Table{"x-overflow": "reject-publish"}, queueArgs{policy: func() queue.Policy {
			p := queue.NoPolicy
			p.Overflow = queue.RejectPublish
			return p
		}()}},
		{"drop-head", amqp.Table{"x-overflow": "drop-head", "x-queue-version": int32(1), "x-queue-mode": "default"}, queueArgs{policy: queue.NoPolicy}},
		{"dead-lettering", amqp.Table{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "rk"}, queueArgs{policy: queue.NoPolicy,
			dlx: ptr("dlx"), dlrk: ptr("rk")}},
		{"dead-letter exchange alone", amqp.Table{"x-dead-letter-exchange": ""}, queueArgs{policy: queue.NoPolicy, dlx: ptr("")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := validateQueueArgs("q", "v", tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if got.consumerTimeout != tc.want.consumerTimeout || fmt.Sprint(got.policy) != fmt.Sprint(tc.want.policy) ||
				deref(got.dlx) != deref(tc.want.dlx) || deref(got.dlrk) != deref(tc.want.dlrk) {
				t.Fatalf("got %+v dlx %s dlrk %s\nwant %+v dlx %s dlrk %s", got, deref(got.dlx), deref(got.dlrk),
					tc.want, deref(tc.want.dlx), deref(tc.want.dlrk))
			}
		})
	}
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return "'" + *s + "'"
}
