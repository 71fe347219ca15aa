package amqp

// HeaderField returns the encoded value (type tag first) of field name in
// a validated headers table body h, without decoding the table: the
// deduplication header is read per message, and a map lookup is all it
// may cost.
func HeaderField(h []byte, name string) ([]byte, bool) {
	for off := 0; off < len(h); {
		n := int(h[off])
		if off+1+n >= len(h) {
			return nil, false
		}
		key := h[off+1 : off+1+n]
		vstart := off + 1 + n
		rest, err := skipFieldValue(h[vstart:], 0)
		if err != nil {
			return nil, false
		}
		end := len(h) - len(rest)
		if string(key) == name {
			return h[vstart:end], true
		}
		off = end
	}
	return nil, false
}

// FieldInt returns an encoded integer field value (any width, as
// HeaderField returns it) as int64.
func FieldInt(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	p := v[1:]
	switch v[0] {
	case 'b':
		return int64(int8(p[0])), true
	case 'B':
		return int64(p[0]), true
	case 's':
		return int64(int16(uint16(p[0])<<8 | uint16(p[1]))), true
	case 'u':
		return int64(uint16(p[0])<<8 | uint16(p[1])), true
	case 'I':
		return int64(int32(be32(p))), true
	case 'i':
		return int64(be32(p)), true
	case 'l':
		return int64(be32(p))<<32 | int64(be32(p[4:])), true
	}
	return 0, false
}

func be32(p []byte) uint32 {
	return uint32(p[0])<<24 | uint32(p[1])<<16 | uint32(p[2])<<8 | uint32(p[3])
}

// FieldKey is a map key for an encoded field value (as HeaderField
// returns it) that compares as Erlang compares the decoded terms where it
// matters for an id: integers of every width give one key per value; any
// other value is its encoding, type tag included (the string "42" and the
// integer 42 differ). buf is scratch space; the key may alias val or buf.
func FieldKey(val []byte, buf *[9]byte) []byte {
	if n, ok := FieldInt(val); ok {
		buf[0] = 'l'
		for i := 8; i >= 1; i-- {
			buf[i] = byte(n)
			n >>= 8
		}
		return buf[:]
	}
	return val
}

// PropsHeaders returns the headers table body of validated encoded basic
// properties (flags first), reading only the two fields before it: a
// deduplicating queue looks a message's id up as it comes in and as it
// leaves, and ScanProperties would read every field.
func PropsHeaders(p []byte) []byte {
	h, _ := PropertyField(p, FlagHeaders)
	return h
}
