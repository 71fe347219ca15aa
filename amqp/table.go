package amqp

import (
	"encoding/binary"
	"math"
	"slices"
	"time"
)

// Table is an AMQP field table. Keys are short strings; values are one of
// the Go types listed on Value. Each Go type maps to exactly one wire tag,
// so a decoded table encodes back to the same bytes (apart from key order:
// AppendTable sorts by name, as RabbitMQ does; messages are forwarded as
// the client encoded them, never re-encoded without need).
type Table map[string]any

// Decimal is the AMQP decimal-value ('D'): Value / 10^Scale.
type Decimal struct {
	Scale uint8
	Value int32
}

// Field value tags as RabbitMQ and Qpid use them (errata: 's' is int16,
// 'l' is int64, 'x' is a byte array).
//
//	't' bool      'b' int8     'B' uint8   's' int16   'u' uint16
//	'I' int32     'i' uint32   'l' int64   'f' float32 'd' float64
//	'D' Decimal   'S' string   'A' []any   'T' time.Time
//	'F' Table     'V' nil      'x' []byte
const maxNesting = 64

// AppendTable appends t, length-prefixed, to b. Values of a type that has
// no AMQP tag are encoded as void ('V'): tables built by railmq only hold
// the types above.
//
// Fields go out sorted by name, as RabbitMQ writes the tables it builds or
// changes (rabbit_misc:sort_field_table): the same table always encodes
// the same way, never in Go's map order.
func AppendTable(b []byte, t Table) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	var arr [16]string
	keys := arr[:0]
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendShortstr(b, k)
		b = appendFieldValue(b, t[k])
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// Field is one name and value of an OrderedTable.
type Field struct {
	Name  string
	Value any
}

// OrderedTable is a field table encoded in the order of its fields, for
// the tables whose order RabbitMQ fixes (x-death entries). It decodes as
// a Table.
type OrderedTable []Field

func appendOrderedTable(b []byte, t OrderedTable) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	for _, f := range t {
		b = appendShortstr(b, f.Name)
		b = appendFieldValue(b, f.Value)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

func appendArray(b []byte, a []any) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	for _, v := range a {
		b = appendFieldValue(b, v)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

func appendFieldValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case bool:
		if v {
			return append(b, 't', 1)
		}
		return append(b, 't', 0)
	case int8:
		return append(b, 'b', byte(v))
	case uint8:
		return append(b, 'B', v)
	case int16:
		return binary.BigEndian.AppendUint16(append(b, 's'), uint16(v))
	case uint16:
		return binary.BigEndian.AppendUint16(append(b, 'u'), v)
	case int32:
		return binary.BigEndian.AppendUint32(append(b, 'I'), uint32(v))
	case uint32:
		return binary.BigEndian.AppendUint32(append(b, 'i'), v)
	case int64:
		return binary.BigEndian.AppendUint64(append(b, 'l'), uint64(v))
	case int:
		return binary.BigEndian.AppendUint64(append(b, 'l'), uint64(v))
	case float32:
		return binary.BigEndian.AppendUint32(append(b, 'f'), math.Float32bits(v))
	case float64:
		return binary.BigEndian.AppendUint64(append(b, 'd'), math.Float64bits(v))
	case Decimal:
		return binary.BigEndian.AppendUint32(append(b, 'D', v.Scale), uint32(v.Value))
	case string:
		return appendLongstr(append(b, 'S'), v)
	case []any:
		return appendArray(append(b, 'A'), v)
	case time.Time:
		return binary.BigEndian.AppendUint64(append(b, 'T'), uint64(v.Unix()))
	case Table:
		return AppendTable(append(b, 'F'), v)
	case OrderedTable:
		return appendOrderedTable(append(b, 'F'), v)
	case []byte:
		b = binary.BigEndian.AppendUint32(append(b, 'x'), uint32(len(v)))
		return append(b, v...)
	default:
		return append(b, 'V')
	}
}

func appendShortstr(b []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	b = append(b, byte(len(s)))
	return append(b, s...)
}

func appendLongstr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// DecodeTable decodes a table without its length prefix. Every length is
// checked against the bytes at hand, so no input makes it allocate more
// than len(p) implies.
func DecodeTable(p []byte) (Table, error) {
	return decodeTableBody(p, 0)
}

func decodeTableBody(p []byte, depth int) (Table, error) {
	if depth > maxNesting {
		return nil, errSyntax("field table nested too deeply")
	}
	t := make(Table)
	for len(p) > 0 {
		n := int(p[0])
		if len(p) < 1+n {
			return nil, errSyntax("field name overruns table")
		}
		k := string(p[1 : 1+n])
		p = p[1+n:]
		v, rest, err := decodeFieldValue(p, depth)
		if err != nil {
			return nil, err
		}
		t[k] = v
		p = rest
	}
	return t, nil
}

func decodeArrayBody(p []byte, depth int) ([]any, error) {
	if depth > maxNesting {
		return nil, errSyntax("field array nested too deeply")
	}
	a := []any{}
	for len(p) > 0 {
		v, rest, err := decodeFieldValue(p, depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p = rest
	}
	return a, nil
}

func need(p []byte, n int) error {
	if len(p) < n {
		return errSyntax("field value truncated")
	}
	return nil
}

func decodeFieldValue(p []byte, depth int) (v any, rest []byte, err error) {
	if len(p) < 1 {
		return nil, nil, errSyntax("field value missing")
	}
	tag := p[0]
	p = p[1:]
	fixed := func(n int) ([]byte, error) { return p, need(p, n) }
	switch tag {
	case 't':
		if p, err = fixed(1); err != nil {
			return
		}
		return p[0] != 0, p[1:], nil
	case 'b':
		if p, err = fixed(1); err != nil {
			return
		}
		return int8(p[0]), p[1:], nil
	case 'B':
		if p, err = fixed(1); err != nil {
			return
		}
		return p[0], p[1:], nil
	case 's':
		if p, err = fixed(2); err != nil {
			return
		}
		return int16(binary.BigEndian.Uint16(p)), p[2:], nil
	case 'u':
		if p, err = fixed(2); err != nil {
			return
		}
		return binary.BigEndian.Uint16(p), p[2:], nil
	case 'I':
		if p, err = fixed(4); err != nil {
			return
		}
		return int32(binary.BigEndian.Uint32(p)), p[4:], nil
	case 'i':
		if p, err = fixed(4); err != nil {
			return
		}
		return binary.BigEndian.Uint32(p), p[4:], nil
	case 'l':
		if p, err = fixed(8); err != nil {
			return
		}
		return int64(binary.BigEndian.Uint64(p)), p[8:], nil
	case 'f':
		if p, err = fixed(4); err != nil {
			return
		}
		return math.Float32frombits(binary.BigEndian.Uint32(p)), p[4:], nil
	case 'd':
		if p, err = fixed(8); err != nil {
			return
		}
		return math.Float64frombits(binary.BigEndian.Uint64(p)), p[8:], nil
	case 'D':
		if p, err = fixed(5); err != nil {
			return
		}
		return Decimal{Scale: p[0], Value: int32(binary.BigEndian.Uint32(p[1:]))}, p[5:], nil
	case 'T':
		if p, err = fixed(8); err != nil {
			return
		}
		return time.Unix(int64(binary.BigEndian.Uint64(p)), 0).UTC(), p[8:], nil
	case 'V':
		return nil, p, nil
	case 'S', 'x', 'A', 'F':
		if p, err = fixed(4); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(p)
		p = p[4:]
		if uint64(len(p)) < uint64(n) {
			return nil, nil, errSyntax("field value length overruns table")
		}
		body := p[:n]
		rest = p[n:]
		switch tag {
		case 'S':
			return string(body), rest, nil
		case 'x':
			return append([]byte{}, body...), rest, nil
		case 'A':
			a, err := decodeArrayBody(body, depth+1)
			return a, rest, err
		default:
			t, err := decodeTableBody(body, depth+1)
			return t, rest, err
		}
	default:
		return nil, nil, errSyntax("unknown field type")
	}
}

// TypeName is RabbitMQ's name for a field value's type (the atoms of
// rabbit_binary_parser), as its error texts spell them.
func TypeName(v any) string {
	switch v.(type) {
	case string:
		return "longstr"
	case bool:
		return "bool"
	case int8:
		return "byte"
	case uint8:
		return "unsignedbyte"
	case int16:
		return "short"
	case uint16:
		return "unsignedshort"
	case int32:
		return "signedint"
	case uint32:
		return "unsignedint"
	case int64, int:
		return "long"
	case float32:
		return "float"
	case float64:
		return "double"
	case Decimal:
		return "decimal"
	case time.Time:
		return "timestamp"
	case Table:
		return "table"
	case []any:
		return "array"
	case []byte:
		return "binary"
	case nil:
		return "void"
	}
	return "unknown"
}

// Int returns an integer field value of any width as int64 (RabbitMQ
// compares integer arguments by value, whatever their wire type).
func Int(v any) (int64, bool) {
	switch v := v.(type) {
	case int8:
		return int64(v), true
	case uint8:
		return int64(v), true
	case int16:
		return int64(v), true
	case uint16:
		return int64(v), true
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	case int64:
		return v, true
	case int:
		return int64(v), true
	}
	return 0, false
}
