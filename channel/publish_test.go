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
		// differs says why railmq does not do what RabbitMQ does (yet).
		differs string
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

		{in: "-0", ms: 0, differs: "-0 is 0 to string:to_integer, and check_expiry takes 0"},
		{in: "10abc", text: pre + `'10abc': {leftover_string,"abc"}`, differs: "digits then other bytes are leftover_string, not no_integer"},
		{in: "5 ", text: pre + `'5 ': {leftover_string," "}`, differs: "digits then other bytes are leftover_string, not no_integer"},
		{in: "1.5", text: pre + `'1.5': {leftover_string,".5"}`, differs: "digits then other bytes are leftover_string, not no_integer"},
		// Erlang integers do not overflow: any number of digits is a number.
		{in: "9223372036854775808", text: wrapped("9223372036854775808", "value_too_large", "9223372036854775808"), differs: "a number past int64 is value_too_large, not no_integer"},
		{in: "99999999999999999999999", text: wrapped("99999999999999999999999", "value_too_large", "99999999999999999999999"), differs: "a number past int64 is value_too_large, not no_integer"},
		{in: "-99999999999999999999999", text: wrapped("-99999999999999999999999", "value_negative", "-99999999999999999999999"), differs: "a number past int64 is value_negative, not no_integer"},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			ms, err := parseExpiration([]byte(tc.in))
			if tc.text == "" {
				if err != nil || ms != tc.ms {
					if tc.differs != "" {
						divergent(t, "%s: got %d, %v; RabbitMQ takes it as %d ms", tc.differs, ms, err, tc.ms)
					}
					t.Fatalf("got %d, %v; want %d ms", ms, err, tc.ms)
				}
				return
			}
			var e *amqp.Error
			if !errors.As(err, &e) || e.Code != amqp.PreconditionFailed {
				t.Fatalf("got %d, %v; want 406 %q", ms, err, tc.text)
			}
			if e.Text != tc.text {
				if tc.differs != "" {
					divergent(t, "%s: got %q, RabbitMQ says %q", tc.differs, e.Text, tc.text)
				}
				t.Fatalf("got %q\nwant %q", e.Text, tc.text)
			}
		})
	}
}
