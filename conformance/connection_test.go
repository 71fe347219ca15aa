package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

func dial(t *testing.T, url string) *rmq.Connection {
	t.Helper()
	c, err := rmq.Dial(url)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConnectAndClose(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	c, err := rmq.Dial(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	props := c.Properties
	for _, k := range []string{"product", "version", "platform", "cluster_name", "copyright", "information", "capabilities"} {
		if _, ok := props[k]; !ok {
			t.Errorf("server property %q missing", k)
		}
	}
	if _, ok := props["host"]; ok {
		t.Error("server property host must not be sent (errata §23)")
	}
	caps := props["capabilities"].(rmq.Table)
	if caps["authentication_failure_close"] != true {
		t.Errorf("capabilities %v", caps)
	}
	if c.Major != 0 || c.Minor != 9 {
		t.Errorf("version %d-%d", c.Major, c.Minor)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !c.IsClosed() {
		t.Fatal("not closed")
	}
}

func TestTuneDefaults(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	c := dial(t, b.URL)
	if c.Config.ChannelMax != 2047 || c.Config.FrameSize != 131072 || c.Config.Heartbeat != 10*time.Second {
		// amqp091-go asks for a 10 s heartbeat; the lower non-zero value wins.
		t.Fatalf("negotiated %+v", c.Config)
	}
	r := testutil.DialRaw(t, b.Addr)
	r.Write(amqp.ProtocolHeader[:])
	r.Expect((*amqp.ConnectionStart)(nil))
	r.Send(0, &amqp.ConnectionStartOk{Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	tune := r.Expect((*amqp.ConnectionTune)(nil)).(*amqp.ConnectionTune)
	if tune.ChannelMax != 2047 || tune.FrameMax != 131072 || tune.Heartbeat != 60 {
		t.Fatalf("tune %+v", tune)
	}
}

func TestTuneClientAsksForLess(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	c, err := rmq.DialConfig(b.URL, rmq.Config{ChannelMax: 10, FrameSize: 4096, Heartbeat: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Config.ChannelMax != 10 || c.Config.FrameSize != 4096 || c.Config.Heartbeat != 3*time.Second {
		t.Fatalf("negotiated %+v", c.Config)
	}
	// frame_max 4096 is honoured: a 10 KiB message goes out in 4 KiB frames.
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ch.Close()
}

func TestTuneServerLimits(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{ChannelMax: 16, FrameMax: 8192, Heartbeat: 5 * time.Second})
	c := dial(t, b.URL)
	if c.Config.ChannelMax != 16 || c.Config.FrameSize != 8192 || c.Config.Heartbeat != 5*time.Second {
		t.Fatalf("negotiated %+v", c.Config)
	}
}

// A tune-ok above what the server offered, or of 0 (no limit), or below
// 4096, gets the socket closed, as RabbitMQ does during tuning.
func TestTuneClientAsksForMore(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	for _, tc := range []struct {
		name           string
		channel, frame uint32
	}{
		{"frame_max above server", 2047, 200000},
		{"frame_max 0", 2047, 0},
		{"frame_max below 4096", 2047, 2048},
		{"channel_max 0", 0, 131072},
		{"channel_max above server", 4000, 131072},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testutil.DialRaw(t, b.Addr)
			r.Write(amqp.ProtocolHeader[:])
			r.Expect((*amqp.ConnectionStart)(nil))
			r.Send(0, &amqp.ConnectionStartOk{Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
			r.Expect((*amqp.ConnectionTune)(nil))
			r.Send(0, &amqp.ConnectionTuneOk{ChannelMax: uint16(tc.channel), FrameMax: tc.frame})
			r.Send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
			r.ExpectEOF(5 * time.Second)
		})
	}
	// amqp091-go asking for more simply gets the server's maximum.
	c, err := rmq.DialConfig(b.URL, rmq.Config{FrameSize: 1 << 20, ChannelMax: 60000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Config.FrameSize != 131072 || c.Config.ChannelMax != 2047 {
		t.Fatalf("negotiated %+v", c.Config)
	}
}

func TestThousandChannels(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	c := dial(t, b.URL)
	for round := range 2 { // the second round reuses the numbers
		chans := make([]*rmq.Channel, 0, 1000)
		for range 1000 {
			ch, err := c.Channel()
			if err != nil {
				t.Fatalf("round %d: open channel %d: %v", round, len(chans)+1, err)
			}
			chans = append(chans, ch)
		}
		for i, ch := range chans {
			if err := ch.Close(); err != nil {
				t.Fatalf("round %d: close channel %d: %v", round, i+1, err)
			}
		}
	}
	if c.IsClosed() {
		t.Fatal("connection closed")
	}
}

func TestChannelFlow(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	c := dial(t, b.URL)
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Flow(true); err != nil {
		t.Fatalf("flow(true): %v", err)
	}
	closed := c.NotifyClose(make(chan *rmq.Error, 1))
	_ = ch.Flow(false)
	e := closeErr(t, closed, "connection after channel.flow(false)")
	if e == nil || e.Code != 540 || e.Reason != "NOT_IMPLEMENTED - active=false" {
		t.Fatalf("flow(false): %v", e)
	}
}

func TestWrongProtocolHeader(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	hdrs := []string{"GET / HTTP/1.1\r\n\r\n", "AMQP\x00\x00\x09\x02"}
	if testutil.ExternalURL() == "" {
		// RabbitMQ still speaks AMQP 0-8; railmq does not, and answers it
		// as any other unknown header.
		hdrs = append(hdrs, "AMQP\x01\x01\x08\x00")
	}
	for _, hdr := range hdrs {
		r := testutil.DialRaw(t, b.Addr)
		r.Write([]byte(hdr))
		_ = r.NC.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(r.NC)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%q: socket not closed", hdr)
			}
		}
		if !bytes.Equal(got, []byte("AMQP\x00\x00\x09\x01")) {
			t.Fatalf("%q: got %q", hdr, got)
		}
	}
}

func TestWrongPassword(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	// amqp091-go does not advertise authentication_failure_close: the
	// socket is closed, which it reports as ErrCredentials.
	_, err := rmq.Dial("amqp://guest:wrong@" + b.Addr + "/")
	if !errors.Is(err, rmq.ErrCredentials) {
		t.Fatalf("got %v, want ErrCredentials", err)
	}
	_, err = rmq.Dial("amqp://nobody:guest@" + b.Addr + "/")
	if !errors.Is(err, rmq.ErrCredentials) {
		t.Fatalf("unknown user: got %v", err)
	}
	// A client that advertises it gets 403 with RabbitMQ's text.
	r := testutil.DialRaw(t, b.Addr)
	r.Write(amqp.ProtocolHeader[:])
	r.Expect((*amqp.ConnectionStart)(nil))
	r.Send(0, &amqp.ConnectionStartOk{ClientProperties: amqp.Table{"capabilities": amqp.Table{"authentication_failure_close": true}},
		Mechanism: "PLAIN", Response: "\x00guest\x00wrong", Locale: "en_US"})
	cc := r.ExpectConnectionClose()
	if cc.ReplyCode != 403 || cc.ReplyText != "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile." {
		t.Fatalf("got %+v", cc)
	}
	r.ExpectEOF(5 * time.Second)
}

func TestAMQPLAIN(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	c, err := rmq.DialConfig(b.URL, rmq.Config{SASL: []rmq.Authentication{&rmq.AMQPlainAuth{Username: "guest", Password: "guest"}}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = rmq.DialConfig(b.URL, rmq.Config{SASL: []rmq.Authentication{&rmq.AMQPlainAuth{Username: "guest", Password: "nope"}}})
	if !errors.Is(err, rmq.ErrCredentials) {
		t.Fatalf("got %v", err)
	}
}

func TestConfiguredUsers(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{Users: map[string]string{"alice": "s3cret"}})
	c, err := rmq.Dial("amqp://alice:s3cret@" + b.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := rmq.Dial(b.URL); !errors.Is(err, rmq.ErrCredentials) {
		t.Fatalf("guest must be gone when users are configured: %v", err)
	}
}

func TestUnknownVHost(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	_, err := rmq.Dial(b.URL + "nope")
	var e *rmq.Error
	if !errors.As(err, &e) || e.Code != 530 || e.Reason != "NOT_ALLOWED - vhost nope not found" {
		t.Fatalf("got %#v", err)
	}
}

func TestUpdateSecret(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	c := dial(t, b.URL)
	if err := c.UpdateSecret("guest", "rotation"); err != nil {
		t.Fatalf("update-secret: %v", err)
	}
	if c.IsClosed() {
		t.Fatal("closed")
	}
}

// RabbitMQ's internal user database takes any new secret (the method is
// for token-based backends) and leaves the user as it was: amqplib's own
// updateSecret tests send a secret that is not the password.
func TestUpdateSecretAnySecret(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	c := dial(t, b.URL)
	closed := c.NotifyClose(make(chan *rmq.Error, 1))
	if err := c.UpdateSecret("not-the-password", "token rotation"); err != nil {
		t.Fatalf("update-secret: %v", err)
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel after update-secret: %v", err)
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatalf("declare after update-secret: %v", err)
	}
	select {
	case e := <-closed:
		t.Fatalf("connection closed: %v", e)
	default:
	}
	// The password is unchanged.
	c2 := dial(t, b.URL)
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestHeartbeatTimeout(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 1, false)
	// The server sends heartbeats while we are silent...
	_ = r.NC.SetReadDeadline(time.Now().Add(3 * time.Second))
	f, err := r.FR.ReadFrame()
	if err != nil || f.Type != amqp.FrameHeartbeat {
		t.Fatalf("want a heartbeat, got %v %v", f, err)
	}
	// ...and drops us after 2 to 3 silent intervals.
	start := time.Now()
	r.ExpectEOF(6 * time.Second)
	if el := time.Since(start); el > 4*time.Second {
		t.Fatalf("dropped after %v", el)
	}
}

// A client silent for 2½ intervals is kept, as RabbitMQ (which drops at
// its second check in a row that saw nothing, 2 to 3 intervals after the
// last byte) keeps it at least sometimes: pika's BlockingConnection sends
// no heartbeats while the application blocks, so a stricter broker drops
// applications RabbitMQ keeps. Past 3 intervals it is dropped.
func TestHeartbeatSilenceLimit(t *testing.T) {
	testutil.InProcess(t) // RabbitMQ's limit depends on where its checks fall
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 1, false)
	last := time.Now() // our last byte
	_ = r.NC.SetReadDeadline(last.Add(2500 * time.Millisecond))
	for {
		f, err := r.FR.ReadFrame()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			break // 2½ intervals of our silence, and still open
		}
		if err != nil {
			t.Fatalf("dropped %v after our last byte (heartbeat 1 s)", time.Since(last).Round(time.Millisecond))
		}
		if f.Type != amqp.FrameHeartbeat {
			t.Fatalf("unexpected frame type %d", f.Type)
		}
	}
	r.ExpectEOF(time.Second) // by 3½ intervals
	if el := time.Since(last); el > 3250*time.Millisecond {
		t.Fatalf("dropped %v after our last byte, want by 3 intervals", el)
	}
}

func TestHeartbeatsKeepAlive(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	c, err := rmq.DialConfig(b.URL, rmq.Config{Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(3500 * time.Millisecond) // the behaviour under test is time itself
	if c.IsClosed() {
		t.Fatal("a heartbeating client was dropped")
	}
}

func TestHandshakeTimeout(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{HandshakeTimeout: 500 * time.Millisecond})
	r := testutil.DialRaw(t, b.Addr)
	start := time.Now()
	r.ExpectEOF(5 * time.Second)
	if el := time.Since(start); el < 400*time.Millisecond || el > 3*time.Second {
		t.Fatalf("dropped after %v", el)
	}
	// Half a handshake is dropped too.
	r = testutil.DialRaw(t, b.Addr)
	r.Write(amqp.ProtocolHeader[:])
	r.Expect((*amqp.ConnectionStart)(nil))
	r.ExpectEOF(5 * time.Second)
}

// TestMalformedInput pins the close code and text for each kind of bad
// input, as RabbitMQ 3.10 answers them (checked side by side).
func TestMalformedInput(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	pub := amqp.AppendMethodPayload(nil, &amqp.BasicPublish{RoutingKey: "k"})
	hdr := func(class uint16) []byte {
		return []byte{byte(class >> 8), byte(class), 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}
	}
	qos := amqp.AppendMethodPayload(nil, &amqp.BasicQos{PrefetchCount: 1})
	badEnd := testutil.Frame(1, 1, qos)
	badEnd[len(badEnd)-1] = 0
	badEndA := testutil.Frame(1, 1, qos)
	badEndA[len(badEndA)-1] = 'A'
	longBadEnd := testutil.Frame(1, 1, append(append([]byte{}, qos...), seqBytes(20)...))
	longBadEnd[len(longBadEnd)-1] = 0
	longDecode := "FRAME_ERROR - cannot decode <<0,0,80"
	for _, x := range seqBytes(80) {
		longDecode += fmt.Sprintf(",%d", x)
	}
	longDecode = longDecode[:252] + "..." // reply texts are cut to 255 octets
	for _, tc := range []struct {
		name     string
		input    []byte
		code     uint16
		text     string
		cid, mid uint16
	}{
		{"unknown frame type", testutil.Frame(9, 0, nil), 501, "FRAME_ERROR - type 9, all octets = <<>>: unknown_frame", 0, 0},
		{"oversize method frame", testutil.Frame(1, 1, make([]byte, 140000)), 501, "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,140000,131064}", 0, 0},
		{"oversize body frame", testutil.Frame(3, 1, make([]byte, 200000)), 501, "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,200000,131064}", 0, 0},
		{"bad frame end", badEnd, 501, "FRAME_ERROR - type 1, all octets = <<0,60,0,10,0,0,0,0,0,1,0>>: {invalid_frame_end_marker,0}", 0, 0},
		{"truncated method", testutil.Frame(1, 1, []byte{0, 50, 0, 10, 0, 0, 5, 'a'}), 501, "FRAME_ERROR - cannot decode <<0,0,5,97>>", 50, 10},
		{"trailing bytes", testutil.Frame(1, 1, append(qos, 0)), 501, "FRAME_ERROR - cannot decode <<0,0,0,0,0,1,0,0>>", 60, 10},
		{"method on unopened channel", testutil.Frame(1, 5, qos), 504, "CHANNEL_ERROR - expected 'channel.open'", 60, 10},
		{"second channel.open", testutil.Frame(1, 1, amqp.AppendMethodPayload(nil, &amqp.ChannelOpen{})), 504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10},
		{"body without method", testutil.Frame(3, 1, []byte("x")), 505, "UNEXPECTED_FRAME - expected method frame, got non method frame instead", 0, 0},
		{"header without method", testutil.Frame(2, 1, hdr(60)), 505, "UNEXPECTED_FRAME - expected method frame, got non method frame instead", 0, 0},
		{"heartbeat on a channel", testutil.Frame(8, 1, nil), 505, "UNEXPECTED_FRAME - type 8, all octets = <<>>", 0, 0},
		{"heartbeat with a payload", testutil.Frame(8, 0, []byte{1, 2, 3, 4}), 501, "FRAME_ERROR - type 8, all octets = <<1,2,3,4>>: unknown_frame", 0, 0},
		{"heartbeat with a payload on a channel", testutil.Frame(8, 1, []byte{1, 2, 3, 4}), 501, "FRAME_ERROR - type 8, all octets = <<1,2,3,4>>: unknown_frame", 0, 0},
		{"unsolicited connection.close-ok", testutil.Frame(1, 0, amqp.AppendMethodPayload(nil, &amqp.ConnectionCloseOk{})), 504, "CHANNEL_ERROR - unexpected method in connection state running", 10, 51},
		{"header on channel 0", testutil.Frame(2, 0, hdr(60)), 505, "UNEXPECTED_FRAME - type 2, all octets = <<0,60,0,0,0,0,0,0,0,0,0,1,0,0>>", 0, 0},
		{"method mid-content", append(testutil.Frame(1, 1, pub), testutil.Frame(1, 1, qos)...), 505, "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead", 60, 40},
		{"body instead of header", append(testutil.Frame(1, 1, pub), testutil.Frame(3, 1, []byte("x"))...), 505, "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead", 60, 40},
		{"header of another class", append(testutil.Frame(1, 1, pub), testutil.Frame(2, 1, hdr(50))...), 505, "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead", 60, 40},
		{"channel method on channel 0", testutil.Frame(1, 0, qos), 504, "CHANNEL_ERROR - unexpected method in connection state running", 60, 10},
		{"connection.open again", testutil.Frame(1, 0, amqp.AppendMethodPayload(nil, &amqp.ConnectionOpen{VirtualHost: "/"})), 504, "CHANNEL_ERROR - unexpected method in connection state running", 10, 40},
		{"server-only method", testutil.Frame(1, 1, amqp.AppendMethodPayload(nil, &amqp.ChannelOpenOk{})), 503, "COMMAND_INVALID - unimplemented method", 20, 11},
		{"close-ok on unopened channel", testutil.Frame(1, 7, amqp.AppendMethodPayload(nil, &amqp.ChannelCloseOk{})), 504, "CHANNEL_ERROR - expected 'channel.open'", 20, 41},
		{"prefetch_size", testutil.Frame(1, 1, amqp.AppendMethodPayload(nil, &amqp.BasicQos{PrefetchSize: 1000})), 540, "NOT_IMPLEMENTED - prefetch_size!=0 (1000)", 60, 10},
		{"recover requeue=false", testutil.Frame(1, 1, amqp.AppendMethodPayload(nil, &amqp.BasicRecover{})), 540, "NOT_IMPLEMENTED - requeue=false", 60, 110},
		// Payloads are printed with Erlang's ~p: printable ones as strings,
		// past 16 octets only the first 16 (rabbit_reader:payload_snippet),
		// and a line that would pass column 78 is broken.
		{"unknown frame type, printable payload", testutil.Frame(9, 0, []byte("hello")), 501, `FRAME_ERROR - type 9, all octets = <<"hello">>: unknown_frame`, 0, 0},
		{"unknown frame type, long payload", testutil.Frame(9, 0, seqBytes(20)), 501, "FRAME_ERROR - type 9, first 16 octets = <<0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15>>: unknown_frame", 0, 0},
		{"unknown frame type, payload with DEL", testutil.Frame(9, 0, []byte{'a', 127}), 501, "FRAME_ERROR - type 9, all octets = <<97,127>>: unknown_frame", 0, 0},
		{"unknown frame type, payload with escapes and Latin-1", testutil.Frame(9, 0, []byte("a\n\t\"\xe9")), 501, "FRAME_ERROR - type 9, all octets = <<\"a\\n\\t\\\"\xe9\">>: unknown_frame", 0, 0},
		{"heartbeat with a printable payload", testutil.Frame(8, 0, []byte("ping")), 501, `FRAME_ERROR - type 8, all octets = <<"ping">>: unknown_frame`, 0, 0},
		// One column more than "bad frame end" passes column 78: broken.
		{"bad frame end, in decimal", badEndA, 501, "FRAME_ERROR - type 1, all octets = <<0,60,0,10,0,0,0,0,0,1,0>>: {invalid_frame_end_marker,\n" + strings.Repeat(" ", 51) + "65}", 0, 0},
		{"bad frame end, long payload", longBadEnd, 501, "FRAME_ERROR - type 1, first 16 octets = <<0,60,0,10,0,0,0,0,0,1,0,0,1,2,3,4>>: {invalid_frame_end_marker,\n" + strings.Repeat(" ", 66) + "0}", 0, 0},
		{"method frame shorter than its ids", testutil.Frame(1, 1, []byte{0, 60}), 501, "FRAME_ERROR - type 1, all octets = <<0,60>>: unknown_frame", 0, 0},
		{"empty method frame", testutil.Frame(1, 1, nil), 501, "FRAME_ERROR - type 1, all octets = <<>>: unknown_frame", 0, 0},
		{"long undecodable arguments", testutil.Frame(1, 1, append(amqp.AppendMethodPayload(nil, &amqp.QueueDeclare{Queue: string(seqBytes(80))}), 0)), 501, longDecode, 50, 10},
		{"basic.cancel-ok from the client", testutil.Frame(1, 1, amqp.AppendMethodPayload(nil, &amqp.BasicCancelOk{ConsumerTag: "c"})), 503, "COMMAND_INVALID - unimplemented method", 60, 31},
		{"connection.tune after open", testutil.Frame(1, 0, amqp.AppendMethodPayload(nil, &amqp.ConnectionTune{})), 504, "CHANNEL_ERROR - unexpected method in connection state running", 10, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testutil.DialRaw(t, b.Addr)
			r.Handshake(nil, 0, true)
			r.Write(tc.input)
			cc := r.ExpectConnectionClose()
			if cc.ReplyCode != tc.code || cc.ReplyText != tc.text || cc.ClassID != tc.cid || cc.MethodID != tc.mid {
				t.Fatalf("got %d %q %d/%d\nwant %d %q %d/%d", cc.ReplyCode, cc.ReplyText, cc.ClassID, cc.MethodID, tc.code, tc.text, tc.cid, tc.mid)
			}
			r.ExpectEOF(5 * time.Second)
		})
	}
}

// Unknown class and method ids get 503; RabbitMQ itself drops the TCP
// connection without a word, which is what we improve on.
func TestUnknownMethod(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, true)
	r.Write(testutil.Frame(1, 1, []byte{0, 60, 0, 41}))
	cc := r.ExpectConnectionClose()
	if cc.ReplyCode != 503 || cc.ReplyText != "COMMAND_INVALID - unknown method 60/41" {
		t.Fatalf("got %+v", cc)
	}
}

func TestChannelMaxEnforced(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{ChannelMax: 4})
	r := testutil.DialRaw(t, b.Addr)
	r.Handshake(nil, 0, false)
	r.Send(5, &amqp.ChannelOpen{})
	cc := r.ExpectConnectionClose()
	if cc.ReplyCode != 530 || !strings.Contains(cc.ReplyText, "channel_max (4)") {
		t.Fatalf("got %+v", cc)
	}
}

func TestShutdownClosesClients(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	c := dial(t, b.URL)
	closed := c.NotifyClose(make(chan *rmq.Error, 1))
	done := make(chan error, 1)
	go func() { done <- b.Server.Shutdown(t.Context()) }()
	e := closeErr(t, closed, "connection at Shutdown")
	if e == nil || e.Code != 320 || e.Reason != "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'" {
		t.Fatalf("got %v", e)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return within 10s of closing its only client")
	}
}

// TestBinarySIGTERM runs the real binary: a SIGTERM closes clients with
// 320 and the process exits 0.
func TestBinarySIGTERM(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	addr := testutil.FreePort(t)
	cmd := exec.Command(bin, "--listen", addr, "--data-dir", t.TempDir(), "--log-format", "json")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	testutil.WaitListening(t, addr, 10*time.Second)
	c, err := rmq.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	closed := c.NotifyClose(make(chan *rmq.Error, 1))
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e := closeErr(t, closed, "connection at SIGTERM")
	if e == nil || e.Code != 320 {
		t.Fatalf("got %v", e)
	}
	if err := waitExit(t, cmd, 10*time.Second); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
	// RabbitMQ 3.10.8's lines (conformance/logs_test.go): accepting,
	// granted access, and the closing line with the shutdown's reason.
	for _, want := range []string{`"msg":"accepting AMQP connection `, `: user 'guest' authenticated and granted access to vhost '/'"`,
		`"msg":"closing AMQP connection `, `"reason":"broker shutdown"`, `"user":"guest"`, `"vhost":"/"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
}

// --listen takes a comma-separated list of addresses, as RabbitMQ's
// listeners.tcp.N: here both loopbacks on one port, each reachable and
// logged; an address that cannot be bound stops the broker with exit 1.
func TestBinaryListensOnSeveralAddresses(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	v4, v6 := "127.0.0.1:"+port, "[::1]:"+port
	cmd := exec.Command(bin, "--listen", v4+","+v6, "--data-dir", t.TempDir(), "--log-format", "json")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for _, addr := range []string{v4, v6} {
		testutil.WaitListening(t, addr, 10*time.Second)
		c, err := rmq.Dial("amqp://guest:guest@" + addr + "/")
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("close %s: %v", addr, err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.String())
	}
	for _, want := range []string{`"msg":"listening","addr":"` + v4 + `"`, `"msg":"listening","addr":"` + v6 + `"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}

	// The same port twice: the second cannot be bound.
	cmd = exec.Command(bin, "--listen", v4+","+v4, "--data-dir", t.TempDir(), "--log-format", "json")
	logs.Reset()
	cmd.Stderr = &logs
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(logs.String(), "cannot listen") {
		t.Fatalf("want exit 1 with 'cannot listen', got %v:\n%s", err, logs.String())
	}
}

// seqBytes is 0, 1, ..., n-1.
func seqBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}
