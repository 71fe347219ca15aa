package cluster

import (
	"errors"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// Forwarding a quorum queue's commands to its leader, over the link
// (link.go, service "qq-rpc"): a node keeps one link to each leader it
// forwards to, and sends rounds on it without waiting for the answers
// before; the leader appends them in the order they arrive and answers
// in that order, once each is committed and applied.
//
// A round is a request of kind kindRound: the group's id (Str), then the
// encoded command (Raw: what the leader appends to its log). A question
// of how far a member has applied a group's log is a kindIndex request:
// the group's id. An answer is a status byte and, for statusOK, the
// encoded effects (a round) or the applied and commit indexes (a
// question); for statusError, the error's text.

const (
	kindRound byte = iota + 1
	kindIndex
	kindStreamRead // a stream group's items, for a member catching up (stream.go)
	kindQuery      // a question for the broker: its name and payload (query.go)
)

const (
	statusOK byte = iota
	statusNotLeader
	statusUnknownGroup
	statusError
	// statusLost: the leader lost its leadership with the round appended
	// and not known committed (raft.ErrLeadershipLost): the forwarder's
	// ErrUnknownOutcome, as the leader's own submitter gets.
	statusLost
)

// errNotSent is a round that never reached the leader: it may be sent
// again.
var errNotSent = errors.New("cluster: the command could not be sent to the leader")

// ErrUnknownOutcome is a round sent to a leader whose answer never came
// (the connection failed): it may or may not have been committed.
var ErrUnknownOutcome = errors.New("cluster: the leader did not answer; the command may or may not have been applied")

// errNoAnswer is a member that did not say how far it has applied a
// group's log in time.
var errNoAnswer = errors.New("cluster: no answer")

const (
	maxRPCFrame      = 64 << 20
	groupDialTimeout = 2 * time.Second
)

// groupLinkConfig is the configuration of the group RPC's links.
func (n *Node) groupLinkConfig() ConnConfig {
	return ConnConfig{MaxFrame: maxRPCFrame, WriteTimeout: n.timeout(), Heartbeat: LinkHeartbeat, DeadAfter: LinkDeadAfter}
}

// LinkHeartbeat and LinkDeadAfter are the inter-node links' liveness
// (ConnConfig.Heartbeat): a peer that sends nothing for LinkDeadAfter (a
// paused process, a network silently dropping its packets) has its links
// broken, and what waited on them answered. Raft takes a leader that
// silent for gone sooner (HeartbeatTimeout, 1 s, and an election); a
// round forwarded to it is given up then (Group.observe), and these
// bound what has no leader to change: the metadata writes forwarded,
// the links to classic queues homed on another node.
const (
	LinkHeartbeat = time.Second
	LinkDeadAfter = 5 * time.Second
)

// roundErr is what a round's submitter learns of a link error: sent or
// not (ErrOverflow, ErrClosed: it may be sent again), or of unknown
// outcome.
func roundErr(err error) error {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrOverflow) {
		return errNotSent
	}
	return ErrUnknownOutcome
}

// forwardGroup sends a round to the leader at addr: round is the group's
// id (Str) then the encoded command (what Group.send makes). done learns
// the outcome on another goroutine (or on this one, when the round could
// not be sent), once. abandon, when the round was sent, gives up waiting
// for its answer: done learns ErrUnknownOutcome then, unless the answer
// (or the link's failure) came first.
func (n *Node) forwardGroup(addr string, round []byte, done func(Effects, error)) (abandon func()) {
	c, err := n.groupLinks.dial(addr, n.groupLayer, groupDialTimeout, n.groupLinkConfig())
	if err != nil {
		done(Effects{}, errNotSent)
		return nil
	}
	id, err := c.call(kindRound, round, func(p []byte, err error) {
		if err != nil {
			done(Effects{}, roundErr(err))
			return
		}
		d := NewDec(p)
		switch st := d.U8(); {
		case d.Err() != nil:
			done(Effects{}, ErrUnknownOutcome)
		case st == statusOK:
			e, err := decodeEffects(d.Rest())
			if err != nil {
				done(Effects{}, ErrUnknownOutcome)
				return
			}
			done(e, nil)
		case st == statusNotLeader:
			done(Effects{}, ErrNotLeader)
		case st == statusUnknownGroup:
			done(Effects{}, errUnknownGroup)
		case st == statusLost:
			done(Effects{}, ErrUnknownOutcome)
		default:
			done(Effects{}, errors.New(string(d.Rest())))
		}
	})
	if err != nil {
		done(Effects{}, roundErr(err))
		return nil
	}
	return func() {
		if c.forget(id) {
			done(Effects{}, ErrUnknownOutcome)
		}
	}
}

// memberIndex asks the node at addr how far it has applied a group's
// log: its applied and commit indexes.
func (n *Node) memberIndex(addr, group string, timeout time.Duration) (applied, commit uint64, err error) {
	c, err := n.groupLinks.dial(addr, n.groupLayer, groupDialTimeout, n.groupLinkConfig())
	if err != nil {
		return 0, 0, err
	}
	p, err := c.CallWait(kindIndex, Enc(nil).Str(group), timeout)
	switch {
	case errors.Is(err, ErrTimeout):
		return 0, 0, errNoAnswer
	case err != nil:
		return 0, 0, roundErr(err)
	}
	d := NewDec(p)
	st := d.U8()
	applied, commit = d.Uvarint(), d.Uvarint()
	if st != statusOK || d.End() != nil {
		return 0, 0, errUnknownGroup
	}
	return applied, commit, nil
}

// roundSession is another node's group RPC link, on this node: the
// reader appends rounds to the groups' logs as they come, and an
// answerer sends each one's answer, in order, once its outcome is known.
type roundSession struct {
	n       *Node
	answers chan answer
}

type answer struct {
	id     uint64
	f      raft.ApplyFuture // nil: status says it all
	status byte
	extra  Enc // statusOK without f: the answer's payload
}

// openRounds serves a connection another node opened for the group RPC.
func (n *Node) openRounds(nc net.Conn) {
	s := &roundSession{n: n, answers: make(chan answer, 256)}
	cfg := n.groupLinkConfig()
	cfg.Handle = s.handle
	c, ok := n.groupLinks.serve(nc, cfg)
	if !ok {
		return
	}
	n.rpcWG.Add(1)
	go s.answerRounds(c)
}

// handle takes a round or a question, on the link's reader.
func (s *roundSession) handle(c *Conn, f Frame) error {
	d := NewDec(f.Body)
	if f.Kind == kindQuery {
		a := s.n.answerQuery(&d)
		a.id = f.ID
		select {
		case s.answers <- a:
		case <-c.Done():
		}
		return nil
	}
	id := d.Str()
	if d.Err() != nil {
		return d.Err()
	}
	s.n.gmu.Lock()
	g := s.n.groups[id]
	s.n.gmu.Unlock()
	r := g.raft()
	a := answer{id: f.ID}
	switch f.Kind {
	case kindIndex:
		if r == nil {
			a.status = statusUnknownGroup
		} else {
			a.extra = Enc(nil).Uvarint(r.AppliedIndex()).Uvarint(r.CommitIndex())
		}
	case kindStreamRead:
		if r == nil {
			a.status = statusUnknownGroup
		} else {
			a = g.readStream(&d)
			a.id = f.ID
		}
	case kindRound:
		switch {
		case r == nil:
			a.status = statusUnknownGroup
		case r.State() != raft.Leader:
			a.status = statusNotLeader
		default:
			a.f = r.Apply(d.Rest(), s.n.timeout())
		}
	default:
		return errUnexpected
	}
	select {
	case s.answers <- a:
	case <-c.Done():
	}
	return nil
}

// answerRounds answers the rounds in the order they came, each once
// raft has its outcome; it ends with the link.
func (s *roundSession) answerRounds(c *Conn) {
	defer s.n.rpcWG.Done()
	var buf Enc
	for {
		var a answer
		select {
		case a = <-s.answers:
		case <-c.Done():
			return
		}
		buf = buf[:0]
		if a.f != nil {
			err := a.f.Error()
			switch {
			case errors.Is(err, raft.ErrNotLeader):
				buf = buf.U8(statusNotLeader)
			case errors.Is(err, raft.ErrLeadershipLost):
				buf = buf.U8(statusLost)
			case err != nil:
				buf = buf.U8(statusError).Raw([]byte(err.Error()))
			default:
				e, _ := a.f.Response().(Effects)
				buf = encodeEffects(buf.U8(statusOK), &e)
			}
		} else {
			buf = buf.U8(a.status).Raw(a.extra)
		}
		if err := c.Answer(a.id, buf); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrBroken) {
			// Too large, or the buffer is full: the caller would wait
			// for an answer that never comes. Breaking the link fails
			// its calls (ErrUnknownOutcome), as a frame the caller
			// could not read did.
			c.Break(err)
		}
		if cap(buf) > keepBuffer {
			buf = nil
		}
	}
}

// encodeEffects is what a forwarded round's submitter needs of its
// effects: the answers to its publishes, purges and gets (deliveries to
// consumers happen where each node applies the entry, and are left out).
func encodeEffects(b Enc, e *Effects) Enc {
	var f byte
	if e.Accepted {
		f |= 1
	}
	if e.Got {
		f |= 2
	}
	if e.Duplicate {
		f |= 4
	}
	b = b.U8(f).Uvarint(uint64(e.Purged)).Uvarint(uint64(e.Remaining)).Uvarint(uint64(len(e.Refused)))
	for _, i := range e.Refused {
		b = b.Uvarint(uint64(i))
	}
	if e.Got {
		b = b.Uvarint(uint64(len(e.Deliveries)))
		for i := range e.Deliveries {
			d := &e.Deliveries[i]
			m := d.Msg
			b = b.Str(d.Consumer).Uvarint(d.ID).Bool(d.Redelivered).Uvarint(uint64(d.Count))
			b = b.Str(m.Exchange).Str(m.RoutingKey).Bytes(m.Props).Bytes(m.Body).Varint(m.TTL)
		}
	}
	b = b.Uvarint(uint64(len(e.Results)))
	for i := range e.Results {
		b = encodeEffects(b, &e.Results[i])
	}
	return b
}

// The least an encoded delivery and effects take.
const (
	minDelivery = 9
	minEffects  = 5
)

func decodeEffects(p []byte) (Effects, error) {
	d := NewDec(p)
	e := decodeEffectsFrom(&d, 0)
	if d.End() != nil {
		return Effects{}, ErrBadCommand
	}
	return e, nil
}

func decodeEffectsFrom(d *Dec, depth int) Effects {
	var e Effects
	if depth > 1 { // a batch's results, not nested further
		d.Fail(ErrMalformed)
		return e
	}
	f := d.U8()
	e.Accepted, e.Got, e.Duplicate = f&1 != 0, f&2 != 0, f&4 != 0
	e.Purged = int(d.Uvarint())
	e.Remaining = int(d.Uvarint())
	n := d.Count(1)
	for i := 0; i < n && d.Err() == nil; i++ {
		e.Refused = append(e.Refused, int(d.Uvarint()))
	}
	if e.Got {
		n := d.Count(minDelivery)
		for i := 0; i < n && d.Err() == nil; i++ {
			var dl Delivery
			dl.Consumer = d.Str()
			dl.ID = d.Uvarint()
			dl.Redelivered = d.Bool()
			dl.Count = uint32(d.Uvarint())
			var m Message
			m.Exchange, m.RoutingKey = d.Str(), d.Str()
			m.Props, m.Body = d.Bytes(), d.Bytes()
			m.TTL = d.Varint()
			dl.Msg = &m
			e.Deliveries = append(e.Deliveries, dl)
		}
	}
	n = d.Count(minEffects)
	for i := 0; i < n && d.Err() == nil; i++ {
		e.Results = append(e.Results, decodeEffectsFrom(d, depth+1))
	}
	return e
}
