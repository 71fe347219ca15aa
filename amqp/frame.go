package amqp

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"slices"
)

// ProtocolHeader is the 0-9-1 protocol header a client opens with.
var ProtocolHeader = [8]byte{'A', 'M', 'Q', 'P', 0, 0, 9, 1}

// FrameOverhead is a frame's header (7 bytes) plus its frame-end octet:
// a frame_max of N allows payloads of at most N-8 bytes.
const FrameOverhead = 8

// Frame is one decoded frame. Payload aliases the reader's buffer and is
// valid only until the next ReadFrame.
type Frame struct {
	Type    uint8
	Channel uint16
	Payload []byte
}

// FrameTooLargeError is a frame whose declared size exceeds frame_max.
type FrameTooLargeError struct {
	Type    uint8
	Size    uint32
	MaxBody uint32
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("type %d, all octets = <<>>: {frame_too_large,%d,%d}", e.Type, e.Size, e.MaxBody)
}
func (e *FrameTooLargeError) Unwrap() error { return ErrFrame }

// BadFrameEndError is a frame not closed by the frame-end octet (0xCE).
type BadFrameEndError struct {
	Type uint8
	End  byte
}

func (e *BadFrameEndError) Error() string {
	return fmt.Sprintf("type %d, bad frame end %#x: invalid_frame_end_marker", e.Type, e.End)
}
func (e *BadFrameEndError) Unwrap() error { return ErrFrame }

// FrameReader reads frames from a buffered stream. It checks each frame's
// declared size against Max before reading or allocating the payload
// (amqp091-go read.go does the same), so a length prefix can never make it
// allocate more than frame_max.
type FrameReader struct {
	r   *bufio.Reader
	buf []byte
	// Max is the negotiated frame_max (header and frame-end included);
	// 0 means FrameMinSize until tuning is done.
	Max uint32
}

// NewFrameReader reads frames from r.
func NewFrameReader(r *bufio.Reader) *FrameReader {
	return &FrameReader{r: r}
}

// ReadFrame reads the next frame. Errors wrapping ErrFrame mean the stream
// is corrupt; io errors are passed through.
func (fr *FrameReader) ReadFrame() (Frame, error) {
	hdr, err := fr.r.Peek(7)
	if err != nil {
		if err == io.EOF && len(hdr) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	typ := hdr[0]
	ch := binary.BigEndian.Uint16(hdr[1:])
	size := binary.BigEndian.Uint32(hdr[3:])
	_, _ = fr.r.Discard(7) // cannot fail: the 7 bytes are buffered
	limit := fr.Max
	if limit == 0 {
		limit = FrameMinSize
	}
	if size > limit-FrameOverhead {
		return Frame{Type: typ, Channel: ch}, &FrameTooLargeError{Type: typ, Size: size, MaxBody: limit - FrameOverhead}
	}
	n := int(size) + 1
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n, max(n, 1024))
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil { // fr.r escapes already; b is on the heap
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	if b[size] != FrameEnd {
		return Frame{Type: typ, Channel: ch, Payload: b[:size]}, &BadFrameEndError{Type: typ, End: b[size]}
	}
	return Frame{Type: typ, Channel: ch, Payload: b[:size]}, nil
}

func beginFrame(b []byte, typ uint8, ch uint16) ([]byte, int) {
	b = append(b, typ, byte(ch>>8), byte(ch), 0, 0, 0, 0)
	return b, len(b)
}

func endFrame(b []byte, start int) []byte {
	binary.BigEndian.PutUint32(b[start-4:], uint32(len(b)-start))
	return append(b, FrameEnd)
}

// AppendMethodFrame appends a method frame carrying m on channel ch.
func AppendMethodFrame(b []byte, ch uint16, m Method) []byte {
	b, start := beginFrame(b, FrameMethod, ch)
	b = AppendMethodPayload(b, m)
	return endFrame(b, start)
}

// IsHeartbeat reports whether b is one heartbeat frame and nothing else.
func IsHeartbeat(b []byte) bool {
	return len(b) == 8 && b[0] == FrameHeartbeat && b[7] == FrameEnd
}

// AppendHeartbeat appends a heartbeat frame (type 8, channel 0, 8 bytes).
func AppendHeartbeat(b []byte) []byte {
	return append(b, FrameHeartbeat, 0, 0, 0, 0, 0, 0, FrameEnd)
}

// AppendContent appends a content header frame with the already-encoded
// properties (flags included) and the body split into body frames of at
// most frameMax-8 bytes each.
func AppendContent(b []byte, ch uint16, classID uint16, props []byte, body []byte, frameMax uint32) []byte {
	chunk := int(frameMax) - FrameOverhead
	if frameMax == 0 {
		chunk = len(body)
	}
	// Room for it all at once: append's own growth (a quarter at a time
	// past 256 elements) copied a 20 MiB body about four times over, and
	// allocated 127 MB for it, into a fresh buffer (the writer keeps none
	// over 1 MiB).
	need := FrameOverhead + 12 + max(len(props), 2)
	if len(body) > 0 && chunk > 0 {
		need += len(body) + (len(body)+chunk-1)/chunk*FrameOverhead
	}
	b = slices.Grow(b, need)
	b, start := beginFrame(b, FrameHeader, ch)
	b = binary.BigEndian.AppendUint16(b, classID)
	b = append(b, 0, 0) // weight
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	if len(props) == 0 {
		b = append(b, 0, 0)
	} else {
		b = append(b, props...)
	}
	b = endFrame(b, start)
	for len(body) > 0 {
		n := min(chunk, len(body))
		b, start = beginFrame(b, FrameBody, ch)
		b = append(b, body[:n]...)
		b = endFrame(b, start)
		body = body[n:]
	}
	return b
}

// ContentHeader is a decoded content header frame. Props holds the
// property flags and properties exactly as sent (aliasing the frame), so a
// message can be forwarded byte-for-byte without decoding its headers.
type ContentHeader struct {
	ClassID  uint16
	BodySize uint64
	Props    []byte
}

// ParseContentHeader decodes a content header frame's payload and checks
// that its properties are well formed, without allocating.
func ParseContentHeader(p []byte) (ContentHeader, error) {
	if len(p) < 14 {
		return ContentHeader{}, errSyntax("content header truncated")
	}
	h := ContentHeader{
		ClassID:  binary.BigEndian.Uint16(p),
		BodySize: binary.BigEndian.Uint64(p[4:]),
		Props:    p[12:],
	}
	if _, err := ScanProperties(h.Props); err != nil {
		return ContentHeader{}, err
	}
	return h, nil
}

// PropertiesView gives the few properties the broker acts on, found by
// scanning the encoded properties without allocating. String fields alias
// the scanned bytes.
type PropertiesView struct {
	Flags        uint16
	DeliveryMode uint8
	Priority     uint8
	Headers      []byte // the table's body, without its length prefix
	Expiration   []byte
	UserID       []byte
	ReplyTo      []byte
}

// ScanProperties validates encoded properties (flags first) and returns a
// view of them. Property flags continuation (bit 0) is not used by 0-9-1
// and is rejected.
func ScanProperties(p []byte) (PropertiesView, error) { return scanProperties(p, true) }

// ViewProperties is ScanProperties for properties it already took (a
// headers table is not validated again).
func ViewProperties(p []byte) PropertiesView {
	v, _ := scanProperties(p, false)
	return v
}

func scanProperties(p []byte, validate bool) (PropertiesView, error) {
	var v PropertiesView
	if len(p) < 2 {
		return v, errSyntax("property flags truncated")
	}
	v.Flags = binary.BigEndian.Uint16(p)
	if v.Flags&1 != 0 {
		return v, errSyntax("property flags continuation not supported")
	}
	p = p[2:]
	// The flags set, highest first (the properties' order).
	for f := v.Flags; f != 0; {
		i := bits.LeadingZeros16(f)
		f &^= 0x8000 >> i
		if i >= len(propertyTypes) {
			break // a bit no property has (0-9-1 ignores it)
		}
		t := propertyTypes[i]
		var field []byte
		switch t {
		case 's':
			if len(p) < 1 || len(p) < 1+int(p[0]) {
				return v, errSyntax("property truncated")
			}
			field, p = p[1:1+int(p[0])], p[1+int(p[0]):]
		case 'F':
			if len(p) < 4 {
				return v, errSyntax("property truncated")
			}
			n := binary.BigEndian.Uint32(p)
			if uint64(len(p)-4) < uint64(n) {
				return v, errSyntax("headers table overruns header")
			}
			field, p = p[4:4+n], p[4+n:]
			if validate {
				if err := validateTable(field, 0); err != nil {
					return v, err
				}
			}
		case 'o':
			if len(p) < 1 {
				return v, errSyntax("property truncated")
			}
			field, p = p[:1], p[1:]
		case 'T':
			if len(p) < 8 {
				return v, errSyntax("property truncated")
			}
			field, p = p[:8], p[8:]
		}
		switch uint16(1) << (15 - i) {
		case FlagDeliveryMode:
			v.DeliveryMode = field[0]
		case FlagPriority:
			v.Priority = field[0]
		case FlagHeaders:
			v.Headers = field
		case FlagExpiration:
			v.Expiration = field
		case FlagUserID:
			v.UserID = field
		case FlagReplyTo:
			v.ReplyTo = field
		}
	}
	if len(p) != 0 {
		return v, errSyntax("trailing bytes after properties")
	}
	return v, nil
}

// validateTable walks an encoded table body without building it.
func validateTable(p []byte, depth int) error {
	if depth > maxNesting {
		return errSyntax("field table nested too deeply")
	}
	for len(p) > 0 {
		n := int(p[0])
		if len(p) < 1+n {
			return errSyntax("field name overruns table")
		}
		rest, err := skipFieldValue(p[1+n:], depth)
		if err != nil {
			return err
		}
		p = rest
	}
	return nil
}

func skipFieldValue(p []byte, depth int) ([]byte, error) {
	if len(p) < 1 {
		return nil, errSyntax("field value missing")
	}
	tag := p[0]
	p = p[1:]
	var n int
	switch tag {
	case 't', 'b', 'B':
		n = 1
	case 's', 'u':
		n = 2
	case 'I', 'i', 'f':
		n = 4
	case 'D':
		n = 5
	case 'l', 'd', 'T':
		n = 8
	case 'V':
		n = 0
	case 'S', 'x', 'A', 'F':
		if len(p) < 4 {
			return nil, errSyntax("field value truncated")
		}
		l := binary.BigEndian.Uint32(p)
		if uint64(len(p)-4) < uint64(l) {
			return nil, errSyntax("field value length overruns table")
		}
		body := p[4 : 4+l]
		switch tag {
		case 'F':
			if err := validateTable(body, depth+1); err != nil {
				return nil, err
			}
		case 'A':
			// Bounded as decoding bounds it (decodeArrayBody): deeper
			// arrays are refused here, at the door, not later.
			if depth+1 > maxNesting {
				return nil, errSyntax("field array nested too deeply")
			}
			for q := body; len(q) > 0; {
				var err error
				if q, err = skipFieldValue(q, depth+1); err != nil {
					return nil, err
				}
			}
		}
		return p[4+l:], nil
	default:
		return nil, errSyntax("unknown field type")
	}
	if len(p) < n {
		return nil, errSyntax("field value truncated")
	}
	return p[n:], nil
}

// DecodeProperties decodes encoded properties (flags first) in full.
func DecodeProperties(p []byte) (Properties, error) {
	var props Properties
	r := reader{p: p}
	props.decode(&r)
	if r.err == nil && len(r.p) != 0 {
		r.err = errSyntax("trailing bytes after properties")
	}
	return props, r.err
}

// PropertyField returns the value of the property with flag (one bit of
// the flags) in encoded properties p, flags first: a short string's
// bytes, a timestamp's eight, an octet, a table's body. ok is false when
// the property is absent or p is cut short. It does not allocate.
func PropertyField(p []byte, flag uint16) (field []byte, ok bool) {
	if len(p) < 2 {
		return nil, false
	}
	flags := binary.BigEndian.Uint16(p)
	if flags&flag == 0 {
		return nil, false
	}
	p = p[2:]
	for i, t := range propertyTypes {
		bit := uint16(1) << (15 - i)
		if flags&bit == 0 {
			continue
		}
		var n, skip int
		switch t {
		case 's':
			if len(p) < 1 {
				return nil, false
			}
			n, skip = int(p[0]), 1
		case 'F':
			if len(p) < 4 {
				return nil, false
			}
			n, skip = int(binary.BigEndian.Uint32(p)), 4
		case 'o':
			n = 1
		case 'T':
			n = 8
		}
		if len(p)-skip < n {
			return nil, false
		}
		if bit == flag {
			return p[skip : skip+n], true
		}
		p = p[skip+n:]
	}
	return nil, false
}
