package amqp

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Sender-selected distribution (RabbitMQ's "CC" and "BCC" headers): a
// publish is also routed with each routing key listed in these two
// headers, and the BCC header is removed before the message is stored or
// delivered (rabbit_basic:header_routes, strip_header).

// SenderRoutes is what a message's CC and BCC headers ask for.
type SenderRoutes struct {
	Keys []string // the CC keys, then the BCC keys
	// BCC holds the span of every BCC field within the headers table body
	// (a table may carry the name more than once; every one is removed).
	BCC    [][2]int
	HasBCC bool
}

// mayHaveSenderRoutes is a cheap test on a headers table body: false
// means it has neither a CC nor a BCC field.
func mayHaveSenderRoutes(h []byte) bool {
	return bytes.Contains(h, []byte("\x02CC")) || bytes.Contains(h, []byte("\x03BCC"))
}

// ScanSenderRoutes finds the CC and BCC fields of a (validated) headers
// table body h. Either must be an array; only its longstr elements are
// routing keys, as in RabbitMQ, which refuses any other type of CC or BCC
// with "invalid message: {unacceptable_type_in_header,...}" (a 406).
// A table that names CC or BCC twice is routed by the first of each, as
// RabbitMQ's rabbit_misc:table_lookup finds the first; but every BCC field
// is listed for removal, where RabbitMQ's strip_header deletes only the
// first and so would deliver the second's blind copies to every consumer.
func ScanSenderRoutes(h []byte) (SenderRoutes, error) {
	var r SenderRoutes
	if !mayHaveSenderRoutes(h) {
		return r, nil
	}
	var cc, bcc []string
	var seenCC, seenBCC bool
	for off := 0; off < len(h); {
		n := int(h[off])
		key := h[off+1 : off+1+n]
		vstart := off + 1 + n
		rest, err := skipFieldValue(h[vstart:], 0)
		if err != nil {
			return r, err
		}
		end := len(h) - len(rest)
		name := string(key)
		if name == "CC" || name == "BCC" {
			if h[vstart] != 'A' {
				v, _, _ := decodeFieldValue(h[vstart:], 0) // validated
				return r, &Error{Code: PreconditionFailed, Text: fmt.Sprintf(
					"PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,\"%s\",%s}", name, TypeName(v))}
			}
			switch {
			case name == "CC" && !seenCC:
				cc, seenCC = arrayLongstrs(h[vstart+5:end]), true
			case name == "BCC" && !seenBCC:
				bcc, seenBCC = arrayLongstrs(h[vstart+5:end]), true
			}
			if name == "BCC" {
				r.HasBCC, r.BCC = true, append(r.BCC, [2]int{off, end})
			}
		}
		off = end
	}
	r.Keys = append(cc, bcc...)
	return r, nil
}

// arrayLongstrs returns the longstr elements of a validated array body.
func arrayLongstrs(p []byte) []string {
	var out []string
	for len(p) > 0 {
		rest, _ := skipFieldValue(p, 0)
		if p[0] == 'S' {
			n := binary.BigEndian.Uint32(p[1:])
			out = append(out, string(p[5:5+n]))
		}
		p = rest
	}
	return out
}

// WithoutHeaderFields returns props (encoded properties, flags first) with
// the fields at spans (within headers, the table body as ScanProperties
// found it in props; in order, not overlapping) removed; the other fields
// keep their order, and an emptied table stays, as RabbitMQ's
// strip_header leaves it.
func WithoutHeaderFields(props, headers []byte, spans [][2]int) []byte {
	off := cap(props) - cap(headers) // headers aliases props
	if off < 4 || off+len(headers) > len(props) || len(spans) == 0 {
		return props
	}
	cut := 0
	for _, s := range spans {
		cut += s[1] - s[0]
	}
	out := make([]byte, 0, len(props)-cut)
	out = append(out, props[:off-4]...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(headers)-cut))
	from := 0
	for _, s := range spans {
		out = append(out, headers[from:s[0]]...)
		from = s[1]
	}
	out = append(out, headers[from:]...)
	return append(out, props[off+len(headers):]...)
}

// RawField is one field of an encoded table, as it is on the wire.
type RawField struct {
	Name  string
	Tag   byte
	Value []byte // the value's bytes after its tag (a table or array keeps its length prefix)
}

// RawFields lists the fields of a table body in wire order (tests and
// tools that compare encodings byte for byte).
func RawFields(body []byte) ([]RawField, error) {
	if err := validateTable(body, 0); err != nil {
		return nil, err
	}
	var out []RawField
	for p := body; len(p) > 0; {
		n := int(p[0])
		name := string(p[1 : 1+n])
		v := p[1+n:]
		rest, _ := skipFieldValue(v, 0)
		out = append(out, RawField{Name: name, Tag: v[0], Value: v[1 : len(v)-len(rest)]})
		p = rest
	}
	return out, nil
}
