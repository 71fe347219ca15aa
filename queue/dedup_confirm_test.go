package queue

import (
	"testing"

	"github.com/railmq/railmq/amqp"
)

// TestDedupConfirmResolve: the message's x-deduplication-confirm header
// ("ack" or "nack", a long string) wins over the queue's or exchange's
// setting, which wins over the default; any other header is ignored.
func TestDedupConfirmResolve(t *testing.T) {
	props := func(h amqp.Table) []byte {
		if h == nil {
			return (&amqp.Properties{}).Append(nil)
		}
		return (&amqp.Properties{Flags: amqp.FlagHeaders, Headers: h}).Append(nil)
	}
	for _, tc := range []struct {
		name   string
		header amqp.Table
		set    DedupConfirm
		def    DedupConfirm
		want   DedupConfirm
	}{
		{"nothing: the default", nil, DedupConfirmDefault, DedupConfirmNack, DedupConfirmNack},
		{"the setting", nil, DedupConfirmAck, DedupConfirmNack, DedupConfirmAck},
		{"the header over the setting", amqp.Table{"x-deduplication-confirm": "nack"}, DedupConfirmAck, DedupConfirmNack, DedupConfirmNack},
		{"the header over the default", amqp.Table{"x-deduplication-confirm": "ack"}, DedupConfirmDefault, DedupConfirmNack, DedupConfirmAck},
		{"another header value", amqp.Table{"x-deduplication-confirm": "yes"}, DedupConfirmAck, DedupConfirmNack, DedupConfirmAck},
		{"a header of another type", amqp.Table{"x-deduplication-confirm": int32(1)}, DedupConfirmDefault, DedupConfirmNack, DedupConfirmNack},
		{"other headers", amqp.Table{"x-deduplication-header": "a"}, DedupConfirmDefault, DedupConfirmDefault, DedupConfirmDefault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.set.Resolve(props(tc.header), tc.def); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
	for s, want := range map[string]bool{"ack": true, "nack": true, "ACK": false, "": false} {
		if _, ok := ParseDedupConfirm(s); ok != want {
			t.Errorf("ParseDedupConfirm(%q) ok %v", s, ok)
		}
	}
}
