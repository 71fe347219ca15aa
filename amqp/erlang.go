package amqp

import (
	"strconv"
	"strings"
)

// RabbitMQ writes its reply texts with Erlang's io_lib:format. These
// render terms the way its ~p and ~w do, for the texts a client compares
// with RabbitMQ's (checked side by side with RabbitMQ 3.10: conformance
// TestMalformedInput, channel TestParseExpiration).

// CutReplyText is a reply text as RabbitMQ sends it: over 255 octets, the
// first 252 and "..." (rabbit_binary_generator:amqp_exception_explanation).
func CutReplyText(s string) string {
	if len(s) > 255 {
		return s[:252] + "..."
	}
	return s
}

// ErlBytes is a binary as ~w prints it: <<1,2,3>>.
func ErlBytes(p []byte) string {
	b := make([]byte, 0, 4+4*len(p))
	b = append(b, "<<"...)
	for i, x := range p {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(x), 10)
	}
	return string(append(b, ">>"...))
}

// ErlBinary is a binary as ~p prints it: <<"text">> when every octet is
// printable Latin-1, else as ErlBytes.
func ErlBinary(p []byte) string {
	if len(p) > 0 && printableLatin1(p) {
		return "<<" + erlQuote(p) + ">>"
	}
	return ErlBytes(p)
}

// ErlString is a list of octets (a string) as ~p prints it: "text" when
// every octet is printable Latin-1, else [1,2,3].
func ErlString(p []byte) string {
	if printableLatin1(p) {
		return erlQuote(p)
	}
	b := []byte{'['}
	for i, x := range p {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(x), 10)
	}
	return string(append(b, ']'))
}

// ErlPair is the tuple {tag,val} as ~p prints it starting at column col
// (the octets before it in the text, from the start of the explanation):
// on one line when it ends by column 78, else broken after the comma and
// val indented under the tuple's first element, as io_lib_pretty does at
// its default line length.
func ErlPair(col int, tag, val string) string {
	if col+len(tag)+len(val)+3 <= 78 {
		return "{" + tag + "," + val + "}"
	}
	return "{" + tag + ",\n" + strings.Repeat(" ", col+1) + val + "}"
}

// printableLatin1 is io_lib:printable_latin1_list: the printable Latin-1
// characters and the escapes \b \t \n \v \f \r \e.
func printableLatin1(p []byte) bool {
	for _, c := range p {
		switch {
		case c >= 32 && c <= 126, c >= 160:
		case c >= 8 && c <= 13, c == 27:
		default:
			return false
		}
	}
	return true
}

func erlQuote(p []byte) string {
	b := make([]byte, 0, len(p)+2)
	b = append(b, '"')
	for _, c := range p {
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, `\b`...)
		case '\t':
			b = append(b, `\t`...)
		case '\n':
			b = append(b, `\n`...)
		case '\v':
			b = append(b, `\v`...)
		case '\f':
			b = append(b, `\f`...)
		case '\r':
			b = append(b, `\r`...)
		case 27:
			b = append(b, `\e`...)
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
