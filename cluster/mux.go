package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Mux is a node's inter-node listener (--cluster-listen): one TCP port
// for every Raft group the node is a member of (the metadata store, each
// quorum queue). A connection proves it knows the cluster's secret
// (RabbitMQ's Erlang cookie) before anything else: the accepting side
// sends a random challenge, the dialling side answers with
// HMAC-SHA256(secret, challenge) and the name of the group it wants; a
// wrong answer is dropped. So a process without the secret can neither
// join nor write to the log. Layer gives each group its raft.StreamLayer.
type Mux struct {
	ln     net.Listener
	from   *net.TCPAddr // dials from the listener's address, when it names one
	secret []byte
	tls    *tls.Config // nil: plain TCP between nodes

	mu     sync.Mutex // guards groups, conns and closed
	groups map[string]*layer
	conns  map[*muxConn]struct{} // accepted, handed to a group: closed by Close
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

// ErrBadSecret is a peer that did not answer the challenge with the
// cluster's secret.
var ErrBadSecret = errors.New("cluster: peer does not know the cluster secret")

const (
	challengeLen  = 32
	handshakeWait = 5 * time.Second
	maxGroupName  = 255
)

// NewMux serves ln for the groups registered with Layer. With tlsCfg,
// connections between nodes are TLS both ways (tlsCfg serves and
// presents the node's certificate and verifies the peer's), and the
// secret's challenge runs inside it.
func NewMux(ln net.Listener, secret []byte, tlsCfg *tls.Config) *Mux {
	m := &Mux{ln: ln, secret: secret, tls: tlsCfg, groups: map[string]*layer{}, conns: map[*muxConn]struct{}{}, done: make(chan struct{})}
	// A node listening on one address of a multi-homed host dials its
	// peers from that address too: the link between nodes stays on the
	// network chosen for it (and each node is known by its address).
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && ta.IP != nil && !ta.IP.IsUnspecified() {
		m.from = &net.TCPAddr{IP: ta.IP}
	}
	m.wg.Add(1)
	go m.accept()
	return m
}

// Addr is the listener's address.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// Close stops accepting, closes every group's layer and waits for the
// handshakes in progress.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	conns := m.conns
	m.conns = nil
	m.mu.Unlock()
	err := m.ln.Close()
	// The groups' readers are blocked in reads on these: closing them is
	// what ends those goroutines.
	for c := range conns {
		_ = c.Conn.Close()
	}
	m.wg.Wait()
	return err
}

// muxConn is an accepted connection the Mux closes when it closes.
type muxConn struct {
	net.Conn
	m    *Mux
	once sync.Once
}

func (c *muxConn) Close() error {
	c.once.Do(func() {
		c.m.mu.Lock()
		delete(c.m.conns, c)
		c.m.mu.Unlock()
	})
	return c.Conn.Close()
}

func (m *Mux) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if m.tls != nil {
				tc := tls.Server(c, m.tls)
				_ = tc.SetDeadline(time.Now().Add(handshakeWait))
				if err := tc.Handshake(); err != nil {
					c.Close()
					return
				}
				c = tc
			}
			group, err := m.handshakeIn(c)
			if err != nil {
				c.Close()
				return
			}
			m.mu.Lock()
			l := m.groups[group]
			mc := &muxConn{Conn: c, m: m}
			if l != nil && !m.closed {
				m.conns[mc] = struct{}{}
			}
			m.mu.Unlock()
			if l == nil {
				c.Close()
				return
			}
			select {
			case l.conns <- mc:
			case <-l.closed:
				mc.Close()
			case <-m.done:
				mc.Close()
			}
		}()
	}
}

// handshakeIn checks a dialler's answer and reads the group it wants.
func (m *Mux) handshakeIn(c net.Conn) (string, error) {
	_ = c.SetDeadline(time.Now().Add(handshakeWait))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	challenge := make([]byte, challengeLen)
	if _, err := rand.Read(challenge); err != nil {
		return "", err
	}
	if _, err := c.Write(challenge); err != nil {
		return "", err
	}
	var answer [sha256.Size + 1]byte
	if _, err := io.ReadFull(c, answer[:]); err != nil {
		return "", err
	}
	name := make([]byte, answer[sha256.Size])
	if _, err := io.ReadFull(c, name); err != nil {
		return "", err
	}
	if subtle.ConstantTimeCompare(answer[:sha256.Size], m.mac(challenge, name)) != 1 {
		return "", ErrBadSecret
	}
	return string(name), nil
}

// mac binds the answer to the challenge and the group asked for.
func (m *Mux) mac(challenge, group []byte) []byte {
	h := hmac.New(sha256.New, m.secret)
	h.Write([]byte("railmq cluster v1\x00"))
	h.Write(challenge)
	h.Write(binary.BigEndian.AppendUint16(nil, uint16(len(group))))
	h.Write(group)
	return h.Sum(nil)
}

// dial connects to a peer's Mux for group and answers its challenge.
func (m *Mux) dial(addr, group string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if m.from != nil {
		d.LocalAddr = m.from
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(handshakeWait))
	if m.tls != nil {
		cfg := m.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("cluster: TLS with %s: %w", addr, err)
		}
		c = tc
	}
	challenge := make([]byte, challengeLen)
	if _, err := io.ReadFull(c, challenge); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: handshake with %s: %w", addr, err)
	}
	msg := append(m.mac(challenge, []byte(group)), byte(len(group)))
	if _, err := c.Write(append(msg, group...)); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: handshake with %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// Layer registers group and returns its stream layer, for
// raft.NewNetworkTransport.
func (m *Mux) Layer(group string) (raft.StreamLayer, error) {
	if len(group) == 0 || len(group) > maxGroupName {
		return nil, fmt.Errorf("cluster: group name %q: 1 to %d bytes", group, maxGroupName)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groups[group] != nil {
		return nil, fmt.Errorf("cluster: group %q already has a layer", group)
	}
	l := &layer{m: m, group: group, conns: make(chan net.Conn), closed: make(chan struct{})}
	m.groups[group] = l
	return l, nil
}

// layer is one group's view of the Mux: a net.Listener of the
// connections that asked for the group, and a dialler that asks for it.
type layer struct {
	m     *Mux
	group string
	conns chan net.Conn
	once  sync.Once
	// closed is closed by Close: Accept returns, the Mux drops the group.
	closed chan struct{}
}

func (l *layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

func (l *layer) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.m.mu.Lock()
		delete(l.m.groups, l.group)
		l.m.mu.Unlock()
	})
	return nil
}

func (l *layer) Addr() net.Addr { return l.m.ln.Addr() }

func (l *layer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return l.m.dial(string(addr), l.group, timeout)
}
