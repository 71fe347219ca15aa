package amqp

import (
	"errors"
	"fmt"
)

// Error is an AMQP exception: it becomes a channel.close or a
// connection.close carrying Code, Text and the offending method's ids.
// Whether it closes the channel or the connection follows from the code's
// class in the spec (IsHard), never from where it was raised.
type Error struct {
	Code     uint16
	Text     string
	ClassID  uint16
	MethodID uint16
}

func (e *Error) Error() string {
	return fmt.Sprintf("amqp %d: %s", e.Code, e.Text)
}

// Hard reports whether the error closes the whole connection (§1.2 of the
// spec: reply codes of class hard-error).
func (e *Error) Hard() bool { return IsHardError(e.Code) }

// Errorf builds an Error whose text is "<CONSTANT> - <detail>", as RabbitMQ
// words its exceptions.
func Errorf(code uint16, format string, args ...any) *Error {
	return &Error{Code: code, Text: ReplyText(code) + " - " + fmt.Sprintf(format, args...)}
}

// ErrMalformed wraps every decoding failure; the connection answers it
// with 502 SYNTAX_ERROR (or 501 FRAME_ERROR for framing faults).
var ErrMalformed = errors.New("malformed")

// ErrFrame wraps framing faults: bad frame-end, oversize frames, unknown
// frame types.
var ErrFrame = errors.New("frame error")

type syntaxError string

func (s syntaxError) Error() string { return string(s) }
func (s syntaxError) Unwrap() error { return ErrMalformed }

func errSyntax(s string) error { return syntaxError(s) }

// ReplyText returns the spec's constant name for a reply code in RabbitMQ's
// style (NOT_FOUND, PRECONDITION_FAILED…).
func ReplyText(code uint16) string {
	if s, ok := replyNames[code]; ok {
		return s
	}
	return "INTERNAL_ERROR"
}
