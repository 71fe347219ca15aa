package exchange

import (
	"encoding/binary"
	"math"
	"slices"
	"time"

	"github.com/railmq/railmq/amqp"
)

// bindingID is the identity of a binding: (destination, key, arguments),
// with the arguments compared by value. RabbitMQ sorts a binding's argument
// table before comparing (rabbit_binding), so key order never matters, while
// value types do: int32 5 and int64 5 make two different bindings. A nil and
// an empty table encode alike.
func bindingID(b Binding) string {
	buf := make([]byte, 0, 16+len(b.Dest.Name)+len(b.Key))
	if b.Dest.Exchange {
		buf = append(buf, 'e')
	} else {
		buf = append(buf, 'q')
	}
	buf = appendCanonStr(buf, b.Dest.Name)
	buf = appendCanonStr(buf, b.Key)
	buf = appendCanonTable(buf, b.Args)
	return string(buf)
}

func appendCanonStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendCanonTable(b []byte, t amqp.Table) []byte {
	b = binary.AppendUvarint(b, uint64(len(t)))
	if len(t) == 0 {
		return b
	}
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendCanonStr(b, k)
		b = appendCanonValue(b, t[k])
	}
	return b
}

// appendCanonValue writes v under its wire tag, so two values are encoded
// alike exactly when they would be encoded alike on the wire (int and int64
// both travel as 'l'; a time.Time only to the second). Types without a tag
// become void, as amqp.AppendTable does.
func appendCanonValue(b []byte, v any) []byte {
	b = append(b, wireTag(v))
	switch v := v.(type) {
	case bool:
		if v {
			return append(b, 1)
		}
		return append(b, 0)
	case int8:
		return append(b, byte(v))
	case uint8:
		return append(b, v)
	case int16:
		return binary.BigEndian.AppendUint16(b, uint16(v))
	case uint16:
		return binary.BigEndian.AppendUint16(b, v)
	case int32:
		return binary.BigEndian.AppendUint32(b, uint32(v))
	case uint32:
		return binary.BigEndian.AppendUint32(b, v)
	case int64:
		return binary.BigEndian.AppendUint64(b, uint64(v))
	case int:
		return binary.BigEndian.AppendUint64(b, uint64(v))
	case float32:
		return binary.BigEndian.AppendUint32(b, math.Float32bits(v))
	case float64:
		return binary.BigEndian.AppendUint64(b, math.Float64bits(v))
	case amqp.Decimal:
		return binary.BigEndian.AppendUint32(append(b, v.Scale), uint32(v.Value))
	case string:
		return appendCanonStr(b, v)
	case []byte:
		return appendCanonStr(b, string(v))
	case time.Time:
		return binary.BigEndian.AppendUint64(b, uint64(v.Unix()))
	case []any:
		b = binary.AppendUvarint(b, uint64(len(v)))
		for _, e := range v {
			b = appendCanonValue(b, e)
		}
		return b
	case amqp.Table:
		return appendCanonTable(b, v)
	}
	return b
}

// wireTag is the field-value tag v travels under (RabbitMQ's column of the
// errata table), or 'V' for void and for types AMQP cannot carry.
func wireTag(v any) byte {
	switch v.(type) {
	case bool:
		return 't'
	case int8:
		return 'b'
	case uint8:
		return 'B'
	case int16:
		return 's'
	case uint16:
		return 'u'
	case int32:
		return 'I'
	case uint32:
		return 'i'
	case int64, int:
		return 'l'
	case float32:
		return 'f'
	case float64:
		return 'd'
	case amqp.Decimal:
		return 'D'
	case string:
		return 'S'
	case []byte:
		return 'x'
	case time.Time:
		return 'T'
	case []any:
		return 'A'
	case amqp.Table:
		return 'F'
	}
	return 'V'
}
