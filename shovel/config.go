package shovel

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
)

// AckMode says when a source message is acknowledged (RabbitMQ's
// ack-mode).
type AckMode string

// The ack modes, as RabbitMQ spells them.
const (
	// OnConfirm acks a source message after the destination confirmed its
	// publish: at-least-once. The default.
	OnConfirm AckMode = "on-confirm"
	// OnPublish acks a source message once it is published.
	OnPublish AckMode = "on-publish"
	// NoAck consumes with auto-ack.
	NoAck AckMode = "no-ack"
)

// DeleteAfter is src-delete-after: never, queue-length (the source
// queue's length when the shovel starts) or a count.
type DeleteAfter struct {
	QueueLength bool
	Count       int64 // -1: never
}

// Never is src-delete-after "never", the default.
var Never = DeleteAfter{Count: -1}

// String is the value as RabbitMQ writes it.
func (d DeleteAfter) String() string {
	switch {
	case d.QueueLength:
		return "queue-length"
	case d.Count < 0:
		return "never"
	}
	return fmt.Sprint(d.Count)
}

// Defaults, as rabbit_shovel_parameters.erl.
const (
	DefaultPrefetchCount  = 1000
	DefaultReconnectDelay = 5 * time.Second
)

// Config is a dynamic shovel's definition (src-protocol and dest-protocol
// amqp091 only).
type Config struct {
	SrcURIs          []string // tried in order
	SrcQueue         string
	SrcExchange      string // with SrcExchangeKey, when SrcQueue is ""
	SrcExchangeKey   string
	SrcQueueArgs     rmq.Table // declare arguments if the queue is missing
	SrcConsumerArgs  rmq.Table
	SrcPrefetchCount int
	SrcDeleteAfter   DeleteAfter

	DestURIs        []string
	DestQueue       string
	DestExchange    string
	DestExchangeKey *string // nil: the message's own routing key
	DestQueueArgs   rmq.Table
	// DestAddForwardHeaders adds the x-shovelled header,
	// DestAddTimestampHeader x-shovelled-timestamp.
	DestAddForwardHeaders  bool
	DestAddTimestampHeader bool
	// DestPublishProperties overrides basic properties (content_type,
	// delivery_mode, ...), as RabbitMQ's dest-publish-properties.
	DestPublishProperties map[string]any

	AckMode        AckMode
	ReconnectDelay time.Duration // 0: never reconnect (RabbitMQ's temporary child)
}

// ErrInvalid wraps every validation error of Parse.
var ErrInvalid = errors.New("invalid shovel definition")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// known lists the keys Parse accepts: RabbitMQ's amqp091 keys, the
// pre-3.7 names among them.
var known = map[string]bool{
	"src-protocol": true, "dest-protocol": true, "src-uri": true, "src-queue": true,
	"src-exchange": true, "src-exchange-key": true, "src-queue-args": true,
	"src-consumer-args": true, "src-prefetch-count": true, "prefetch-count": true,
	"src-delete-after": true, "delete-after": true, "dest-uri": true, "dest-queue": true,
	"dest-exchange": true, "dest-exchange-key": true, "dest-queue-args": true,
	"dest-add-forward-headers": true, "add-forward-headers": true,
	"dest-add-timestamp-header": true, "add-timestamp-header": true,
	"dest-publish-properties": true, "publish-properties": true,
	"ack-mode": true, "reconnect-delay": true,
}

// Parse validates a shovel's value as RabbitMQ's PUT
// /api/parameters/shovel/{vhost}/{name} takes it (JSON decoded into
// map[string]any, numbers as float64) and fills the defaults. The error
// texts are rabbit_shovel_parameters.erl's and
// rabbit_parameter_validation.erl's (v3.10.8).
func Parse(def map[string]any) (Config, error) {
	var unknown []string
	for k := range def {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, invalid("Unrecognised terms %s in shovel", strings.Join(unknown, ", "))
	}
	p := parser{def: def}
	for _, k := range []string{"src-protocol", "dest-protocol"} {
		if v, ok := p.str(k); ok && v != "amqp091" {
			if v == "amqp10" {
				return Config{}, invalid("%s amqp10 is not supported", k)
			}
			return Config{}, invalid("%s should be one of [amqp10,amqp091], actually was %q", k, v)
		}
	}
	c := Config{SrcDeleteAfter: Never, AckMode: OnConfirm, SrcPrefetchCount: DefaultPrefetchCount, ReconnectDelay: DefaultReconnectDelay}
	c.SrcURIs = p.uris("src-uri")
	c.DestURIs = p.uris("dest-uri")
	c.SrcQueue, _ = p.str("src-queue")
	c.SrcExchange, _ = p.str("src-exchange")
	c.SrcExchangeKey, _ = p.str("src-exchange-key")
	c.DestQueue, _ = p.str("dest-queue")
	c.DestExchange, _ = p.str("dest-exchange")
	if k, ok := p.str("dest-exchange-key"); ok {
		c.DestExchangeKey = &k
	}
	c.SrcQueueArgs = p.table("src-queue-args")
	c.SrcConsumerArgs = p.table("src-consumer-args")
	c.DestQueueArgs = p.table("dest-queue-args")
	if n, ok := p.num(p.either("src-prefetch-count", "prefetch-count")); ok {
		c.SrcPrefetchCount = int(n)
	}
	c.SrcDeleteAfter = p.deleteAfter(p.either("src-delete-after", "delete-after"))
	c.DestAddForwardHeaders, _ = p.boolean(p.either("dest-add-forward-headers", "add-forward-headers"))
	c.DestAddTimestampHeader, _ = p.boolean(p.either("dest-add-timestamp-header", "add-timestamp-header"))
	c.DestPublishProperties = p.properties(p.either("dest-publish-properties", "publish-properties"))
	if m, ok := p.str("ack-mode"); ok {
		switch AckMode(m) {
		case OnConfirm, OnPublish, NoAck:
			c.AckMode = AckMode(m)
		default:
			p.fail("ack-mode should be one of [no-ack,on-publish,on-confirm], actually was %q", m)
		}
	}
	if d, ok := p.num("reconnect-delay"); ok {
		c.ReconnectDelay = time.Duration(d * float64(time.Second))
	}
	if p.err != nil {
		return Config{}, p.err
	}
	return c, c.validate()
}

// validate checks what rabbit_shovel_parameters.erl checks across keys.
func (c Config) validate() error {
	switch {
	case c.SrcQueue == "" && c.SrcExchange == "":
		return invalid("Must specify 'src-exchange' or 'src-queue'")
	case c.SrcQueue != "" && c.SrcExchange != "":
		return invalid("Cannot specify 'src-exchange' and 'src-queue'")
	case c.DestQueue != "" && c.DestExchange != "":
		return invalid("Cannot specify 'dest-exchange' and 'dest-queue'")
	case c.AckMode == NoAck && !c.SrcDeleteAfter.QueueLength && c.SrcDeleteAfter.Count >= 0:
		return invalid("Cannot specify 'no-ack' and numerical 'delete-after'")
	case c.SrcPrefetchCount < 0 || c.SrcPrefetchCount > math.MaxUint16:
		return invalid("src-prefetch-count should be between 0 and %d, actually was %d", math.MaxUint16, c.SrcPrefetchCount)
	case c.SrcQueue == "" && c.SrcDeleteAfter.QueueLength:
		return invalid("src-delete-after queue-length needs 'src-queue'")
	}
	for _, u := range append(append([]string{}, c.SrcURIs...), c.DestURIs...) {
		if _, err := ParseURI(u); err != nil {
			return invalid("%q not a valid URI: %v", u, err)
		}
	}
	return nil
}

// parser reads one definition, keeping the first error.
type parser struct {
	def map[string]any
	err error
}

func (p *parser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = invalid(format, args...)
	}
}

// either is the first of the keys present (the current name, then the
// pre-3.7 one).
func (p *parser) either(keys ...string) string {
	for _, k := range keys {
		if _, ok := p.def[k]; ok {
			return k
		}
	}
	return keys[0]
}

func (p *parser) str(k string) (string, bool) {
	v, ok := p.def[k]
	if !ok {
		return "", false
	}
	s, isStr := v.(string)
	if !isStr {
		p.fail("%s should be binary, actually was %v", k, v)
	}
	return s, isStr
}

func (p *parser) num(k string) (float64, bool) {
	v, ok := p.def[k]
	if !ok {
		return 0, false
	}
	n, isNum := number(v)
	if !isNum {
		p.fail("%s should be a number, actually was %v", k, v)
	}
	return n, isNum
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}

func (p *parser) boolean(k string) (bool, bool) {
	v, ok := p.def[k]
	if !ok {
		return false, false
	}
	b, isBool := v.(bool)
	if !isBool {
		p.fail("%s should be boolean, actually was %v", k, v)
	}
	return b, isBool
}

// uris is src-uri or dest-uri: one URI or a non-empty list (mandatory).
func (p *parser) uris(k string) []string {
	switch v := p.def[k].(type) {
	case nil:
		p.fail("Key %q not found in shovel", k)
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, u := range v {
			s, ok := u.(string)
			if !ok {
				p.fail("%s should be binary, actually was %v", k, u)
				return nil
			}
			out = append(out, s)
		}
		if len(out) == 0 {
			p.fail("%s should not be an empty list", k)
		}
		return out
	case []string:
		return v
	default:
		p.fail("%s should be a list, actually was %v", k, v)
	}
	return nil
}

func (p *parser) deleteAfter(k string) DeleteAfter {
	v, ok := p.def[k]
	if !ok {
		return Never
	}
	switch v {
	case "never":
		return Never
	case "queue-length":
		return DeleteAfter{QueueLength: true}
	}
	if n, isNum := number(v); isNum && n >= 0 && n == math.Trunc(n) {
		return DeleteAfter{Count: int64(n)}
	}
	p.fail("%s should be a number greater than or equal to 0, \"never\" or \"queue-length\", actually was %v", k, v)
	return Never
}

// table converts a JSON object to AMQP arguments: integral numbers become
// int64 (x-message-ttl and the like are integers on the wire).
func (p *parser) table(k string) rmq.Table {
	v, ok := p.def[k]
	if !ok {
		return nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		p.fail("%s should be a table, actually was %v", k, v)
		return nil
	}
	t := rmq.Table{}
	for key, val := range m {
		t[key] = tableValue(val)
	}
	return t
}

func tableValue(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
	case map[string]any:
		t := rmq.Table{}
		for k, val := range x {
			t[k] = tableValue(val)
		}
		return t
	case []any:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = tableValue(val)
		}
		return out
	}
	return v
}

// publishProps are the keys dest-publish-properties accepts, with whether
// each is a number (rabbit_shovel_parameters.erl validate_properties).
var publishProps = map[string]bool{
	"content_type": false, "content_encoding": false, "delivery_mode": true,
	"priority": true, "correlation_id": false, "reply_to": false,
	"expiration": false, "message_id": false, "timestamp": true, "type": false,
	"user_id": false, "app_id": false, "cluster_id": false,
}

func (p *parser) properties(k string) map[string]any {
	v, ok := p.def[k]
	if !ok {
		return nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		p.fail("%s should be a table, actually was %v", k, v)
		return nil
	}
	for key, val := range m {
		isNum, known := publishProps[key]
		if !known {
			p.fail("Unrecognised terms [%s] in %s", key, k)
			continue
		}
		if _, num := number(val); isNum && !num {
			p.fail("%s should be a number, actually was %v", key, val)
		}
		if _, str := val.(string); !isNum && !str {
			p.fail("%s should be binary, actually was %v", key, val)
		}
	}
	return m
}
