package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
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
// quorum queue) and every link service. Both ends of a connection prove
// they know the cluster's secret (RabbitMQ's Erlang cookie) before
// either sends anything else, the listener first to the dialler, then
// the dialler to the listener:
//
//  1. the accepting side sends a random nonce (challengeLen bytes);
//  2. the dialler sends a nonce of its own and its proof,
//     HMAC-SHA256(secret, label "dialler", both nonces);
//  3. the accepting side checks it (a wrong one is dropped, and it has
//     sent nothing but its nonce) and sends its own proof, the HMAC
//     under the label "listener";
//  4. the dialler checks that (a wrong one: it hangs up having sent
//     nothing but its nonce and proof, no group name, no Raft byte) and
//     sends the group it wants, with an HMAC binding it to both nonces.
//
// So a process without the secret can neither join nor write to the
// log, nor, listening on a node's address while the node is down, learn
// anything of what the nodes would send it. Each side's nonce makes its
// peer's proof fresh, and the labels keep a proof from being played
// back to its author. Without TLS the link is authenticated, not
// encrypted (docs/clustering.md). Layer gives each group its
// raft.StreamLayer.
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

// The handshake's lengths: a nonce, the dialler's nonce and proof
// (all a listener without the secret ever gets from a dialler).
const (
	proofLen     = sha256.Size
	dialProofLen = challengeLen + proofLen
)

// The labels of the handshake's proofs: each side proves its own role,
// so that neither proof is accepted in the other's place.
const (
	labelDialler  = "railmq cluster v2 dialler\x00"
	labelListener = "railmq cluster v2 listener\x00"
	labelGroup    = "railmq cluster v2 group\x00"
)

// handshakeIn runs the accepting side of the handshake (see Mux): it
// checks the dialler's proof, proves itself, and reads the group the
// dialler wants.
func (m *Mux) handshakeIn(c net.Conn) (string, error) {
	_ = c.SetDeadline(time.Now().Add(handshakeWait))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	ours := make([]byte, challengeLen)
	if _, err := rand.Read(ours); err != nil {
		return "", err
	}
	if _, err := c.Write(ours); err != nil {
		return "", err
	}
	var in [dialProofLen]byte
	if _, err := io.ReadFull(c, in[:]); err != nil {
		return "", err
	}
	theirs := in[:challengeLen]
	if !hmac.Equal(in[challengeLen:], m.mac(labelDialler, ours, theirs, nil)) {
		return "", ErrBadSecret
	}
	if _, err := c.Write(m.mac(labelListener, ours, theirs, nil)); err != nil {
		return "", err
	}
	var head [proofLen + 1]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return "", err
	}
	name := make([]byte, head[proofLen])
	if _, err := io.ReadFull(c, name); err != nil {
		return "", err
	}
	if !hmac.Equal(head[:proofLen], m.mac(labelGroup, ours, theirs, name)) {
		return "", ErrBadSecret
	}
	return string(name), nil
}

// mac is a proof of the handshake: the secret's HMAC of the label, the
// listener's nonce, the dialler's and (the last message) the group.
func (m *Mux) mac(label string, listener, dialler, group []byte) []byte {
	h := hmac.New(sha256.New, m.secret)
	h.Write([]byte(label))
	h.Write(listener)
	h.Write(dialler)
	h.Write(binary.BigEndian.AppendUint16(nil, uint16(len(group))))
	h.Write(group)
	return h.Sum(nil)
}

// dial connects to a peer's Mux for group: it answers the peer's nonce,
// and sends the group's name (and so, from its caller, anything else)
// only once the peer has proved it knows the secret.
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
	if err := m.handshakeOut(c, group); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: handshake with %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// handshakeOut runs the dialling side of the handshake (see Mux).
func (m *Mux) handshakeOut(c net.Conn, group string) error {
	theirs := make([]byte, challengeLen)
	if _, err := io.ReadFull(c, theirs); err != nil {
		return err
	}
	ours := make([]byte, challengeLen, dialProofLen)
	if _, err := rand.Read(ours); err != nil {
		return err
	}
	if _, err := c.Write(append(ours, m.mac(labelDialler, theirs, ours, nil)...)); err != nil {
		return err
	}
	proof := make([]byte, proofLen)
	if _, err := io.ReadFull(c, proof); err != nil {
		return err
	}
	if !hmac.Equal(proof, m.mac(labelListener, theirs, ours, nil)) {
		return ErrBadSecret
	}
	msg := append(m.mac(labelGroup, theirs, ours, []byte(group)), byte(len(group)))
	_, err := c.Write(append(msg, group...))
	return err
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
