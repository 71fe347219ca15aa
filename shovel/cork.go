package shovel

import (
	"net"
	"sync"
)

// corkMax is how many bytes a corked connection buffers before a Write
// waits for the socket.
const corkMax = 256 << 10

// corkConn gathers writes and sends them from a goroutine of its own, in
// one syscall for whatever has accumulated: amqp091-go flushes every
// publish and every ack with a write of its own, which costs the shovel
// a syscall per message. Batches grow with the load (writes arriving
// while the socket write runs), never on a timer, as the broker's own
// writer (STYLE.md, Writing). A write error is returned by every later
// Write and closes the socket, so that amqp091-go's reader sees it too.
type corkConn struct {
	net.Conn

	mu     sync.Mutex // guards below; a leaf (LOCKS.md), never held across the socket write
	cond   *sync.Cond // on mu: room in buf, or an error
	buf    []byte     // written, not yet sent
	spare  []byte
	err    error
	signal chan struct{} // one slot: buf has bytes
	done   chan struct{} // closed by Close
	once   sync.Once
	wg     sync.WaitGroup
}

func cork(c net.Conn) *corkConn {
	cc := &corkConn{Conn: c, signal: make(chan struct{}, 1), done: make(chan struct{})}
	cc.cond = sync.NewCond(&cc.mu)
	cc.wg.Add(1)
	go cc.writer()
	return cc
}

// Write copies p into the buffer (waiting while it is full) and wakes the
// writer.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	for len(c.buf) >= corkMax && c.err == nil {
		c.cond.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	c.buf = append(c.buf, p...)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (c *corkConn) writer() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.signal:
		}
		c.mu.Lock()
		b := c.buf
		c.buf, c.spare = c.spare[:0], nil
		c.cond.Broadcast()
		c.mu.Unlock()
		if len(b) == 0 {
			continue
		}
		_, err := c.Conn.Write(b)
		c.mu.Lock()
		if err != nil && c.err == nil {
			c.err = err
			c.cond.Broadcast()
		}
		if c.spare == nil {
			c.spare = b[:0]
		}
		c.mu.Unlock()
		if err != nil {
			_ = c.Conn.Close()
			return
		}
	}
}

// Close closes the socket and stops the writer; what was not yet sent is
// dropped (amqp091-go closes after connection.close-ok, when nothing is
// left to send).
func (c *corkConn) Close() error {
	c.mu.Lock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	c.wg.Wait()
	return err
}
