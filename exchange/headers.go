package exchange

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/railmq/railmq/amqp"
)

// hbinding is a headers-exchange binding compiled at Bind time: the x-match
// mode and the argument pairs that take part in matching, so Route does not
// re-read the argument table or re-parse x-match per message.
type hbinding struct {
	id   string // bindingID, to find it again on Unbind
	dest Dest
	any  bool // x-match any / any-with-x; otherwise all
	args []harg
}

type harg struct {
	key  string
	val  any
	void bool // a void binding value matches on the header's presence alone
}

// compileHeaders follows rabbit_exchange_type_headers: x-match itself never
// takes part; other x- arguments do only under all-with-x and any-with-x. An
// x-match that is not a string, or not one of the four values, means all
// (RabbitMQ's legacy fallback; ValidateBinding rejects such bindings first).
func compileHeaders(id string, b Binding) hbinding {
	h := hbinding{id: id, dest: b.Dest}
	withX := false
	if s, ok := b.Args["x-match"].(string); ok {
		switch s {
		case "any":
			h.any = true
		case "all-with-x":
			withX = true
		case "any-with-x":
			h.any, withX = true, true
		}
	}
	for k, v := range b.Args {
		if k == "x-match" || (!withX && strings.HasPrefix(k, "x-")) {
			continue
		}
		h.args = append(h.args, harg{key: k, val: v, void: v == nil})
	}
	return h
}

// match reports whether headers satisfy the binding. With no arguments left
// after the x- filter, all matches every message and any matches none, as
// RabbitMQ's fold starts from AllMatch=true, AnyMatch=false.
func (h *hbinding) match(headers amqp.Table) bool {
	if h.any {
		for i := range h.args {
			a := &h.args[i]
			if v, ok := headers[a.key]; ok && (a.void || headerEqual(a.val, v)) {
				return true
			}
		}
		return false
	}
	for i := range h.args {
		a := &h.args[i]
		v, ok := headers[a.key]
		if !ok || !(a.void || headerEqual(a.val, v)) {
			return false
		}
	}
	return true
}

// headerEqual is Erlang's == on the decoded values, which is what RabbitMQ
// applies to a binding value and a header value (PV == DV): the wire type is
// dropped, so any two numbers are compared by numeric value (int32 5 ==
// int64 5 == float 5.0; a timestamp is its integer seconds), and a longstr
// equals a byte array with the same bytes. Inside arrays and nested tables
// Erlang compares {Type, Value} pairs, so there the wire types must agree
// too (strictEqual).
func headerEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		switch y := b.(type) {
		case string:
			return x == y
		case []byte:
			return x == string(y)
		}
		return false
	case []byte:
		switch y := b.(type) {
		case string:
			return string(x) == y
		case []byte:
			return string(x) == string(y)
		}
		return false
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case amqp.Decimal:
		y, ok := b.(amqp.Decimal)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !strictEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case amqp.Table:
		y, ok := b.(amqp.Table)
		if !ok || len(x) != len(y) {
			return false
		}
		// Erlang compares nested tables as lists in wire order; a Go map
		// has no order, so compare them as sets of pairs.
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !strictEqual(xv, yv) {
				return false
			}
		}
		return true
	}
	ai, af, ak := number(a)
	bi, bf, bk := number(b)
	switch {
	case ak == notNumber || bk == notNumber:
		return false
	case ak == isInt && bk == isInt:
		return ai == bi
	case ak == isFloat && bk == isFloat:
		return af == bf
	case ak == isInt:
		return intEqualsFloat(ai, bf)
	default:
		return intEqualsFloat(bi, af)
	}
}

// strictEqual compares an element of an array or nested table, where
// RabbitMQ keeps the {Type, Value} pair and so the types must match.
func strictEqual(a, b any) bool {
	return wireTag(a) == wireTag(b) && headerEqual(a, b)
}

type numKind uint8

const (
	notNumber numKind = iota
	isInt
	isFloat
)

func number(v any) (int64, float64, numKind) {
	if n, ok := amqp.Int(v); ok {
		return n, 0, isInt
	}
	switch v := v.(type) {
	case time.Time:
		return v.Unix(), 0, isInt
	case float32:
		return 0, float64(v), isFloat
	case float64:
		return 0, v, isFloat
	}
	return 0, 0, notNumber
}

// intEqualsFloat compares exactly, as Erlang does for integers beyond 2^53,
// instead of rounding i to a float64.
func intEqualsFloat(i int64, f float64) bool {
	if f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return false // also NaN and ±Inf
	}
	return int64(f) == i
}

// ValidateBinding reports whether RabbitMQ would accept a binding with key
// and args on an exchange of kind k. Headers exchanges check x-match: when
// present, it must be the string all, any, all-with-x or any-with-x
// (rabbit_exchange_type_headers validate_binding). Consistent-hash
// exchanges check that the key is a weight (validateWeight). The error
// wraps ErrInvalidArgs. Bind itself accepts anything, so callers validate
// first.
func ValidateBinding(k Kind, key string, args amqp.Table) error {
	if k == ConsistentHash {
		return validateWeight(key)
	}
	if k != Headers {
		return nil
	}
	v, ok := args["x-match"]
	if !ok {
		return nil
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%w: invalid x-match field type %c; expected longstr", ErrInvalidArgs, wireTag(v))
	}
	switch s {
	case "all", "any", "all-with-x", "any-with-x":
		return nil
	}
	return fmt.Errorf("%w: invalid x-match field value %q; expected all, any, all-with-x, or any-with-x", ErrInvalidArgs, s)
}
