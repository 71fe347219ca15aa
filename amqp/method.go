package amqp

import (
	"encoding/binary"
	"time"
)

//go:generate go run gen.go -out spec_gen.go

// Method is one AMQP method's arguments. Append encodes the arguments
// (without the class and method ids); DecodeMethod decodes them.
type Method interface {
	Index() (classID, methodID uint16)
	Name() string
	HasContent() bool
	Synchronous() bool
	// ServerHandles reports whether a client may send the method (the
	// spec's server chassis).
	ServerHandles() bool
	Append(b []byte) []byte
	decode(r *reader)
}

// reader decodes fields from a byte slice. The first fault sets err and
// every later read returns a zero value, so generated decoders need no
// per-field checks.
type reader struct {
	p      []byte
	err    error
	intern *interner
}

func (r *reader) fail(s string) {
	if r.err == nil {
		r.err = errSyntax(s)
	}
	r.p = nil
}

func (r *reader) octet() uint8 {
	if len(r.p) < 1 {
		r.fail("method truncated")
		return 0
	}
	v := r.p[0]
	r.p = r.p[1:]
	return v
}

func (r *reader) short() uint16 {
	if len(r.p) < 2 {
		r.fail("method truncated")
		return 0
	}
	v := binary.BigEndian.Uint16(r.p)
	r.p = r.p[2:]
	return v
}

func (r *reader) long() uint32 {
	if len(r.p) < 4 {
		r.fail("method truncated")
		return 0
	}
	v := binary.BigEndian.Uint32(r.p)
	r.p = r.p[4:]
	return v
}

func (r *reader) longlong() uint64 {
	if len(r.p) < 8 {
		r.fail("method truncated")
		return 0
	}
	v := binary.BigEndian.Uint64(r.p)
	r.p = r.p[8:]
	return v
}

func (r *reader) timestamp() time.Time {
	v := r.longlong()
	if r.err != nil {
		return time.Time{}
	}
	return time.Unix(int64(v), 0).UTC()
}

func (r *reader) shortstr() string {
	n := int(r.octet())
	if len(r.p) < n {
		r.fail("short string overruns frame")
		return ""
	}
	b := r.p[:n]
	r.p = r.p[n:]
	if r.intern != nil {
		return r.intern.get(b)
	}
	return string(b)
}

func (r *reader) longstr() string {
	b := r.longbytes()
	return string(b)
}

func (r *reader) longbytes() []byte {
	n := r.long()
	if uint64(len(r.p)) < uint64(n) {
		r.fail("long string overruns frame")
		return nil
	}
	b := r.p[:n]
	r.p = r.p[n:]
	return b
}

func (r *reader) table() Table {
	b := r.longbytes()
	if r.err != nil {
		return nil
	}
	t, err := DecodeTable(b)
	if err != nil {
		r.fail(err.Error())
		return nil
	}
	return t
}

// interner returns one string per distinct short string seen, so the
// exchange and routing key of a stream of publishes cost no allocation.
// It is bounded: when full it starts afresh.
type interner struct {
	m map[string]string
	// recent are the last two strings returned (a publish's exchange and
	// routing key), compared before the map is hashed.
	recent [2]string
	next   int
}

const internMax = 1024

func (in *interner) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if string(b) == in.recent[0] { // no allocation: compared as bytes
		return in.recent[0]
	}
	if string(b) == in.recent[1] {
		return in.recent[1]
	}
	s, ok := in.m[string(b)] // no allocation: the compiler keys by bytes
	if ok {
		in.remember(s)
		return s
	}
	if len(b) > 64 {
		return string(b)
	}
	if in.m == nil || len(in.m) >= internMax {
		in.m = make(map[string]string, 8) // idle connections stay small
	}
	s = string(b)
	in.m[s] = s
	in.remember(s)
	return s
}

func (in *interner) remember(s string) {
	in.recent[in.next] = s
	in.next ^= 1
}

// Decoder decodes method frames for one connection. Methods on the hot
// path (basic.publish, ack, nack, reject) are decoded into structs the
// Decoder owns and reuses: the result is valid until the next Decode.
// Other methods are freshly allocated.
type Decoder struct {
	intern  interner
	publish BasicPublish
	ack     BasicAck
	nack    BasicNack
	reject  BasicReject
	r       reader // kept here: passed to an interface method, it would escape
}

// Decode decodes a method frame's payload. It returns ErrUnknownMethod
// (wrapped in *UnknownMethodError) for ids the spec does not define, and
// an error wrapping ErrMalformed for truncated or trailing bytes.
func (d *Decoder) Decode(p []byte) (Method, error) {
	if len(p) < 4 {
		return nil, errSyntax("method frame shorter than its ids")
	}
	cid, mid := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
	var m Method
	switch uint32(cid)<<16 | uint32(mid) {
	case 60<<16 | 40:
		d.publish = BasicPublish{}
		m = &d.publish
	case 60<<16 | 80:
		m = &d.ack
	case 60<<16 | 120:
		m = &d.nack
	case 60<<16 | 90:
		m = &d.reject
	default:
		m = newMethod(cid, mid)
		if m == nil {
			return nil, &UnknownMethodError{ClassID: cid, MethodID: mid}
		}
	}
	d.r = reader{p: p[4:], intern: &d.intern}
	m.decode(&d.r)
	if d.r.err == nil && len(d.r.p) != 0 {
		d.r.err = errSyntax("trailing bytes after method arguments")
	}
	if d.r.err != nil {
		return nil, d.r.err
	}
	return m, nil
}

// DecodeMethod decodes a method frame's payload into a new struct.
func DecodeMethod(p []byte) (Method, error) {
	if len(p) < 4 {
		return nil, errSyntax("method frame shorter than its ids")
	}
	cid, mid := binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
	m := newMethod(cid, mid)
	if m == nil {
		return nil, &UnknownMethodError{ClassID: cid, MethodID: mid}
	}
	r := reader{p: p[4:]}
	m.decode(&r)
	if r.err == nil && len(r.p) != 0 {
		r.err = errSyntax("trailing bytes after method arguments")
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// UnknownMethodError is a method frame whose class and method ids the
// spec does not define.
type UnknownMethodError struct{ ClassID, MethodID uint16 }

func (e *UnknownMethodError) Error() string { return "unknown method" }
func (e *UnknownMethodError) Unwrap() error { return ErrMalformed }

// AppendMethodPayload appends the class id, method id and arguments of m.
func AppendMethodPayload(b []byte, m Method) []byte {
	cid, mid := m.Index()
	b = binary.BigEndian.AppendUint16(b, cid)
	b = binary.BigEndian.AppendUint16(b, mid)
	return m.Append(b)
}
