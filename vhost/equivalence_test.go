package vhost

import (
	"sync/atomic"
	"testing"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// newTestVHost is a vhost without a store, closed when the test ends.
func newTestVHost(t *testing.T) *VHost {
	t.Helper()
	v := New("v", new(atomic.Int64), nil, nil, 0, 0)
	t.Cleanup(v.Close)
	return v
}

const lockedText = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost 'v'. " +
	"It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."

func TestQueueRedeclareEquivalence(t *testing.T) {
	ineq := func(arg, got, cur string) string {
		return "PRECONDITION_FAILED - inequivalent arg '" + arg + "' for queue 'q' in vhost 'v': received " + got + " but current is " + cur
	}
	orig := QueueDecl{Name: "q", Owner: 1, Args: amqp.Table{
		"x-message-ttl": int32(1000), "x-dead-letter-exchange": "dlx", "x-custom": "a",
	}}
	for _, tc := range []struct {
		name string
		edit func(d *QueueDecl)
		code uint16 // 0: equivalent
		text string
	}{
		{"same", func(d *QueueDecl) {}, 0, ""},
		{"passive ignores the rest", func(d *QueueDecl) { d.Passive, d.Durable, d.Args = true, true, nil }, 0, ""},
		{"integer of another width", func(d *QueueDecl) { d.Args["x-message-ttl"] = int64(1000) }, 0, ""},
		{"argument not compared", func(d *QueueDecl) { d.Args["x-custom"] = "b" }, 0, ""},
		{"classic queue type", func(d *QueueDecl) { d.Args["x-queue-type"] = "classic" }, 0, ""},
		{"durable", func(d *QueueDecl) { d.Durable = true }, amqp.PreconditionFailed, ineq("durable", "'true'", "'false'")},
		{"auto_delete", func(d *QueueDecl) { d.AutoDelete = true }, amqp.PreconditionFailed, ineq("auto_delete", "'true'", "'false'")},
		// durable+exclusive is transient (errata §30), so the exclusive
		// flag, not durable, is what differs.
		{"exclusive", func(d *QueueDecl) { d.Exclusive = true }, amqp.ResourceLocked, lockedText},
		{"durable exclusive", func(d *QueueDecl) { d.Exclusive, d.Durable = true, true }, amqp.ResourceLocked, lockedText},
		{"ttl value", func(d *QueueDecl) { d.Args["x-message-ttl"] = int32(2000) }, amqp.PreconditionFailed, ineq("x-message-ttl", "'2000'", "'1000'")},
		{"ttl missing", func(d *QueueDecl) { delete(d.Args, "x-message-ttl") }, amqp.PreconditionFailed,
			ineq("x-message-ttl", "none", "the value '1000' of type 'signedint'")},
		{"max length added", func(d *QueueDecl) { d.Args["x-max-length"] = int32(5) }, amqp.PreconditionFailed,
			ineq("x-max-length", "the value '5' of type 'signedint'", "none")},
		{"dlx value", func(d *QueueDecl) { d.Args["x-dead-letter-exchange"] = "other" }, amqp.PreconditionFailed,
			ineq("x-dead-letter-exchange", "'other'", "'dlx'")},
		{"dlx type", func(d *QueueDecl) { d.Args["x-dead-letter-exchange"] = int32(5) }, amqp.PreconditionFailed,
			ineq("x-dead-letter-exchange", "'5'", "'dlx'")},
		{"sac added", func(d *QueueDecl) { d.Args["x-single-active-consumer"] = true }, amqp.PreconditionFailed,
			ineq("x-single-active-consumer", "the value 'true' of type 'bool'", "none")},
		// The queue was declared with no x-queue-type: RabbitMQ 3.10.8,
		// for a classic queue declared with none, then with quorum:
		// "... received the value 'quorum' of type 'longstr' but current
		// is none" (checked); with x-queue-type classic, "received
		// 'quorum' but current is 'classic'" (conformance
		// TestQueueTypeNotClassic).
		{"queue type", func(d *QueueDecl) { d.Args["x-queue-type"] = "quorum" }, amqp.PreconditionFailed,
			ineq("x-queue-type", "the value 'quorum' of type 'longstr'", "none")},
		// Of several differences, the flags come first, then the
		// arguments in RabbitMQ's equivalence order.
		{"durable before auto_delete", func(d *QueueDecl) { d.Durable, d.AutoDelete = true, true }, amqp.PreconditionFailed,
			ineq("durable", "'true'", "'false'")},
		// Exclusive access before the flags (rabbit_amqqueue:
		// assert_equivalence): RabbitMQ 3.10.8, a transient classic queue
		// redeclared auto-delete and exclusive, answered 405
		// RESOURCE_LOCKED; redeclared durable and auto-delete, 406
		// inequivalent arg 'durable'.
		{"exclusive before auto_delete", func(d *QueueDecl) { d.AutoDelete, d.Exclusive = true, true }, amqp.ResourceLocked, lockedText},
		{"flags before arguments", func(d *QueueDecl) { d.AutoDelete, d.Args["x-message-ttl"] = true, int32(1) }, amqp.PreconditionFailed,
			ineq("auto_delete", "'true'", "'false'")},
		{"queue type before arguments", func(d *QueueDecl) { d.Args["x-queue-type"], d.Args["x-expires"] = "quorum", int32(1) }, amqp.PreconditionFailed,
			ineq("x-queue-type", "the value 'quorum' of type 'longstr'", "none")},
		{"x-expires before x-message-ttl", func(d *QueueDecl) { d.Args["x-expires"], d.Args["x-message-ttl"] = int32(9), int32(1) }, amqp.PreconditionFailed,
			ineq("x-expires", "the value '9' of type 'signedint'", "none")},
		{"x-message-ttl before x-dead-letter-exchange", func(d *QueueDecl) { d.Args["x-dead-letter-exchange"], d.Args["x-message-ttl"] = "o", int32(1) },
			amqp.PreconditionFailed, ineq("x-message-ttl", "'1'", "'1000'")},
		// A queue that is not exclusive is compared for any connection.
		{"other connection", func(d *QueueDecl) { d.Owner, d.Durable = 2, true }, amqp.PreconditionFailed, ineq("durable", "'true'", "'false'")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestVHost(t)
			if _, _, _, err := v.DeclareQueue(cloneDecl(orig), queue.Config{}); err != nil {
				t.Fatal(err)
			}
			d := cloneDecl(orig)
			tc.edit(&d)
			_, _, _, err := v.DeclareQueue(d, queue.Config{})
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("redeclare: %v", err)
				}
				return
			}
			wantAMQP(t, err, tc.code, tc.text)
		})
	}
}

// TestExclusiveQueueLockedBeforeEquivalence: another connection's exclusive
// queue is locked before anything else is compared (errata §8).
func TestExclusiveQueueLockedBeforeEquivalence(t *testing.T) {
	v := newTestVHost(t)
	if _, _, _, err := v.DeclareQueue(QueueDecl{Name: "q", Exclusive: true, Owner: 1}, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []QueueDecl{
		{Name: "q", Exclusive: true, Owner: 2},
		{Name: "q", Durable: true, AutoDelete: true, Owner: 2, Args: amqp.Table{"x-message-ttl": int32(1)}},
		{Name: "q", Passive: true, Owner: 2},
	} {
		_, _, _, err := v.DeclareQueue(d, queue.Config{})
		wantAMQP(t, err, amqp.ResourceLocked, lockedText)
	}
	// The owner redeclaring it with other flags: inequivalent.
	_, _, _, err := v.DeclareQueue(QueueDecl{Name: "q", Exclusive: true, AutoDelete: true, Owner: 1}, queue.Config{})
	wantAMQP(t, err, amqp.PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for queue 'q' in vhost 'v': received 'true' but current is 'false'")
}

func cloneDecl(d QueueDecl) QueueDecl {
	args := amqp.Table{}
	for k, v := range d.Args {
		args[k] = v
	}
	d.Args = args
	return d
}

func TestExchangeRedeclareEquivalence(t *testing.T) {
	ineq := func(arg, got, cur string) string {
		return "PRECONDITION_FAILED - inequivalent arg '" + arg + "' for exchange 'x' in vhost 'v': received " + got + " but current is " + cur
	}
	orig := ExchangeDecl{Name: "x", Type: "direct", Durable: true, Args: amqp.Table{"alternate-exchange": "ae", "x-custom": int32(1)}}
	for _, tc := range []struct {
		name string
		edit func(d *ExchangeDecl)
		code uint16 // 0: equivalent
		text string
	}{
		{"same", func(d *ExchangeDecl) {}, 0, ""},
		{"passive ignores the rest", func(d *ExchangeDecl) { d.Passive, d.Type, d.Durable = true, "bogus", false }, 0, ""},
		{"argument not compared", func(d *ExchangeDecl) { d.Args["x-custom"] = "other" }, 0, ""},
		{"unknown type", func(d *ExchangeDecl) { d.Type = "bogus" }, amqp.CommandInvalid, "COMMAND_INVALID - unknown exchange type 'bogus'"},
		{"type", func(d *ExchangeDecl) { d.Type = "fanout" }, amqp.PreconditionFailed, ineq("type", "'fanout'", "'direct'")},
		{"durable", func(d *ExchangeDecl) { d.Durable = false }, amqp.PreconditionFailed, ineq("durable", "'false'", "'true'")},
		{"auto_delete", func(d *ExchangeDecl) { d.AutoDelete = true }, amqp.PreconditionFailed, ineq("auto_delete", "'true'", "'false'")},
		{"internal", func(d *ExchangeDecl) { d.Internal = true }, amqp.PreconditionFailed, ineq("internal", "'true'", "'false'")},
		{"alternate exchange", func(d *ExchangeDecl) { d.Args["alternate-exchange"] = "other" }, amqp.PreconditionFailed,
			ineq("alternate-exchange", "'other'", "'ae'")},
		{"alternate exchange missing", func(d *ExchangeDecl) { delete(d.Args, "alternate-exchange") }, amqp.PreconditionFailed,
			ineq("alternate-exchange", "none", "the value 'ae' of type 'longstr'")},
		// In RabbitMQ's order: type, durable, auto_delete, internal, then
		// the arguments.
		{"type first", func(d *ExchangeDecl) { d.Type, d.Durable, d.Internal = "topic", false, true }, amqp.PreconditionFailed,
			ineq("type", "'topic'", "'direct'")},
		{"durable before auto_delete", func(d *ExchangeDecl) { d.Durable, d.AutoDelete = false, true }, amqp.PreconditionFailed,
			ineq("durable", "'false'", "'true'")},
		{"auto_delete before internal", func(d *ExchangeDecl) { d.AutoDelete, d.Internal = true, true }, amqp.PreconditionFailed,
			ineq("auto_delete", "'true'", "'false'")},
		{"flags before arguments", func(d *ExchangeDecl) { d.Internal, d.Args["alternate-exchange"] = true, "o" }, amqp.PreconditionFailed,
			ineq("internal", "'true'", "'false'")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestVHost(t)
			d := orig
			d.Args = amqp.Table{"alternate-exchange": "ae", "x-custom": int32(1)}
			if err := v.DeclareExchange(d); err != nil {
				t.Fatal(err)
			}
			d.Args = amqp.Table{"alternate-exchange": "ae", "x-custom": int32(1)}
			tc.edit(&d)
			err := v.DeclareExchange(d)
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("redeclare: %v", err)
				}
				return
			}
			wantAMQP(t, err, tc.code, tc.text)
		})
	}
}

func TestShowArg(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{none{}, "none"},
		{typedValue{int32(5)}, "the value '5' of type 'signedint'"},
		{typedValue{"s"}, "the value 's' of type 'longstr'"},
		{typedValue{int64(5)}, "the value '5' of type 'long'"},
		{"s", "'s'"},
		{true, "'true'"},
		{int16(-3), "'-3'"},
	} {
		if got := showArg(tc.v); got != tc.want {
			t.Errorf("showArg(%#v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestSameValue(t *testing.T) {
	for _, tc := range []struct {
		a, b any
		want bool
	}{
		{int32(1000), int64(1000), true},
		{uint8(1), int16(1), true},
		{int32(1), int32(2), false},
		{"a", "a", true},
		{"1", int32(1), false},
		{true, true, true},
		{true, "true", false},
		{1.5, 1.5, true},
		{float32(1.5), 1.5, false},
	} {
		if got := sameValue(tc.a, tc.b); got != tc.want {
			t.Errorf("sameValue(%#v, %#v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
