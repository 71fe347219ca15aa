package exchange

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
)

func TestHeadersMatch(t *testing.T) {
	ts := time.Unix(1700000000, 0)
	tests := []struct {
		name    string
		args    amqp.Table
		headers amqp.Table
		want    bool
	}{
		{"all default", amqp.Table{"a": "1", "b": "2"}, amqp.Table{"a": "1", "b": "2", "c": "3"}, true},
		{"all missing one", amqp.Table{"a": "1", "b": "2"}, amqp.Table{"a": "1"}, false},
		{"all wrong value", amqp.Table{"x-match": "all", "a": "1", "b": "2"}, amqp.Table{"a": "1", "b": "3"}, false},
		{"all nil headers", amqp.Table{"a": "1"}, nil, false},
		{"any one matches", amqp.Table{"x-match": "any", "a": "1", "b": "2"}, amqp.Table{"b": "2"}, true},
		{"any none match", amqp.Table{"x-match": "any", "a": "1", "b": "2"}, amqp.Table{"a": "2", "c": "1"}, false},
		{"all no args", amqp.Table{"x-match": "all"}, nil, true},
		{"nil args", nil, amqp.Table{"a": 1}, true},
		{"any no args", amqp.Table{"x-match": "any"}, amqp.Table{"a": 1}, false},
		{"all only x args", amqp.Table{"x-foo": "y"}, nil, true},
		{"any only x args", amqp.Table{"x-match": "any", "x-foo": "y"}, amqp.Table{"x-foo": "y"}, false},
		{"void matches presence", amqp.Table{"a": nil}, amqp.Table{"a": "anything"}, true},
		{"void matches void", amqp.Table{"a": nil}, amqp.Table{"a": nil}, true},
		{"void needs presence", amqp.Table{"a": nil}, amqp.Table{"b": 1}, false},
		{"void any", amqp.Table{"x-match": "any", "a": nil, "b": int32(2)}, amqp.Table{"a": int64(5)}, true},
		{"void header, valued binding", amqp.Table{"a": "x"}, amqp.Table{"a": nil}, false},
		{"x- args ignored", amqp.Table{"x-match": "all", "x-foo": "y", "a": "1"}, amqp.Table{"a": "1"}, true},
		{"all-with-x uses x- args", amqp.Table{"x-match": "all-with-x", "x-foo": "y"}, amqp.Table{"x-foo": "y"}, true},
		{"all-with-x x- arg missing", amqp.Table{"x-match": "all-with-x", "x-foo": "y", "a": "1"}, amqp.Table{"a": "1"}, false},
		{"all-with-x ignores x-match", amqp.Table{"x-match": "all-with-x", "a": "1"}, amqp.Table{"a": "1"}, true},
		{"any-with-x x- arg matches", amqp.Table{"x-match": "any-with-x", "x-foo": "y", "a": "1"}, amqp.Table{"x-foo": "y"}, true},
		{"any-with-x nothing", amqp.Table{"x-match": "any-with-x", "x-foo": "y"}, amqp.Table{"x-foo": "z"}, false},
		{"any ignores x- header", amqp.Table{"x-match": "any", "x-foo": "y"}, amqp.Table{"x-foo": "y"}, false},
		{"unknown x-match is all", amqp.Table{"x-match": "bogus", "a": "1", "b": "2"}, amqp.Table{"a": "1"}, false},
		{"non-string x-match is all", amqp.Table{"x-match": []byte("any"), "a": "1", "b": "2"}, amqp.Table{"a": "1"}, false},
		{"int widths", amqp.Table{"a": int32(5), "b": uint8(7)}, amqp.Table{"a": int64(5), "b": int16(7)}, true},
		{"int vs int64", amqp.Table{"a": 5}, amqp.Table{"a": int64(5)}, true},
		{"uint32 max", amqp.Table{"a": uint32(math.MaxUint32)}, amqp.Table{"a": int64(math.MaxUint32)}, true},
		{"negative vs unsigned", amqp.Table{"a": int8(-1)}, amqp.Table{"a": uint8(255)}, false},
		{"int vs float", amqp.Table{"a": int32(5)}, amqp.Table{"a": 5.0}, true},
		{"float vs fraction", amqp.Table{"a": 5.5}, amqp.Table{"a": int32(5)}, false},
		{"float32 vs float64", amqp.Table{"a": float32(0.5)}, amqp.Table{"a": 0.5}, true},
		{"float32 rounding", amqp.Table{"a": float32(0.1)}, amqp.Table{"a": 0.1}, false},
		{"string vs bytes", amqp.Table{"a": "abc"}, amqp.Table{"a": []byte("abc")}, true},
		{"bytes vs string", amqp.Table{"a": []byte("abc")}, amqp.Table{"a": "abc"}, true},
		{"string vs int", amqp.Table{"a": "1"}, amqp.Table{"a": 1}, false},
		{"bool", amqp.Table{"a": true}, amqp.Table{"a": true}, true},
		{"bool vs int", amqp.Table{"a": true}, amqp.Table{"a": 1}, false},
		{"decimal", amqp.Table{"a": amqp.Decimal{Scale: 2, Value: 150}}, amqp.Table{"a": amqp.Decimal{Scale: 2, Value: 150}}, true},
		{"decimal scale differs", amqp.Table{"a": amqp.Decimal{Scale: 1, Value: 15}}, amqp.Table{"a": amqp.Decimal{Scale: 2, Value: 150}}, false},
		{"timestamp", amqp.Table{"a": ts}, amqp.Table{"a": ts.Add(300 * time.Millisecond)}, true},
		{"timestamp is its seconds", amqp.Table{"a": int64(1700000000)}, amqp.Table{"a": ts}, true},
		{"array", amqp.Table{"a": []any{int32(1), "x"}}, amqp.Table{"a": []any{int32(1), "x"}}, true},
		{"array element types differ", amqp.Table{"a": []any{int32(1)}}, amqp.Table{"a": []any{int64(1)}}, false},
		{"array length differs", amqp.Table{"a": []any{int32(1)}}, amqp.Table{"a": []any{int32(1), int32(1)}}, false},
		{"table", amqp.Table{"a": amqp.Table{"k": "v", "n": nil}}, amqp.Table{"a": amqp.Table{"n": nil, "k": "v"}}, true},
		{"table value type differs", amqp.Table{"a": amqp.Table{"k": "v"}}, amqp.Table{"a": amqp.Table{"k": []byte("v")}}, false},
		{"table vs array", amqp.Table{"a": amqp.Table{}}, amqp.Table{"a": []any{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New("h", Headers, false, false, false, nil)
			e.Bind(Binding{Dest: q("q"), Args: tt.args})
			got := len(e.Route("ignored", tt.headers, nil)) == 1
			if got != tt.want {
				t.Fatalf("match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHeadersDedupe(t *testing.T) {
	e := New("h", Headers, false, false, false, nil)
	e.Bind(Binding{Dest: q("q1"), Args: amqp.Table{"a": "1"}})
	e.Bind(Binding{Dest: q("q1"), Args: amqp.Table{"b": "2"}})
	e.Bind(Binding{Dest: q("q2"), Args: amqp.Table{"x-match": "any", "a": "1"}})
	e.Bind(Binding{Dest: q("q3"), Args: amqp.Table{"a": "2"}})
	got := e.Route("", amqp.Table{"a": "1", "b": "2"}, nil)
	if len(got) != 2 || got[0] != q("q1") || got[1] != q("q2") {
		t.Fatalf("Route = %v, want [q1 q2]", got)
	}
}

func TestValidateBinding(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		args amqp.Table
		ok   bool
	}{
		{"no x-match", Headers, amqp.Table{"a": 1}, true},
		{"all", Headers, amqp.Table{"x-match": "all"}, true},
		{"any", Headers, amqp.Table{"x-match": "any"}, true},
		{"all-with-x", Headers, amqp.Table{"x-match": "all-with-x"}, true},
		{"any-with-x", Headers, amqp.Table{"x-match": "any-with-x"}, true},
		{"bad value", Headers, amqp.Table{"x-match": "some"}, false},
		{"bad type", Headers, amqp.Table{"x-match": []byte("any")}, false},
		{"void", Headers, amqp.Table{"x-match": nil}, false},
		{"other kinds unchecked", Topic, amqp.Table{"x-match": "some"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateBinding(tt.kind, "", tt.args)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok %v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidArgs) {
				t.Fatalf("err %v does not wrap ErrInvalidArgs", err)
			}
		})
	}
}
