package cluster

import (
	"sort"
	"sync"
	"time"
)

// Questions one node's broker asks another's (what shovels and
// federation links it runs, for the management API of any node): a
// kindQuery request on the group RPC link, the question's name (Str) and
// its payload (Rest); the answer statusOK and the handler's bytes, or
// statusError and why. The broker answers through the handler it sets
// with SetQueryHandler, on the link's reader: it must not block long.

// QueryHandler answers a question of name with payload req.
type QueryHandler func(name string, req []byte) ([]byte, error)

type queryHandler struct {
	mu sync.Mutex // guards h; a leaf (LOCKS.md)
	h  QueryHandler
}

// SetQueryHandler sets what answers other nodes' questions.
func (n *Node) SetQueryHandler(h QueryHandler) {
	n.queries.mu.Lock()
	n.queries.h = h
	n.queries.mu.Unlock()
}

// answerQuery is a kindQuery request's answer.
func (n *Node) answerQuery(d *Dec) answer {
	name := d.Str()
	req := d.Rest()
	if d.Err() != nil {
		return answer{status: statusError, extra: Enc(nil).Raw([]byte(d.Err().Error()))}
	}
	n.queries.mu.Lock()
	h := n.queries.h
	n.queries.mu.Unlock()
	if h == nil {
		return answer{status: statusError, extra: Enc(nil).Raw([]byte("no query handler"))}
	}
	out, err := h(name, req)
	if err != nil {
		return answer{status: statusError, extra: Enc(nil).Raw([]byte(err.Error()))}
	}
	return answer{extra: Enc(nil).Raw(out)}
}

// RefusedError is the error of a question the other node answered with
// an error (it runs, but did not know or could not answer the question).
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return e.Reason }

// QueryAll asks every other member of the cluster question name with req,
// at once, each within timeout, and returns the answers by node name
// (a node that failed to answer is left out, its error in errs).
func (n *Node) QueryAll(name string, req []byte, timeout time.Duration) (answers map[string][]byte, errs map[string]error) {
	answers, errs = map[string][]byte{}, map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, addr := range n.Addrs() {
		if node == n.cfg.Name {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := n.query(addr, name, req, timeout)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[node] = err
				return
			}
			answers[node] = out
		}()
	}
	wg.Wait()
	return answers, errs
}

// Others names the other members, sorted.
func (n *Node) Others() []string {
	var out []string
	for node := range n.Addrs() {
		if node != n.cfg.Name {
			out = append(out, node)
		}
	}
	sort.Strings(out)
	return out
}

func (n *Node) query(addr, name string, req []byte, timeout time.Duration) ([]byte, error) {
	c, err := n.groupLinks.dial(addr, n.groupLayer, min(groupDialTimeout, timeout), n.groupLinkConfig())
	if err != nil {
		return nil, err
	}
	p, err := c.CallWait(kindQuery, Enc(nil).Str(name).Raw(req), timeout)
	if err != nil {
		return nil, err
	}
	d := NewDec(p)
	switch st := d.U8(); {
	case d.Err() != nil:
		return nil, d.Err()
	case st != statusOK:
		return nil, &RefusedError{Reason: string(d.Rest())}
	}
	return d.Rest(), nil
}
