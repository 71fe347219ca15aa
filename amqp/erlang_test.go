package amqp

import (
	"strings"
	"testing"
)

// The renderings of Erlang terms RabbitMQ's texts use, each as RabbitMQ
// 3.10.8 printed it (conformance TestMalformedInput, TestInvalidExpiration
// and channel TestParseExpiration compare whole texts side by side).
func TestErlangTerms(t *testing.T) {
	for _, tc := range []struct{ name, got, want string }{
		{"empty binary", ErlBinary(nil), "<<>>"},
		{"printable binary", ErlBinary([]byte("hello")), `<<"hello">>`},
		{"binary with a control octet", ErlBinary([]byte{'a', 1}), "<<97,1>>"},
		{"binary with quote and backslash", ErlBinary([]byte(`a"\`)), `<<"a\"\\">>`},
		{"binary of Latin-1 octets", ErlBinary([]byte{0xc3, 0xa9}), "<<\"\xc3\xa9\">>"},
		{"binary with 127", ErlBinary([]byte{'a', 127}), "<<97,127>>"},
		{"binary with escapes", ErlBinary([]byte("a\n\t")), `<<"a\n\t">>`},
		{"~w binary", ErlBytes([]byte("hi")), "<<104,105>>"},
		{"string", ErlString([]byte("abc")), `"abc"`},
		{"empty string", ErlString(nil), `""`},
		{"string not printable", ErlString([]byte{1, 2}), "[1,2]"},
		{"pair ending at column 78", ErlPair(50, "invalid_frame_end_marker", "0"), "{invalid_frame_end_marker,0}"},
		{"pair past column 78", ErlPair(50, "invalid_frame_end_marker", "65"), "{invalid_frame_end_marker,\n" + strings.Repeat(" ", 51) + "65}"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	long := strings.Repeat("x", 300)
	if got := CutReplyText(long); len(got) != 255 || got != long[:252]+"..." {
		t.Errorf("CutReplyText of 300 octets: %d octets, %q...", len(got), got[len(got)-5:])
	}
	if got := CutReplyText(long[:255]); got != long[:255] {
		t.Error("CutReplyText cut a text of 255 octets")
	}
}
