package broker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/railmq/railmq/amqp"
)

// frameBytes builds a frame with any type, payload and frame-end octet.
func frameBytes(typ uint8, payload []byte, end byte) []byte {
	b := []byte{typ, 0, 1, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[3:], uint32(len(payload)))
	b = append(b, payload...)
	return append(b, end)
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// wantClose is a connection.close: code, text and the offending method.
type wantClose struct {
	code     uint16
	text     string
	cid, mid uint16
}

func checkClose(t *testing.T, err error, w wantClose) {
	t.Helper()
	var e *amqp.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *amqp.Error", err)
	}
	if e.Code != w.code || !e.Hard() {
		t.Fatalf("got %d %q (hard %v), want %d, a connection error", e.Code, e.Text, e.Hard(), w.code)
	}
	if e.Text != w.text || e.ClassID != w.cid || e.MethodID != w.mid {
		t.Fatalf("got %q %d/%d\nwant %q %d/%d", e.Text, e.ClassID, e.MethodID, w.text, w.cid, w.mid)
	}
}

// TestFrameError pins the connection.close for a framing fault the frame
// reader reports, as RabbitMQ 3.10 answers each (conformance
// TestMalformedInput sends some of them): 501 FRAME_ERROR, no method.
func TestFrameError(t *testing.T) {
	qos := amqp.AppendMethodPayload(nil, &amqp.BasicQos{PrefetchCount: 1})
	for _, tc := range []struct {
		name string
		in   []byte
		max  uint32 // negotiated frame_max; 0 before tuning
		want wantClose
	}{
		{"oversize method frame", frameBytes(1, make([]byte, 140000), amqp.FrameEnd), 131072,
			wantClose{501, "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,140000,131064}", 0, 0}},
		{"oversize body frame", frameBytes(3, make([]byte, 200000), amqp.FrameEnd), 131072,
			wantClose{501, "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,200000,131064}", 0, 0}},
		{"bad frame end", frameBytes(1, qos, 0), 131072,
			wantClose{501, "FRAME_ERROR - type 1, all octets = <<0,60,0,10,0,0,0,0,0,1,0>>: {invalid_frame_end_marker,0}", 0, 0}},
		{"bad frame end, in decimal", frameBytes(1, qos, 'A'), 131072,
			// One column past 78: Erlang's ~p breaks the line (checked
			// against RabbitMQ 3.10, conformance TestMalformedInput).
			wantClose{501, "FRAME_ERROR - type 1, all octets = <<0,60,0,10,0,0,0,0,0,1,0>>: {invalid_frame_end_marker,\n" + strings.Repeat(" ", 51) + "65}", 0, 0}},
		// Past 16 octets RabbitMQ shows the first 16 (rabbit_reader's
		// payload_snippet), and Erlang's ~p breaks the long line.
		{"bad frame end, long payload", frameBytes(1, append(append([]byte{}, qos...), seq(20)...), 0), 131072,
			wantClose{501, "FRAME_ERROR - type 1, first 16 octets = <<0,60,0,10,0,0,0,0,0,1,0,0,1,2,3,4>>: {invalid_frame_end_marker,\n" +
				strings.Repeat(" ", 66) + "0}", 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := amqp.NewFrameReader(bufio.NewReaderSize(bytes.NewReader(tc.in), 1<<20))
			fr.Max = tc.max
			f, err := fr.ReadFrame()
			if !errors.Is(err, amqp.ErrFrame) {
				t.Fatalf("ReadFrame: %v, want a framing fault", err)
			}
			checkClose(t, frameError(err, f), tc.want)
		})
	}
	t.Run("any other framing fault", func(t *testing.T) {
		e := frameError(fmt.Errorf("%w: something new", amqp.ErrFrame), amqp.Frame{})
		if e.Code != amqp.FrameError || !strings.HasPrefix(e.Text, "FRAME_ERROR - ") || !e.Hard() {
			t.Fatalf("got %d %q", e.Code, e.Text)
		}
	})
}

// TestDecodeError pins the connection.close for a method frame that does
// not decode, as RabbitMQ 3.10 answers each: 501 "cannot decode" and the
// arguments' octets (rabbit_misc:frame_error), naming the method.
func TestDecodeError(t *testing.T) {
	qos := amqp.AppendMethodPayload(nil, &amqp.BasicQos{PrefetchCount: 1})
	declare := amqp.AppendMethodPayload(nil, &amqp.QueueDeclare{Queue: string(seq(80))})
	long := "FRAME_ERROR - cannot decode <<0,0,80"
	for _, b := range seq(80) {
		long += fmt.Sprintf(",%d", b)
	}
	long = long[:252] + "..." // reply texts are cut to 255 octets
	for _, tc := range []struct {
		name    string
		payload []byte
		want    wantClose
	}{
		{"truncated arguments", []byte{0, 50, 0, 10, 0, 0, 5, 'a'},
			wantClose{501, "FRAME_ERROR - cannot decode <<0,0,5,97>>", 50, 10}},
		{"truncated fixed fields", qos[:6],
			wantClose{501, "FRAME_ERROR - cannot decode <<0,0>>", 60, 10}},
		{"trailing bytes", append(append([]byte{}, qos...), 0),
			wantClose{501, "FRAME_ERROR - cannot decode <<0,0,0,0,0,1,0,0>>", 60, 10}},
		// RabbitMQ drops the connection without a word at a table field of
		// an unknown type; railmq answers as for any undecodable method.
		{"unknown field type in a table", []byte{0, 50, 0, 10, 0, 0, 1, 'q', 0, 0, 0, 0, 5, 1, 'k', 'Z', 0, 0},
			wantClose{501, "FRAME_ERROR - cannot decode <<0,0,1,113,0,0,0,0,5,1,107,90,0,0>>", 50, 10}},
		// So does it at an unknown method; railmq answers 503
		// (conformance TestUnknownMethod).
		{"unknown method", []byte{0, 60, 0, 41},
			wantClose{503, "COMMAND_INVALID - unknown method 60/41", 60, 41}},
		{"unknown class", []byte{0, 0, 0, 0},
			wantClose{503, "COMMAND_INVALID - unknown method 0/0", 0, 0}},
		{"long arguments", append(declare, 0),
			wantClose{501, long, 50, 10}},
		// Shorter than its class and method ids, a method frame is an
		// unknown frame to RabbitMQ (rabbit_command_assembler:analyze_frame).
		{"no method ids", []byte{0, 60},
			wantClose{501, "FRAME_ERROR - type 1, all octets = <<0,60>>: unknown_frame", 0, 0}},
		{"empty method frame", nil,
			wantClose{501, "FRAME_ERROR - type 1, all octets = <<>>: unknown_frame", 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d amqp.Decoder
			m, err := d.Decode(tc.payload)
			if err == nil {
				t.Fatalf("decoded %#v", m)
			}
			checkClose(t, decodeError(err, tc.payload), tc.want)
		})
	}
}

// TestUnimplemented: a method only a server sends, received from a
// client, closes the connection with 503 "unimplemented method" naming
// it, as RabbitMQ 3.10 answers each.
func TestUnimplemented(t *testing.T) {
	for _, tc := range []struct {
		m        amqp.Method
		cid, mid uint16
	}{
		{&amqp.ConnectionStart{}, 10, 10},
		{&amqp.ChannelOpenOk{}, 20, 11},
		{&amqp.QueueDeclareOk{Queue: "q"}, 50, 11},
		{&amqp.BasicGetEmpty{}, 60, 72},
		{&amqp.BasicDeliver{ConsumerTag: "c", DeliveryTag: 1}, 60, 60},
		{&amqp.TxSelectOk{}, 90, 11},
		{&amqp.ConfirmSelectOk{}, 85, 11},
		// RabbitMQ sends basic.cancel with nowait: it takes no
		// basic.cancel-ok from a client either.
		{&amqp.BasicCancelOk{ConsumerTag: "c"}, 60, 31},
	} {
		t.Run(tc.m.Name(), func(t *testing.T) {
			if clientMethod(tc.m) {
				t.Fatalf("%s is not a method a client sends", tc.m.Name())
			}
			checkClose(t, unimplemented(tc.m), wantClose{503, "COMMAND_INVALID - unimplemented method", tc.cid, tc.mid})
		})
	}
}

// TestReaderGrows: a connection whose reads keep filling the small read
// buffer gets the large one, frames of 1 KiB (which never leave the small
// buffer empty between two frames) included, and no byte buffered at the
// swap is lost: every frame arrives whole and in order.
func TestReaderGrows(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 2000
	var stream []byte
	for i := range n {
		p := seq(1024)
		binary.BigEndian.PutUint32(p, uint32(i))
		stream = append(stream, frameBytes(amqp.FrameBody, p, amqp.FrameEnd)...)
	}
	go func() {
		cc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer cc.Close()
		_, _ = cc.Write(stream)
		_, _ = io.Copy(io.Discard, cc) // until the test closes its side
	}()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := newConn(&Server{}, nc, 1)
	for i := range n {
		c.maybeGrowReader()
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if len(f.Payload) != 1024 || binary.BigEndian.Uint32(f.Payload) != uint32(i) || !bytes.Equal(f.Payload[4:], seq(1024)[4:]) {
			t.Fatalf("frame %d: %d bytes, id %d", i, len(f.Payload), binary.BigEndian.Uint32(f.Payload))
		}
	}
	if got := c.br.Size(); got != 64<<10 {
		t.Fatalf("read buffer %d bytes after %d frames of 1 KiB, want 64 KiB", got, n)
	}
}
