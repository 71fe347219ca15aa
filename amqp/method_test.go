package amqp

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// allMethods returns one fresh struct for every method the spec defines.
func allMethods() []Method {
	var ms []Method
	for c := uint16(0); c < 100; c++ {
		for m := uint16(0); m < 200; m++ {
			if x := newMethod(c, m); x != nil {
				ms = append(ms, x)
			}
		}
	}
	return ms
}

func randomTable(r *rand.Rand) Table {
	return Table{
		"bool": true, "i8": int8(-3), "u8": uint8(200), "i16": int16(-300), "u16": uint16(60000),
		"i32": int32(-70000), "u32": uint32(4000000000), "i64": int64(-1 << 40), "f32": float32(1.5),
		"f64": 2.25, "dec": Decimal{Scale: 2, Value: -12345}, "str": "hello", "arr": []any{int32(1), "x", nil},
		"ts": time.Unix(int64(r.Uint32()), 0).UTC(), "nested": Table{"k": []byte{1, 2, 3}}, "void": nil,
		"bytes": []byte("raw"),
	}
}

func fill(r *rand.Rand, v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(r.IntN(2) == 1)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(r.Uint64() >> (64 - f.Type().Bits()))
		case reflect.String:
			b := make([]byte, r.IntN(40))
			for j := range b {
				b[j] = byte(r.IntN(256))
			}
			f.SetString(string(b))
		case reflect.Map:
			f.Set(reflect.ValueOf(randomTable(r)))
		}
	}
}

func TestMethodRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ms := allMethods()
	if len(ms) != 64 {
		t.Fatalf("spec methods: got %d, want 64", len(ms))
	}
	for _, m := range ms {
		t.Run(m.Name(), func(t *testing.T) {
			for range 20 {
				fill(r, reflect.ValueOf(m).Elem())
				enc := AppendMethodPayload(nil, m)
				got, err := DecodeMethod(enc)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if !reflect.DeepEqual(got, m) {
					t.Fatalf("round trip:\n got %#v\nwant %#v", got, m)
				}
				var d Decoder
				got2, err := d.Decode(enc)
				if err != nil || !reflect.DeepEqual(got2, m) {
					t.Fatalf("Decoder round trip: %v %#v", err, got2)
				}
				// Byte-exact re-encoding: tables have one key so order is fixed.
				v := reflect.ValueOf(m).Elem()
				for i := 0; i < v.NumField(); i++ {
					if v.Field(i).Kind() == reflect.Map {
						v.Field(i).Set(reflect.ValueOf(Table{"k": int32(1)}))
					}
				}
				enc = AppendMethodPayload(nil, m)
				got, _ = DecodeMethod(enc)
				if re := AppendMethodPayload(nil, got); !bytes.Equal(re, enc) {
					t.Fatalf("encode(decode(x)) != x")
				}
				// Every strict prefix is malformed, never a panic.
				for n := 0; n < len(enc); n++ {
					if _, err := DecodeMethod(enc[:n]); err == nil {
						// a prefix can only decode if it ends exactly on a
						// field boundary of a shorter method: impossible here
						t.Fatalf("prefix %d of %d decoded", n, len(enc))
					}
				}
				if _, err := DecodeMethod(append(enc, 0)); !errors.Is(err, ErrMalformed) {
					t.Fatalf("trailing byte: %v", err)
				}
			}
		})
	}
}

func TestKnownEncodings(t *testing.T) {
	// basic.publish exchange "x" key "k" mandatory: bytes as amqp091-go writes them.
	got := AppendMethodPayload(nil, &BasicPublish{Exchange: "x", RoutingKey: "k", Mandatory: true})
	want := []byte{0, 60, 0, 40, 0, 0, 1, 'x', 1, 'k', 1}
	if !bytes.Equal(got, want) {
		t.Fatalf("publish: % x", got)
	}
	got = AppendMethodPayload(nil, &BasicNack{DeliveryTag: 7, Multiple: true, Requeue: true})
	want = []byte{0, 60, 0, 120, 0, 0, 0, 0, 0, 0, 0, 7, 3}
	if !bytes.Equal(got, want) {
		t.Fatalf("nack: % x", got)
	}
}

func TestUnknownMethod(t *testing.T) {
	_, err := DecodeMethod([]byte{0, 60, 0, 41})
	var um *UnknownMethodError
	if !errors.As(err, &um) || um.ClassID != 60 || um.MethodID != 41 {
		t.Fatalf("got %v", err)
	}
}

func TestReplyCodes(t *testing.T) {
	for _, tc := range []struct {
		code uint16
		hard bool
		name string
	}{
		{NotFound, false, "NOT_FOUND"}, {PreconditionFailed, false, "PRECONDITION_FAILED"},
		{AccessRefused, false, "ACCESS_REFUSED"}, {ResourceLocked, false, "RESOURCE_LOCKED"},
		{FrameError, true, "FRAME_ERROR"}, {SyntaxError, true, "SYNTAX_ERROR"},
		{CommandInvalid, true, "COMMAND_INVALID"}, {ChannelError, true, "CHANNEL_ERROR"},
		{UnexpectedFrame, true, "UNEXPECTED_FRAME"}, {NotAllowed, true, "NOT_ALLOWED"},
		{NotImplemented, true, "NOT_IMPLEMENTED"}, {InternalError, true, "INTERNAL_ERROR"},
		{ConnectionForced, true, "CONNECTION_FORCED"}, {NoRoute, false, "NO_ROUTE"},
	} {
		if IsHardError(tc.code) != tc.hard || ReplyText(tc.code) != tc.name {
			t.Errorf("%d: hard=%v name=%s", tc.code, IsHardError(tc.code), ReplyText(tc.code))
		}
	}
	e := Errorf(NotFound, "no queue '%s' in vhost '%s'", "q", "/")
	if e.Text != "NOT_FOUND - no queue 'q' in vhost '/'" || e.Hard() {
		t.Fatalf("%+v", e)
	}
}
