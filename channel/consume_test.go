package channel

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
)

// notIntegers are the field values of each non-integer AMQP type, as
// amqp.DecodeTable gives them, with RabbitMQ's name for the type.
var notIntegers = []struct {
	v    any
	name string
}{
	{float32(1.5), "float"},
	{1.5, "double"},
	{"5", "longstr"},
	{true, "bool"},
	{[]byte("5"), "binary"},
	{time.Unix(5, 0).UTC(), "timestamp"},
	{amqp.Decimal{Value: 5}, "decimal"},
	{nil, "void"},
	{amqp.Table{}, "table"},
	{[]any{int32(1)}, "array"},
}

// TestConsumerPriority pins basic.consume's x-priority: RabbitMQ takes an
// integer of any wire type (rabbit_amqqueue:consume_args, check_int_arg)
// and refuses anything else with a 406 naming the type, as RabbitMQ 3.10
// answered each one.
func TestConsumerPriority(t *testing.T) {
	type tc struct {
		name string
		args amqp.Table
		want int32
		// check replaces want where only the order matters: RabbitMQ
		// compares priorities as unbounded integers.
		check func(int32) bool
		text  string // the 406's text; "" when taken
	}
	cases := []tc{
		{name: "absent", args: nil, want: 0},
		{name: "other args only", args: amqp.Table{"x-cancel-on-ha-failover": true}, want: 0},
		{name: "byte", args: amqp.Table{"x-priority": int8(-3)}, want: -3},
		{name: "unsignedbyte", args: amqp.Table{"x-priority": uint8(200)}, want: 200},
		{name: "short", args: amqp.Table{"x-priority": int16(-300)}, want: -300},
		{name: "unsignedshort", args: amqp.Table{"x-priority": uint16(65535)}, want: 65535},
		{name: "signedint", args: amqp.Table{"x-priority": int32(math.MinInt32)}, want: math.MinInt32},
		{name: "unsignedint", args: amqp.Table{"x-priority": uint32(7)}, want: 7},
		{name: "long", args: amqp.Table{"x-priority": int64(10)}, want: 10},
		{name: "long past int32", args: amqp.Table{"x-priority": int64(1) << 31},
			check: func(p int32) bool { return p == math.MaxInt32 }},
		{name: "long 2^40", args: amqp.Table{"x-priority": int64(1) << 40},
			check: func(p int32) bool { return p == math.MaxInt32 }},
		{name: "long -2^40", args: amqp.Table{"x-priority": -(int64(1) << 40)},
			check: func(p int32) bool { return p == math.MinInt32 }},
	}
	for _, x := range notIntegers {
		cases = append(cases, tc{name: x.name, args: amqp.Table{"x-priority": x.v},
			text: fmt.Sprintf(`PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': "expected integer, got %s"`, x.name)})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := consumerPriority(tc.args, "q", "/")
			if tc.text == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				ok := p == tc.want
				if tc.check != nil {
					ok = tc.check(p)
				}
				if !ok {
					t.Fatalf("got %d, want %d", p, tc.want)
				}
				return
			}
			var e *amqp.Error
			if !errors.As(err, &e) || e.Code != amqp.PreconditionFailed {
				t.Fatalf("got %d, %v; want a 406", p, err)
			}
			if e.Text != tc.text {
				t.Fatalf("got %q\nwant %q", e.Text, tc.text)
			}
		})
	}
}

// TestConsumerTimeout pins basic.consume's x-consumer-timeout (ms): an
// integer of any wire type, 0 or more; anything else is refused with a
// 406. RabbitMQ 3.10 ignores this argument (RabbitMQ 4 reads it, for
// quorum queues), so the refusals' texts are railmq's, pinned by
// conformance TestPerConsumerTimeout.
func TestConsumerTimeout(t *testing.T) {
	type tc struct {
		name  string
		args  amqp.Table
		want  time.Duration
		check func(time.Duration) bool
		text  string
	}
	const notInteger = "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for consumer: expected integer"
	cases := []tc{
		{name: "absent", args: nil, want: 0},
		{name: "zero", args: amqp.Table{"x-consumer-timeout": int32(0)}, want: 0},
		{name: "byte", args: amqp.Table{"x-consumer-timeout": int8(100)}, want: 100 * time.Millisecond},
		{name: "unsignedbyte", args: amqp.Table{"x-consumer-timeout": uint8(200)}, want: 200 * time.Millisecond},
		{name: "short", args: amqp.Table{"x-consumer-timeout": int16(300)}, want: 300 * time.Millisecond},
		{name: "unsignedshort", args: amqp.Table{"x-consumer-timeout": uint16(60000)}, want: time.Minute},
		{name: "signedint", args: amqp.Table{"x-consumer-timeout": int32(200)}, want: 200 * time.Millisecond},
		{name: "unsignedint", args: amqp.Table{"x-consumer-timeout": uint32(1800000)}, want: 30 * time.Minute},
		{name: "long", args: amqp.Table{"x-consumer-timeout": int64(86400000)}, want: 24 * time.Hour},
		{name: "negative", args: amqp.Table{"x-consumer-timeout": int32(-1)},
			text: "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for consumer: {value_negative,-1}"},
		// A lease longer than time.Duration holds (292 years) is still a
		// lease longer than any other, never a negative one (which the
		// channel takes for "none", falling back to the broker's 30 min).
		{name: "long max", args: amqp.Table{"x-consumer-timeout": int64(math.MaxInt64)},
			check: func(d time.Duration) bool {
				return d >= time.Duration(math.MaxInt64/int64(time.Millisecond))*time.Millisecond
			}},
	}
	for _, x := range notIntegers {
		cases = append(cases, tc{name: x.name, args: amqp.Table{"x-consumer-timeout": x.v}, text: notInteger})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := consumerTimeout(tc.args)
			if tc.text == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				ok := d == tc.want
				if tc.check != nil {
					ok = tc.check(d)
				}
				if !ok {
					t.Fatalf("got %v, want %v", d, tc.want)
				}
				return
			}
			var e *amqp.Error
			if !errors.As(err, &e) || e.Code != amqp.PreconditionFailed || e.Text != tc.text {
				t.Fatalf("got %v, %v\nwant 406 %q", d, err, tc.text)
			}
		})
	}
}
