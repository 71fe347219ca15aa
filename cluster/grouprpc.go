package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Forwarding a quorum queue's commands to its leader: a node keeps one
// connection (layer "qq-rpc") to each leader it forwards to, and sends
// rounds on it without waiting for the answers before; the leader
// appends them in the order they arrive and answers in that order, once
// each is committed and applied.
//
// A request: length (4 bytes), id (8), the group's id (1-byte length,
// then the bytes), the encoded command. An answer: length, id, a status
// byte, and for statusOK the encoded effects.
//
// groupClient.wmu is held while writing the socket (and nothing is taken
// under it); groupClient.mu guards the calls waiting for answers and is
// never held across I/O.

const (
	statusOK byte = iota
	statusNotLeader
	statusUnknownGroup
	statusError
)

// errNotSent is a round that never reached the leader: it may be sent
// again.
var errNotSent = errors.New("cluster: the command could not be sent to the leader")

// ErrUnknownOutcome is a round sent to a leader whose answer never came
// (the connection failed): it may or may not have been committed.
var ErrUnknownOutcome = errors.New("cluster: the leader did not answer; the command may or may not have been applied")

const maxRPCFrame = 64 << 20

type groupClient struct {
	n    *Node
	addr string

	wmu  sync.Mutex // held while writing conn
	conn net.Conn
	bw   *bufio.Writer

	mu    sync.Mutex // guards calls, next, dead
	calls map[uint64]answered
	next  uint64
	dead  bool
}

// answered learns a request's answer: its status and payload, or the
// error that kept it from coming.
type answered func(status byte, p []byte, err error)

// forwardGroup sends a round to the leader at addr; done learns the
// outcome on another goroutine.
func (n *Node) forwardGroup(addr, group string, data []byte, done func(Effects, error)) {
	c, err := n.groupClient(addr)
	if err != nil {
		done(Effects{}, errNotSent)
		return
	}
	c.call(group, data, func(st byte, p []byte, err error) {
		if err != nil {
			done(Effects{}, err)
			return
		}
		switch st {
		case statusOK:
			e, err := decodeEffects(p)
			if err != nil {
				done(Effects{}, ErrUnknownOutcome)
				return
			}
			done(e, nil)
		case statusNotLeader:
			done(Effects{}, ErrNotLeader)
		case statusUnknownGroup:
			done(Effects{}, errUnknownGroup)
		default:
			done(Effects{}, errors.New(string(p)))
		}
	})
}

// MemberIndex asks the node at addr how far it has applied a group's
// log: its applied and commit indexes.
func (n *Node) memberIndex(addr, group string, timeout time.Duration) (applied, commit uint64, err error) {
	c, err := n.groupClient(addr)
	if err != nil {
		return 0, 0, err
	}
	ch := make(chan error, 1)
	c.call("", []byte(group), func(st byte, p []byte, err error) {
		switch {
		case err != nil:
		case st != statusOK || len(p) != 16:
			err = errUnknownGroup
		default:
			applied, commit = binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:])
		}
		ch <- err
	})
	select {
	case err = <-ch:
		return applied, commit, err
	case <-time.After(timeout):
		return 0, 0, errors.New("cluster: no answer")
	}
}

func (n *Node) groupClient(addr string) (*groupClient, error) {
	n.gmu.Lock()
	c := n.clients[addr]
	n.gmu.Unlock()
	if c != nil {
		return c, nil
	}
	conn, err := n.qrpc.Dial(raft.ServerAddress(addr), 2*time.Second)
	if err != nil {
		return nil, err
	}
	c = &groupClient{n: n, addr: addr, conn: conn, bw: bufio.NewWriterSize(conn, 64<<10), calls: map[uint64]answered{}}
	n.gmu.Lock()
	if old := n.clients[addr]; old != nil { // another round dialled first
		n.gmu.Unlock()
		conn.Close()
		return old, nil
	}
	n.clients[addr] = c
	n.gmu.Unlock()
	n.rpcWG.Add(1)
	go c.read()
	return c, nil
}

func (c *groupClient) call(group string, data []byte, done answered) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		done(0, nil, errNotSent)
		return
	}
	c.next++
	id := c.next
	c.calls[id] = done
	c.mu.Unlock()
	var hdr [13]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(8+1+len(group)+len(data)))
	binary.BigEndian.PutUint64(hdr[4:], id)
	hdr[12] = byte(len(group))
	c.wmu.Lock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(c.n.timeout()))
	_, err := c.bw.Write(hdr[:])
	if err == nil {
		_, err = c.bw.WriteString(group)
	}
	if err == nil {
		_, err = c.bw.Write(data)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		c.mu.Lock()
		_, still := c.calls[id]
		delete(c.calls, id)
		c.mu.Unlock()
		c.close(ErrUnknownOutcome)
		if still {
			done(0, nil, ErrUnknownOutcome)
		}
	}
}

// close fails every call waiting for an answer with err and forgets the
// client, so that the next round dials again.
func (c *groupClient) close(err error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	calls := c.calls
	c.calls = nil
	c.mu.Unlock()
	c.conn.Close()
	c.n.gmu.Lock()
	if c.n.clients[c.addr] == c {
		delete(c.n.clients, c.addr)
	}
	c.n.gmu.Unlock()
	for _, done := range calls {
		done(0, nil, err)
	}
}

func (c *groupClient) read() {
	defer c.n.rpcWG.Done()
	br := bufio.NewReaderSize(c.conn, 64<<10)
	for {
		p, err := readFrame(br)
		if err != nil || len(p) < 9 {
			c.close(ErrUnknownOutcome)
			return
		}
		id := binary.BigEndian.Uint64(p)
		c.mu.Lock()
		done := c.calls[id]
		delete(c.calls, id)
		c.mu.Unlock()
		if done == nil {
			continue
		}
		done(p[8], p[9:], nil)
	}
}

func readFrame(br *bufio.Reader) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(br, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > maxRPCFrame {
		return nil, errors.New("cluster: rpc frame too large")
	}
	p := make([]byte, n)
	_, err := io.ReadFull(br, p)
	return p, err
}

// serveGroupRPC applies the rounds other nodes forward.
func (n *Node) serveGroupRPC() {
	defer n.rpcWG.Done()
	for {
		conn, err := n.qrpc.Accept()
		if err != nil {
			return
		}
		n.rpcWG.Add(2)
		answers := make(chan answer, 256)
		go n.readRounds(conn, answers)
		go n.answerRounds(conn, answers)
	}
}

type answer struct {
	id     uint64
	f      raft.ApplyFuture // nil: status says it all
	status byte
	extra  []byte // statusOK without f: the answer's payload
}

func (n *Node) readRounds(conn net.Conn, answers chan<- answer) {
	defer n.rpcWG.Done()
	defer close(answers)
	br := bufio.NewReaderSize(conn, 64<<10)
	for {
		p, err := readFrame(br)
		if err != nil || len(p) < 9 || len(p) < 9+int(p[8]) {
			conn.Close()
			return
		}
		a := answer{id: binary.BigEndian.Uint64(p)}
		if p[8] == 0 { // no group: a question about the one the data names
			n.gmu.Lock()
			g := n.groups[string(p[9:])]
			n.gmu.Unlock()
			if r := g.raft(); r == nil {
				a.status = statusUnknownGroup
			} else {
				a.extra = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, r.AppliedIndex()), r.CommitIndex())
			}
			answers <- a
			continue
		}
		n.gmu.Lock()
		g := n.groups[string(p[9:9+int(p[8])])]
		n.gmu.Unlock()
		r := g.raft()
		switch {
		case r == nil:
			a.status = statusUnknownGroup
		case r.State() != raft.Leader:
			a.status = statusNotLeader
		default:
			a.f = r.Apply(p[9+int(p[8]):], n.timeout())
		}
		answers <- a
	}
}

func (n *Node) answerRounds(conn net.Conn, answers <-chan answer) {
	defer n.rpcWG.Done()
	bw := bufio.NewWriterSize(conn, 64<<10)
	var buf []byte
	broken := false
	for a := range answers {
		buf = buf[:0]
		buf = append(buf, 0, 0, 0, 0)
		buf = binary.BigEndian.AppendUint64(buf, a.id)
		if a.f != nil {
			err := a.f.Error()
			switch {
			case errors.Is(err, raft.ErrNotLeader):
				buf = append(buf, statusNotLeader)
			case err != nil:
				buf = append(buf, statusError)
				buf = append(buf, err.Error()...)
			default:
				e, _ := a.f.Response().(Effects)
				buf = append(buf, statusOK)
				buf = encodeEffects(buf, &e)
			}
		} else {
			buf = append(buf, a.status)
			buf = append(buf, a.extra...)
		}
		if broken {
			continue // drain, so that the reader is not stuck
		}
		binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
		_ = conn.SetWriteDeadline(time.Now().Add(n.timeout()))
		if _, err := bw.Write(buf); err != nil {
			broken = true
			conn.Close()
			continue
		}
		if len(answers) == 0 {
			if err := bw.Flush(); err != nil {
				broken = true
				conn.Close()
			}
		}
	}
	_ = bw.Flush()
	conn.Close()
}

// encodeEffects is what a forwarded round's submitter needs of its
// effects: the answers to its publishes, purges and gets (deliveries to
// consumers happen where each node applies the entry, and are left out).
func encodeEffects(b []byte, e *Effects) []byte {
	var f byte
	if e.Accepted {
		f |= 1
	}
	if e.Got {
		f |= 2
	}
	b = append(b, f)
	b = binary.BigEndian.AppendUint32(b, uint32(e.Purged))
	b = binary.BigEndian.AppendUint32(b, uint32(e.Remaining))
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Refused)))
	for _, i := range e.Refused {
		b = binary.BigEndian.AppendUint32(b, uint32(i))
	}
	if e.Got {
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Deliveries)))
		for i := range e.Deliveries {
			d := &e.Deliveries[i]
			b = appendBytes(b, []byte(d.Consumer))
			b = binary.BigEndian.AppendUint64(b, d.ID)
			var r byte
			if d.Redelivered {
				r = 1
			}
			b = append(b, r)
			b = binary.BigEndian.AppendUint32(b, d.Count)
			b = appendMessage(b, d.Msg)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Results)))
	for i := range e.Results {
		b = encodeEffects(b, &e.Results[i])
	}
	return b
}

func decodeEffects(p []byte) (Effects, error) {
	r := reader{p: p}
	e := r.effects(0)
	if r.bad || len(r.p) != 0 {
		return Effects{}, ErrBadCommand
	}
	return e, nil
}

func (r *reader) effects(depth int) Effects {
	var e Effects
	f := r.take(1)
	if f == nil || depth > 1 {
		r.bad = true
		return e
	}
	e.Accepted, e.Got = f[0]&1 != 0, f[0]&2 != 0
	e.Purged = int(r.u32())
	e.Remaining = int(r.u32())
	n := r.u32()
	if uint64(n)*4 > uint64(len(r.p)) {
		r.bad = true
		return e
	}
	for i := uint32(0); i < n; i++ {
		e.Refused = append(e.Refused, int(r.u32()))
	}
	if e.Got {
		n := r.u32()
		for i := uint32(0); i < n && !r.bad; i++ {
			var d Delivery
			d.Consumer = string(r.bytes())
			d.ID = r.u64()
			if v := r.take(1); v != nil {
				d.Redelivered = v[0] == 1
			}
			d.Count = r.u32()
			m := r.message()
			d.Msg = &m
			e.Deliveries = append(e.Deliveries, d)
		}
	}
	n = r.u32()
	if uint64(n)*17 > uint64(len(r.p)) {
		r.bad = true
		return e
	}
	for i := uint32(0); i < n && !r.bad; i++ {
		e.Results = append(e.Results, r.effects(depth+1))
	}
	return e
}
