package amqp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"
)

func sampleStream() []byte {
	var b []byte
	b = AppendMethodFrame(b, 1, &BasicPublish{Exchange: "ex", RoutingKey: "rk"})
	props := (&Properties{Flags: FlagContentType | FlagHeaders | FlagDeliveryMode | FlagExpiration,
		ContentType: "text/plain", Headers: Table{"a": int32(1)}, DeliveryMode: 2, Expiration: "60000"}).Append(nil)
	b = AppendContent(b, 1, ClassBasic, props, bytes.Repeat([]byte("x"), 10000), 4096)
	b = AppendHeartbeat(b)
	return b
}

func TestFrameReader(t *testing.T) {
	fr := NewFrameReader(bufio.NewReader(bytes.NewReader(sampleStream())))
	fr.Max = 4096
	var types []uint8
	var body int
	for {
		f, err := fr.ReadFrame()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, f.Type)
		switch f.Type {
		case FrameHeader:
			h, err := ParseContentHeader(f.Payload)
			if err != nil || h.BodySize != 10000 {
				t.Fatalf("header %v %+v", err, h)
			}
			v, _ := ScanProperties(h.Props)
			if v.DeliveryMode != 2 || string(v.Expiration) != "60000" {
				t.Fatalf("view %+v", v)
			}
			p, err := DecodeProperties(h.Props)
			if err != nil || p.ContentType != "text/plain" || p.Headers["a"] != int32(1) {
				t.Fatalf("props %v %+v", err, p)
			}
		case FrameBody:
			body += len(f.Payload)
		}
	}
	want := []uint8{1, 2, 3, 3, 3, 8}
	if !bytes.Equal(types, want) || body != 10000 {
		t.Fatalf("types %v body %d", types, body)
	}
}

func TestFrameTooLarge(t *testing.T) {
	b := AppendContent(nil, 1, ClassBasic, nil, make([]byte, 200000), 300000)
	fr := NewFrameReader(bufio.NewReader(bytes.NewReader(b)))
	fr.Max = 131072
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatal(err) // header frame fits
	}
	_, err := fr.ReadFrame()
	var tl *FrameTooLargeError
	if !errors.As(err, &tl) || tl.Error() != "type 3, all octets = <<>>: {frame_too_large,200000,131064}" {
		t.Fatalf("got %v", err)
	}
}

func TestBadFrameEnd(t *testing.T) {
	b := AppendHeartbeat(nil)
	b[7] = 0
	fr := NewFrameReader(bufio.NewReader(bytes.NewReader(b)))
	if _, err := fr.ReadFrame(); !errors.Is(err, ErrFrame) {
		t.Fatalf("got %v", err)
	}
}

func TestPropertyField(t *testing.T) {
	ts := time.Unix(1700000000, 0)
	all := Properties{Flags: 0xfff8, ContentType: "a", ContentEncoding: "b", Headers: Table{"h": "v"},
		DeliveryMode: 2, Priority: 9, CorrelationID: "corr", ReplyTo: "r", Expiration: "100", MessageID: "msg",
		Timestamp: ts, Type: "t", UserID: "u", AppID: "app"}
	enc := all.Append(nil)
	for _, tt := range []struct {
		flag uint16
		want string
	}{
		{FlagContentType, "a"}, {FlagCorrelationID, "corr"}, {FlagMessageID, "msg"}, {FlagAppID, "app"},
		{FlagTimestamp, string(binary.BigEndian.AppendUint64(nil, uint64(ts.Unix())))},
		{FlagPriority, "\x09"},
	} {
		got, ok := PropertyField(enc, tt.flag)
		if !ok || string(got) != tt.want {
			t.Errorf("flag %#x: %q %v, want %q", tt.flag, got, ok, tt.want)
		}
	}
	if _, ok := PropertyField(enc, FlagReserved); ok {
		t.Error("absent property found")
	}
	for n := 0; n < len(enc); n++ { // cut short: absent, never a panic
		PropertyField(enc[:n], FlagAppID)
	}
	if _, ok := PropertyField(enc[:len(enc)-1], FlagAppID); ok {
		t.Error("truncated property found")
	}
}

func TestPropertiesRoundTrip(t *testing.T) {
	all := Properties{Flags: 0xfffe, ContentType: "a", ContentEncoding: "b", Headers: Table{"h": "v"},
		DeliveryMode: 2, Priority: 9, CorrelationID: "c", ReplyTo: "r", Expiration: "100", MessageID: "m",
		Type: "t", UserID: "u", AppID: "app", Reserved: "z"}
	enc := all.Append(nil)
	got, err := DecodeProperties(enc)
	if err != nil {
		t.Fatal(err)
	}
	got.Timestamp = all.Timestamp
	if got.ContentType != "a" || got.AppID != "app" || got.Reserved != "z" || got.Priority != 9 {
		t.Fatalf("%+v", got)
	}
	if re := got.Append(nil); !bytes.Equal(re, enc) {
		t.Fatal("re-encode differs")
	}
	for n := 0; n < len(enc); n++ {
		if _, err := ScanProperties(enc[:n]); err == nil {
			t.Fatalf("prefix %d scanned", n)
		}
	}
}
