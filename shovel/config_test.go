package shovel

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParse: RabbitMQ's dynamic shovel keys, defaults and validation
// (rabbit_shovel_parameters.erl, v3.10.8).
func TestParse(t *testing.T) {
	base := func(kv ...any) map[string]any {
		m := map[string]any{"src-uri": "amqp://a", "src-queue": "q", "dest-uri": "amqp://b"}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
				continue
			}
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	t.Run("defaults", func(t *testing.T) {
		c, err := Parse(base())
		if err != nil {
			t.Fatal(err)
		}
		if c.AckMode != OnConfirm || c.SrcPrefetchCount != 1000 || c.ReconnectDelay != 5*time.Second ||
			c.SrcDeleteAfter != Never || c.DestExchangeKey != nil || len(c.SrcURIs) != 1 || len(c.DestURIs) != 1 {
			t.Fatalf("defaults: %+v", c)
		}
	})
	t.Run("everything", func(t *testing.T) {
		c, err := Parse(map[string]any{
			"src-protocol": "amqp091", "dest-protocol": "amqp091",
			"src-uri":      []any{"amqp://u:p@a:5672/v", "amqps://b?cacertfile=/x&verify=verify_peer&server_name_indication=b"},
			"src-exchange": "x", "src-exchange-key": "k", "src-prefetch-count": float64(50),
			"src-delete-after": float64(10), "dest-uri": "amqp:///v2", "dest-exchange": "y",
			"dest-exchange-key": "", "dest-add-forward-headers": true, "dest-add-timestamp-header": true,
			"dest-publish-properties": map[string]any{"delivery_mode": float64(2), "app_id": "a"},
			"ack-mode":                "on-publish", "reconnect-delay": 0.5, "dest-queue-args": map[string]any{"x-message-ttl": float64(1000)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.SrcURIs) != 2 || c.SrcExchange != "x" || c.SrcExchangeKey != "k" || c.SrcPrefetchCount != 50 ||
			c.SrcDeleteAfter.Count != 10 || c.DestExchange != "y" || c.DestExchangeKey == nil || *c.DestExchangeKey != "" ||
			!c.DestAddForwardHeaders || !c.DestAddTimestampHeader || c.AckMode != OnPublish ||
			c.ReconnectDelay != 500*time.Millisecond || c.DestQueueArgs["x-message-ttl"] != int64(1000) {
			t.Fatalf("parsed: %+v", c)
		}
	})
	t.Run("legacy names", func(t *testing.T) {
		c, err := Parse(base("prefetch-count", float64(7), "delete-after", "queue-length", "add-forward-headers", true))
		if err != nil {
			t.Fatal(err)
		}
		if c.SrcPrefetchCount != 7 || !c.SrcDeleteAfter.QueueLength || !c.DestAddForwardHeaders {
			t.Fatalf("parsed: %+v", c)
		}
	})
	for _, tc := range []struct {
		name string
		def  map[string]any
		want string
	}{
		{"no source", base("src-queue", nil), "Must specify 'src-exchange' or 'src-queue'"},
		{"both sources", base("src-exchange", "x"), "Cannot specify 'src-exchange' and 'src-queue'"},
		{"both dests", base("dest-queue", "a", "dest-exchange", "b"), "Cannot specify 'dest-exchange' and 'dest-queue'"},
		{"no-ack and a count", base("ack-mode", "no-ack", "src-delete-after", float64(3)), "Cannot specify 'no-ack' and numerical 'delete-after'"},
		{"bad delete-after", base("src-delete-after", "soon"), `src-delete-after should be a number greater than or equal to 0, "never" or "queue-length"`},
		{"negative delete-after", base("src-delete-after", float64(-1)), "src-delete-after should be a number"},
		{"bad ack-mode", base("ack-mode", "later"), "ack-mode should be one of"},
		{"no src-uri", base("src-uri", nil), `Key "src-uri" not found`},
		{"no dest-uri", base("dest-uri", nil), `Key "dest-uri" not found`},
		{"bad uri", base("dest-uri", "http://x"), "not a valid URI"},
		{"bad uri in a list", base("src-uri", []any{"amqp://a", "foo://b"}), "not a valid URI"},
		{"bad verify", base("src-uri", "amqps://a?verify=maybe"), "verify should be"},
		{"number as string", base("src-prefetch-count", "10"), "src-prefetch-count should be a number"},
		{"boolean", base("dest-add-forward-headers", "yes"), "dest-add-forward-headers should be boolean"},
		{"unknown key", base("src-queue-name", "x"), "Unrecognised terms"},
		{"amqp10", base("src-protocol", "amqp10"), "amqp10 is not supported"},
		{"bad property", base("dest-publish-properties", map[string]any{"colour": "red"}), "Unrecognised terms"},
		{"property type", base("dest-publish-properties", map[string]any{"delivery_mode": "2"}), "delivery_mode should be a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.def)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestURIs(t *testing.T) {
	for _, tc := range []struct {
		uri    string
		local  bool
		vhost  string
		redact string
	}{
		{"amqp://", true, "/", "amqp://"},
		{"amqp:///v1", true, "v1", "amqp:///v1"},
		{"amqp://u:p@h:5673/%2f", false, "/", "amqp://h:5673/%2f"},
		{"amqps://u@h/v?cacertfile=/c.pem", false, "v", "amqps://h/v?cacertfile=/c.pem"},
	} {
		if got := IsLocal(tc.uri); got != tc.local {
			t.Errorf("IsLocal(%q) = %v", tc.uri, got)
		}
		if got := Vhost(tc.uri); got != tc.vhost {
			t.Errorf("Vhost(%q) = %q, want %q", tc.uri, got, tc.vhost)
		}
		if got := Redact(tc.uri); got != tc.redact {
			t.Errorf("Redact(%q) = %q, want %q", tc.uri, got, tc.redact)
		}
	}
	if _, err := (AMQPDialer{}).Dial(t.Context(), "amqp:///v", "Shovel s"); !errors.Is(err, ErrLocalURI) {
		t.Fatalf("local URI: %v", err)
	}
}
