package shovel

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
)

// TestCork: writes arrive in order, whole; after the peer goes, a Write
// fails; Close may be called twice.
func TestCork(t *testing.T) {
	a, b := net.Pipe()
	c := cork(a)
	var want bytes.Buffer
	got := make(chan []byte)
	go func() {
		data, _ := io.ReadAll(io.LimitReader(b, int64(200*1000)))
		got <- data
	}()
	for i := range 200 {
		p := bytes.Repeat([]byte{byte(i)}, 1000)
		want.Write(p)
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if data := <-got; !bytes.Equal(data, want.Bytes()) {
		t.Fatalf("read %d bytes, not what was written (%d)", len(data), want.Len())
	}
	b.Close()
	var err error
	for err == nil {
		_, err = c.Write([]byte("x"))
	}
	if !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write after the peer closed: %v", err)
	}
	_ = c.Close()
	if err := c.Close(); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("write after Close succeeded")
	}
}
