package amqp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

// chunkReader returns at most n bytes per Read, to feed frames in pieces.
type chunkReader struct {
	p []byte
	n int
}

func (c *chunkReader) Read(b []byte) (int, error) {
	if len(c.p) == 0 {
		return 0, errEOF
	}
	k := min(len(b), c.n, len(c.p))
	copy(b, c.p[:k])
	c.p = c.p[k:]
	return k, nil
}

var errEOF = bytes.ErrTooLarge // any error ends the stream

func FuzzReadFrame(f *testing.F) {
	f.Add(sampleStream(), uint8(7))
	f.Add(AppendHeartbeat(nil), uint8(1))
	f.Add(AppendMethodFrame(nil, 0, &ConnectionStartOk{ClientProperties: Table{"product": "x"}, Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"}), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		fr := NewFrameReader(bufio.NewReaderSize(&chunkReader{p: data, n: int(chunk)%64 + 1}, 16))
		fr.Max = 8192
		var d Decoder
		for range 64 {
			fm, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if len(fm.Payload) > 8192-8 {
				t.Fatalf("payload %d over frame_max", len(fm.Payload))
			}
			switch fm.Type {
			case FrameMethod:
				if m, err := d.Decode(fm.Payload); err == nil {
					_ = AppendMethodPayload(nil, m)
				}
			case FrameHeader:
				if h, err := ParseContentHeader(fm.Payload); err == nil {
					if _, err := DecodeProperties(h.Props); err != nil {
						t.Fatalf("scan accepted what decode refuses: %v", err)
					}
				}
			}
		}
	})
}

func FuzzDecodeMethod(f *testing.F) {
	for _, m := range allMethods() {
		f.Add(AppendMethodPayload(nil, m))
	}
	f.Add(AppendMethodPayload(nil, &QueueDeclare{Queue: "q", Arguments: Table{"x-max-length": int32(5)}}))
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := DecodeMethod(p)
		if err != nil {
			return
		}
		re := AppendMethodPayload(nil, m)
		m2, err := DecodeMethod(re)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if m2.Name() != m.Name() {
			t.Fatal("name changed")
		}
	})
}

func FuzzDecodeTable(f *testing.F) {
	f.Add(AppendTable(nil, Table{"a": int32(1), "b": []any{"x", Table{"c": nil}}})[4:])
	f.Add([]byte{1, 'a', 'S', 0, 0, 0, 1, 'x'})
	// Around the nesting bound, in arrays, tables and both.
	for _, levels := range []int{maxNesting, maxNesting + 1} {
		arr, tab, mixed := any("x"), any("x"), any("x")
		for i := range levels {
			arr, tab = []any{arr}, Table{"t": tab}
			if i%2 == 0 {
				mixed = []any{mixed}
			} else {
				mixed = Table{"m": mixed}
			}
		}
		for _, v := range []any{arr, tab, mixed} {
			f.Add(AppendTable(nil, Table{"deep": v})[4:])
		}
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		tab, err := DecodeTable(p)
		verr := validateTable(p, 0)
		if (err == nil) != (verr == nil) {
			t.Fatalf("DecodeTable %v, validateTable %v", err, verr)
		}
		if err != nil {
			return
		}
		re := AppendTable(nil, tab)
		if _, err := DecodeTable(re[4:]); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzContentHeader(f *testing.F) {
	props := (&Properties{Flags: 0xfffc, Headers: Table{"k": "v"}, DeliveryMode: 2, Expiration: "5"}).Append(nil)
	hdr := append([]byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, props...)
	f.Add(hdr)
	f.Add([]byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := ParseContentHeader(p)
		if err != nil {
			return
		}
		got, err := DecodeProperties(h.Props)
		if err != nil {
			t.Fatalf("scan accepted what decode refuses: %v", err)
		}
		if re := got.Append(nil); len(re) == 0 {
			t.Fatal("empty encoding")
		}
		// What the channel takes again without validating: the same view.
		want, _ := ScanProperties(h.Props)
		if v := ViewProperties(h.Props); !reflect.DeepEqual(v, want) {
			t.Fatalf("ViewProperties %+v, ScanProperties %+v", v, want)
		}
	})
}

// FuzzSenderRoutes feeds encoded properties to the CC/BCC scan and the
// BCC removal: never a panic, and what is left is valid properties whose
// headers decode to the input's less BCC.
func FuzzSenderRoutes(f *testing.F) {
	for _, h := range []Table{
		{"CC": []any{"a", "b"}, "BCC": []any{"c", int32(1)}, "x": "y"},
		{"BCC": []any{}},
		{"CC": "not-an-array"},
		{"CCX": []any{"a"}, "BCCC": int64(2)},
	} {
		p := &Properties{Flags: FlagHeaders | FlagContentType, ContentType: "text/plain", Headers: h}
		f.Add(p.Append(nil))
	}
	f.Add(twoBCCProps()) // found by the fuzzer: one BCC was left behind
	f.Fuzz(func(t *testing.T, props []byte) {
		v, err := ScanProperties(props)
		if err != nil {
			return
		}
		r, err := ScanSenderRoutes(v.Headers)
		if err != nil || !r.HasBCC {
			return
		}
		out := WithoutHeaderFields(props, v.Headers, r.BCC)
		v2, err := ScanProperties(out)
		if err != nil {
			t.Fatalf("BCC removed: invalid properties: %v", err)
		}
		before, _ := RawFields(v.Headers)
		after, err := RawFields(v2.Headers)
		if err != nil {
			t.Fatal(err)
		}
		var kept []RawField
		for _, f := range before {
			if f.Name != "BCC" {
				kept = append(kept, f)
			}
		}
		if !reflect.DeepEqual(after, kept) {
			t.Fatalf("after removing BCC: %v, want %v", after, kept)
		}
	})
}

// twoBCCProps encodes properties whose headers table names BCC twice
// (a map-based Table cannot), with a CC and another field between.
func twoBCCProps() []byte {
	field := func(b []byte, name string, keys ...string) []byte {
		b = append(b, byte(len(name)))
		b = append(b, name...)
		var arr []byte
		for _, k := range keys {
			arr = append(arr, 'S')
			arr = binary.BigEndian.AppendUint32(arr, uint32(len(k)))
			arr = append(arr, k...)
		}
		b = append(b, 'A')
		b = binary.BigEndian.AppendUint32(b, uint32(len(arr)))
		return append(b, arr...)
	}
	var tbl []byte
	tbl = field(tbl, "BCC", "first-secret")
	tbl = field(tbl, "CC", "seen")
	tbl = append(tbl, 1, 'x', 't', 1) // x: true
	tbl = field(tbl, "BCC", "second-secret")
	p := binary.BigEndian.AppendUint16(nil, FlagHeaders)
	p = binary.BigEndian.AppendUint32(p, uint32(len(tbl)))
	return append(p, tbl...)
}

// A table that names BCC twice: both go, the other fields stay in order,
// and the first CC and first BCC route (RabbitMQ's table_lookup).
func TestTwoBCCFieldsBothRemoved(t *testing.T) {
	props := twoBCCProps()
	v, err := ScanProperties(props)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ScanSenderRoutes(v.Headers)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"seen", "first-secret"}; !reflect.DeepEqual(r.Keys, want) {
		t.Fatalf("keys %q, want %q", r.Keys, want)
	}
	v2, err := ScanProperties(WithoutHeaderFields(props, v.Headers, r.BCC))
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := RawFields(v2.Headers)
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	if want := []string{"CC", "x"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("fields left %q, want %q", names, want)
	}
}
