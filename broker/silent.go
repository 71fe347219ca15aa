package broker

import (
	"net"
	"sync"
	"time"
)

// silentCloseDelay is how long a connection refused at login stays open
// before its socket is closed, as RabbitMQ's SILENT_CLOSE_DELAY
// (rabbit_reader): a client guessing passwords gets one answer per
// connection every 3 seconds, not thousands a second.
var silentCloseDelay = 3 * time.Second

// delayedCloses are the sockets of refused connections waiting out the
// delay: a timer each, and no goroutine, so that a flood of failed logins
// holds sockets for 3 seconds but no reader, writer or buffers.
type delayedCloses struct {
	mu   sync.Mutex // guards m; a leaf lock
	m    map[net.Conn]*time.Timer
	done bool // after closeAll: close at once
}

// add closes nc after d.
func (d *delayedCloses) add(nc net.Conn, after time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		nc.Close()
		return
	}
	if d.m == nil {
		d.m = map[net.Conn]*time.Timer{}
	}
	d.m[nc] = time.AfterFunc(after, func() {
		d.mu.Lock()
		delete(d.m, nc)
		d.mu.Unlock()
		drain(nc)
		nc.Close()
	})
}

// drain reads what the client sent meanwhile (its close-ok, say), so
// that the close is a FIN, not a RST that would lose the reply it was
// reading.
func drain(nc net.Conn) {
	buf := make([]byte, 512)
	for i := 0; i < 64; i++ {
		_ = nc.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := nc.Read(buf); err != nil {
			return
		}
	}
}

// closeAll closes every waiting socket now (Shutdown).
func (d *delayedCloses) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done = true
	for nc, t := range d.m {
		t.Stop()
		nc.Close()
	}
	d.m = nil
}
