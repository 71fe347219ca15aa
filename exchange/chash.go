package exchange

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/railmq/railmq/amqp"
)

// A consistent-hash exchange (x-consistent-hash) routes each message to
// one destination, chosen by a hash of its routing key, of a header
// (hash-header) or of a property (hash-property). It follows RabbitMQ's
// rabbitmq_consistent_hash_exchange plugin (3.10, read from
// rabbit_exchange_type_consistent_hash.erl):
//
//   - A binding's key is its weight, a positive integer: the destination
//     takes that many consecutive buckets at the end of the ring. Buckets
//     are numbered 0..N-1 in the order destinations were bound.
//   - A destination already on the ring is not added again: a second
//     binding to it (another weight) changes nothing.
//   - Removing any binding to a destination removes its buckets, even if
//     another binding to it is left, and the buckets after them move down.
//   - A message goes to bucket jump_consistent_hash(phash2(Term), N), where
//     Term is the routing key (the first one: CC and BCC keys take no
//     part), {Type, Value} of the header, or the property's value (a
//     timestamp as its decimal text); a missing header or property hashes
//     as the atom undefined, so all such messages go to one destination.
//
// With jump hashing, adding a destination at the end of the ring moves
// only the keys it takes over; removing one moves its keys and reshuffles
// the keys of the buckets after it, as in the plugin.

// hashOn is what a consistent-hash exchange hashes a message on.
type hashOn struct {
	mode uint8  // hashRoutingKey, hashHeader or hashProperty
	name string // the header's name
	prop uint16 // the property's flag
}

const (
	hashRoutingKey uint8 = iota
	hashHeader
	hashProperty
)

func parseHashOn(args amqp.Table) hashOn {
	if h, ok := args["hash-header"].(string); ok {
		return hashOn{mode: hashHeader, name: h}
	}
	if p, ok := args["hash-property"].(string); ok {
		return hashOn{mode: hashProperty, prop: hashProperties[p]}
	}
	return hashOn{}
}

// hashProperties are the properties hash-property may name.
var hashProperties = map[string]uint16{
	"correlation_id": amqp.FlagCorrelationID,
	"message_id":     amqp.FlagMessageID,
	"timestamp":      amqp.FlagTimestamp,
}

// ErrUnhashable marks a hash-header or hash-property argument that is not a
// longstr. The plugin does not expect one and crashes on the declare,
// which RabbitMQ reports as 541 INTERNAL_ERROR and closes the connection.
var ErrUnhashable = errors.New("consistent-hash argument is not a longstr")

// argsError is a refusal worded as the plugin words it, which the
// channel sends as is (406 PRECONDITION_FAILED - text).
type argsError struct{ text string }

func (e *argsError) Error() string { return e.text }
func (e *argsError) Unwrap() error { return ErrInvalidArgs }

func argsErrorf(format string, args ...any) error {
	return &argsError{text: fmt.Sprintf(format, args...)}
}

// ValidateArgs checks a new exchange's arguments as the exchange type does
// (the plugin's validate/1). Only consistent-hash exchanges check
// anything: hash-header and hash-property are exclusive, and
// hash-property must name correlation_id, message_id or timestamp. The
// error wraps ErrInvalidArgs, or is ErrUnhashable.
func ValidateArgs(k Kind, args amqp.Table) error {
	if k != ConsistentHash {
		return nil
	}
	h, hasH := args["hash-header"]
	p, hasP := args["hash-property"]
	if _, ok := h.(string); hasH && !ok {
		return ErrUnhashable
	}
	ps, ok := p.(string)
	if hasP && !ok {
		return ErrUnhashable
	}
	switch {
	case hasH && hasP:
		return argsErrorf("hash-header and hash-property are mutually exclusive")
	case hasP && hashProperties[ps] == 0:
		return argsErrorf("Unsupported property: %s", ps)
	}
	return nil
}

// maxWeight bounds a binding's weight. The plugin takes any integer and
// builds a map entry per bucket, so a weight in the billions takes a
// RabbitMQ node down; railmq keeps one entry per binding, but refuses
// weights no RabbitMQ could serve rather than pretend to.
const maxWeight = 1 << 24

// validateWeight is the plugin's validate_binding: the key must be a
// decimal integer (an optional sign, digits only) of at least 1.
func validateWeight(key string) error {
	w, err := strconv.ParseInt(key, 10, 64)
	if err != nil && !isInteger(key) {
		return argsErrorf("The binding key must be an integer: %s", amqp.ErlBinary([]byte(key)))
	}
	switch {
	case err == nil && w < 1 || err != nil && key[0] == '-':
		return argsErrorf("The binding key must be greater than 0")
	case err != nil || w > maxWeight:
		return argsErrorf("The binding key must be at most %d", maxWeight)
	}
	return nil
}

// isInteger reports whether s is what Erlang's binary_to_integer takes:
// an optional sign and at least one decimal digit (of any length).
func isInteger(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ring is a consistent-hash exchange's buckets: each destination's range
// ends at end (exclusive) and starts where the one before it ends. It is
// immutable once in a snapshot; add and remove return a new one.
type ring []ringEntry

type ringEntry struct {
	dest Dest
	end  int64
}

func (r ring) buckets() int64 {
	if len(r) == 0 {
		return 0
	}
	return r[len(r)-1].end
}

// add puts d at the end of the ring with key's weight, unless d is on it
// already. The key was validated.
func (r ring) add(d Dest, key string) ring {
	if slices.ContainsFunc(r, func(e ringEntry) bool { return e.dest == d }) {
		return r
	}
	w, _ := strconv.ParseInt(key, 10, 64)
	return append(slices.Clip(r), ringEntry{dest: d, end: r.buckets() + w})
}

// remove takes d's buckets out; the later buckets move down.
func (r ring) remove(d Dest) ring {
	i := slices.IndexFunc(r, func(e ringEntry) bool { return e.dest == d })
	if i < 0 {
		return r
	}
	start := int64(0)
	if i > 0 {
		start = r[i-1].end
	}
	w := r[i].end - start
	out := make(ring, 0, len(r)-1)
	out = append(out, r[:i]...)
	for _, e := range r[i+1:] {
		out = append(out, ringEntry{dest: e.dest, end: e.end - w})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// route appends the destination of the bucket the message hashes to.
// headers is the encoded headers table (its body) and props the encoded
// properties (flags first), either may be nil.
func (r ring) route(on hashOn, key string, headers, props []byte, out []Dest) []Dest {
	n := r.buckets()
	if n == 0 {
		return out
	}
	var k uint32
	switch on.mode {
	case hashRoutingKey:
		k = hashBinary(key)
	case hashHeader:
		k = hashHeaderValue(headers, on.name)
	default:
		k = hashPropertyValue(props, on.prop)
	}
	b := jumpBucket(k, n)
	lo, hi := 0, len(r)-1 // the first entry that ends after b
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r[m].end <= b {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return append(out, r[lo].dest)
}

// hashHeaderValue is phash2 of rabbit_misc:table_lookup(Headers, Name):
// {Type, Value} of the first field of that name, or undefined.
func hashHeaderValue(p []byte, name string) uint32 {
	for len(p) > 0 {
		n := int(p[0])
		if len(p) < 1+n {
			break
		}
		field, rest := string(p[1:1+n]), p[1+n:]
		if field == name {
			var t termHash
			if _, ok := t.hashField(rest); ok {
				return phash2(t.h)
			}
			break
		}
		var skip termHash
		var ok bool
		if p, ok = skip.hashField(rest); !ok {
			break
		}
	}
	return phash2(atomUndefined)
}

// hashPropertyValue is phash2 of a correlation_id, message_id or (as its
// decimal text) timestamp property, or of undefined without it.
func hashPropertyValue(props []byte, flag uint16) uint32 {
	v, ok := amqp.PropertyField(props, flag)
	if !ok {
		return phash2(atomUndefined)
	}
	if flag == amqp.FlagTimestamp {
		var buf [20]byte
		return hashBinary(timestampText(&buf, binary.BigEndian.Uint64(v)))
	}
	return hashBinary(v)
}

// RouteContent is Route for a consistent-hash exchange, which may hash a
// header or a property: headers is the message's encoded headers table
// (its body, without the length) and props its encoded properties (flags
// first); either may be nil. Other kinds route as Route does without
// headers. It does not allocate when out has room.
func (e *Exchange) RouteContent(key string, headers, props []byte, out []Dest) []Dest {
	s := e.snap.Load()
	if s.kind != ConsistentHash {
		return e.Route(key, nil, out)
	}
	return s.ring.route(e.hashOn, key, headers, props, out)
}
