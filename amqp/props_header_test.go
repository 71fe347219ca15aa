package amqp

import (
	"bytes"
	"testing"
	"time"
)

func TestAppendLongHeader(t *testing.T) {
	cases := []struct {
		name string
		p    Properties
	}{
		{"none", Properties{}},
		{"content type only", Properties{Flags: FlagContentType, ContentType: "text/plain"}},
		{"type and encoding", Properties{Flags: FlagContentType | FlagContentEncoding, ContentType: "a/b", ContentEncoding: "gzip"}},
		{"headers", Properties{Flags: FlagHeaders | FlagDeliveryMode, Headers: Table{"k": "v", "arr": []any{int64(1), "x"}, "tab": Table{"n": int32(3)}}, DeliveryMode: 2}},
		{"headers with the key already", Properties{Flags: FlagHeaders, Headers: Table{"x-stream-offset": int64(-1)}}},
		{"everything", Properties{Flags: FlagContentType | FlagContentEncoding | FlagHeaders | FlagDeliveryMode | FlagPriority | FlagCorrelationID |
			FlagReplyTo | FlagExpiration | FlagMessageID | FlagTimestamp | FlagType | FlagUserID | FlagAppID,
			ContentType: "t", ContentEncoding: "e", Headers: Table{"h": true}, DeliveryMode: 1, Priority: 4, CorrelationID: "c",
			ReplyTo: "r", Expiration: "100", MessageID: "m", Timestamp: time.Unix(1700000000, 0), Type: "ty", UserID: "u", AppID: "a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.p.Append(nil)
			out := AppendLongHeader([]byte("prefix"), in, "x-stream-offset", 1<<40+7)
			if string(out[:6]) != "prefix" {
				t.Fatalf("dst prefix lost")
			}
			got, err := DecodeProperties(out[6:])
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got.Headers["x-stream-offset"] != int64(1<<40+7) {
				t.Fatalf("x-stream-offset = %#v", got.Headers["x-stream-offset"])
			}
			// One entry of the key on the wire: a publisher's own is
			// replaced, not shadowed.
			if h, _ := PropertyField(out[6:], FlagHeaders); bytes.Count(h, []byte("x-stream-offset")) != 1 {
				t.Fatalf("x-stream-offset appears %d times in the table", bytes.Count(h, []byte("x-stream-offset")))
			}
			want := tc.p
			delete(got.Headers, "x-stream-offset")
			for k := range want.Headers {
				if k == "x-stream-offset" {
					continue
				}
				if _, ok := got.Headers[k]; !ok {
					t.Fatalf("header %q lost", k)
				}
			}
			got.Flags &^= FlagHeaders
			want.Flags &^= FlagHeaders
			got.Headers, want.Headers = nil, nil
			if string(got.Append(nil)) != string(want.Append(nil)) {
				t.Fatalf("other properties changed:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func FuzzAppendLongHeader(f *testing.F) {
	f.Add((&Properties{Flags: FlagHeaders, Headers: Table{"a": "b"}}).Append(nil))
	f.Add((&Properties{Flags: FlagContentType, ContentType: "x"}).Append(nil))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		out := AppendLongHeader(nil, p, "x-stream-offset", 5)
		if _, err := DecodeProperties(p); err == nil {
			got, err := DecodeProperties(out)
			if err != nil {
				t.Fatalf("valid properties made invalid: %v", err)
			}
			if got.Headers["x-stream-offset"] != int64(5) {
				t.Fatalf("header not set")
			}
		}
	})
}
