package channel

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/railmq/railmq/amqp"
)

// TestParseExpiration pins the expiration property's parsing to
// RabbitMQ's (rabbit_basic:parse_expiration: string:to_integer, then
// rabbit_misc:check_expiry): what it takes, in ms, and the exact text of
// the 406 it closes the channel with otherwise, as RabbitMQ 3.10 answered
// each value (conformance TestInvalidExpiration pins some of them too).
func TestParseExpiration(t *testing.T) {
	const pre = "PRECONDITION_FAILED - invalid expiration "
	// Erlang's ~p breaks a long term onto a second line, indented to the
	// column after its opening brace.
	wrapped := func(value, tag, n string) string {
		open := "invalid expiration '" + value + "': {"
		return "PRECONDITION_FAILED - " + open + tag + ",\n" + strings.Repeat(" ", len(open)) + n + "}"
	}
	for _, tc := range []struct {
		in   string
		ms   int64
		text string // the 406's text; "" when the value is taken
	}{
		{in: "0", ms: 0},
		{in: "1", ms: 1},
		{in: "60000", ms: 60000},
		{in: "007", ms: 7}, // leading zeros are fine
		{in: "+5", ms: 5},  // so is a plus sign
		{in: "315360000000", ms: maxTTL},
		{in: "", text: pre + "'': no_integer"},
		{in: "abc", text: pre + "'abc': no_integer"},
		{in: "-", text: pre + "'-': no_integer"},
		{in: "+", text: pre + "'+': no_integer"},
		{in: "-abc", text: pre + "'-abc': no_integer"},
		{in: "--5", text: pre + "'--5': no_integer"},
		{in: "-+5", text: pre + "'-+5': no_integer"},
		{in: " 5", text: pre + "' 5': no_integer"},
		{in: "-5", text: pre + "'-5': {value_negative,-5}"},
		{in: "315360000001", text: pre + "'315360000001': {value_too_large,315360000001}"},
		{in: "3153600000000", text: pre + "'3153600000000': {value_too_large,3153600000000}"},

		{in: "-0", ms: 0},
		{in: "10abc", text: pre + `'10abc': {leftover_string,"abc"}`},
		{in: "5 ", text: pre + `'5 ': {leftover_string," "}`},
		{in: "1.5", text: pre + `'1.5': {leftover_string,".5"}`},
		// Erlang integers do not overflow: any number of digits is a number.
		{in: "9223372036854775808", text: wrapped("9223372036854775808", "value_too_large", "9223372036854775808")},
		{in: "99999999999999999999999", text: wrapped("99999999999999999999999", "value_too_large", "99999999999999999999999")},
		{in: "-99999999999999999999999", text: wrapped("-99999999999999999999999", "value_negative", "-99999999999999999999999")},
		// More, as RabbitMQ 3.10.8 answered each (probed side by side).
		{in: "-5x", text: pre + `'-5x': {leftover_string,"x"}`}, // leftover before the sign's check
		{in: "1e3", text: pre + `'1e3': {leftover_string,"e3"}`},
		{in: "1a\"b", text: pre + `'1a"b': {leftover_string,"a\"b"}`},
		{in: "1a\\b", text: pre + `'1a\b': {leftover_string,"a\\b"}`},
		{in: "1\x01", text: pre + "'1\x01': {leftover_string,[1]}"}, // not printable: a list
		{in: "1\u00e9", text: pre + "'1\u00e9': {leftover_string,\"\u00e9\"}"},
		{in: "00000000000000000000000000000000000005", ms: 5},
		{in: "999999999999999999", text: pre + "'999999999999999999': {value_too_large,999999999999999999}"}, // ends at column 77
		{in: "1000000000000000000", text: wrapped("1000000000000000000", "value_too_large", "1000000000000000000")},
		{in: "-100000000000000000", text: pre + "'-100000000000000000': {value_negative,-100000000000000000}"}, // column 78
		{in: "-1000000000000000000", text: wrapped("-1000000000000000000", "value_negative", "-1000000000000000000")},
		{in: "1xxxxxxxxxxxxxxxxxxxxxxx", text: wrapped("1xxxxxxxxxxxxxxxxxxxxxxx", "leftover_string", `"xxxxxxxxxxxxxxxxxxxxxxx"`)},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			ms, err := parseExpiration([]byte(tc.in))
			if tc.text == "" {
				if err != nil || ms != tc.ms {
					t.Fatalf("got %d, %v; want %d ms", ms, err, tc.ms)
				}
				return
			}
			var e *amqp.Error
			if !errors.As(err, &e) || e.Code != amqp.PreconditionFailed {
				t.Fatalf("got %d, %v; want 406 %q", ms, err, tc.text)
			}
			if e.Text != tc.text {
				t.Fatalf("got %q\nwant %q", e.Text, tc.text)
			}
		})
	}
}
