package amqp

import "encoding/binary"

// AppendLongHeader appends to dst the encoded properties p (flags first)
// with the header key set to the long-long v: an entry of that key
// already there is dropped and the new one added at the end of the
// headers table (as RabbitMQ's rabbit_basic:add_header replaces it), the
// table made when p has none.
// It copies p once and decodes nothing but the lengths before the
// table: what a stream adds to every delivery (x-stream-offset), as
// RabbitMQ's rabbit_basic:add_header does. p that does not parse comes
// back as it was.
func AppendLongHeader(dst, p []byte, key string, v int64) []byte {
	if len(p) < 2 || len(key) > 255 {
		return append(dst, p...)
	}
	entry := 1 + len(key) + 1 + 8
	flags := binary.BigEndian.Uint16(p)
	if t, ok := PropertyField(p, FlagHeaders); ok {
		end := cap(p) - cap(t) + len(t) // the table body's end in p
		lenAt := cap(p) - cap(t) - 4
		dst = append(dst, p[:lenAt]...)
		at := len(dst)
		dst = binary.BigEndian.AppendUint32(dst, 0)
		dst = appendOtherEntries(dst, t, key)
		dst = appendLongEntry(dst, key, v)
		binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
		return append(dst, p[end:]...)
	}
	// No headers: the table goes after content-type and content-encoding
	// (the two short strings before it).
	at := 2
	for _, bit := range [2]uint16{FlagContentType, FlagContentEncoding} {
		if flags&bit == 0 {
			continue
		}
		if at >= len(p) || at+1+int(p[at]) > len(p) {
			return append(dst, p...)
		}
		at += 1 + int(p[at])
	}
	dst = binary.BigEndian.AppendUint16(dst, flags|FlagHeaders)
	dst = append(dst, p[2:at]...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(entry))
	dst = appendLongEntry(dst, key, v)
	return append(dst, p[at:]...)
}

func appendLongEntry(dst []byte, key string, v int64) []byte {
	dst = append(dst, byte(len(key)))
	dst = append(dst, key...)
	dst = append(dst, 'l')
	return binary.BigEndian.AppendUint64(dst, uint64(v))
}

// appendOtherEntries appends the entries of table body t but those named
// key; a body that does not parse is appended whole.
func appendOtherEntries(dst, t []byte, key string) []byte {
	start := len(dst)
	for off := 0; off < len(t); {
		n := int(t[off])
		if off+1+n >= len(t) {
			return append(dst[:start], t...)
		}
		rest, err := skipFieldValue(t[off+1+n:], 0)
		if err != nil {
			return append(dst[:start], t...)
		}
		end := len(t) - len(rest)
		if string(t[off+1:off+1+n]) != key {
			dst = append(dst, t[off:end]...)
		}
		off = end
	}
	return dst
}
