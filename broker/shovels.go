package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/shovel"
	"github.com/railmq/railmq/vhost"
)

// Runtime parameters (RabbitMQ's PUT /api/parameters/{component}/{vhost}/
// {name}) and the dynamic shovels that those of component "shovel" run.
//
// A parameter is stored as a definition (kind defParam, named vhost,
// component and name) holding its value as given (JSON), replicated in a
// cluster like the policies (replicate.go). The management API validates a
// value before it calls PutParameter; the broker parses it again
// (shovel.Parse) to run it, and a value it cannot run is shown as a
// terminated shovel.
//
// Where shovels run: on a standalone node, here; in a cluster, on the
// metadata store's leader only (shovelLeaderLoop starts them when this
// node becomes the leader and stops them when it stops being it, so they
// move with the leadership). A host-less URI ("amqp://", "amqp:///vh")
// means this broker: the shovel's connection is a Unix socket pair whose
// other end this server serves as a direct connection (user "none", every
// permission in the vhost, as RabbitMQ's direct connections), no TCP.
//
// shovelSet.mu guards the parameters and the running shovels; it is a
// leaf (LOCKS.md) and never held while a shovel starts or stops.

const defParam = persist.DefParam

// ShovelComponent is the runtime parameter component of dynamic shovels.
const ShovelComponent = "shovel"

// Parameter is a runtime parameter.
type Parameter struct {
	VHost, Component, Name string
	Value                  json.RawMessage // as given
}

type paramKey struct{ vhost, component, name string }

// shovelRun is one shovel parameter's shovel on this node.
type shovelRun struct {
	sh  *shovel.Shovel // nil when its value cannot run (err)
	cfg shovel.Config
	err error
	at  time.Time // when err was found
}

type shovelSet struct {
	mu     sync.Mutex // guards below; a leaf (LOCKS.md)
	params map[paramKey]json.RawMessage
	runs   map[paramKey]*shovelRun // the shovels this node runs
	active bool                    // this node runs the shovels (standalone, or the cluster's leader)
	closed bool                    // Shutdown: start no more
	wg     sync.WaitGroup          // completions deleting their parameter; the leader loop
}

// loadParameters reads the stored runtime parameters (at start).
func (s *Server) loadParameters() error {
	s.shv.params = map[paramKey]json.RawMessage{}
	s.shv.runs = map[paramKey]*shovelRun{}
	return s.store.Definitions(func(kind byte, name, val []byte) error {
		if kind != defParam {
			return nil
		}
		parts, err := vhost.SplitDefName(name)
		if err != nil || len(parts) != 3 {
			return fmt.Errorf("runtime parameter definition %x: %v", name, err)
		}
		s.shv.params[paramKey{parts[0], parts[1], parts[2]}] = append(json.RawMessage(nil), val...)
		return nil
	})
}

// startShovels runs the stored shovels: here on a standalone node, on
// the leader in a cluster.
func (s *Server) startShovels() {
	if s.node == nil {
		s.setShovelsActive(true)
		return
	}
	s.shv.wg.Add(1)
	go s.shovelLeaderLoop()
}

// shovelLeaderLoop runs the shovels while this node leads the metadata
// store, checking every second until Shutdown.
func (s *Server) shovelLeaderLoop() {
	defer s.shv.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s.setShovelsActive(s.node.Status().State == "Leader")
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

// setShovelsActive starts every shovel parameter's shovel (on) or stops
// them all (off).
func (s *Server) setShovelsActive(on bool) {
	s.shv.mu.Lock()
	if s.shv.active == on || s.shv.closed {
		s.shv.mu.Unlock()
		return
	}
	s.shv.active = on
	var stop []*shovelRun
	var start []paramKey
	if on {
		for k := range s.shv.params {
			if k.component == ShovelComponent {
				start = append(start, k)
			}
		}
	} else {
		for k, r := range s.shv.runs {
			stop = append(stop, r)
			delete(s.shv.runs, k)
		}
	}
	s.shv.mu.Unlock()
	s.kickFederation()
	stopRuns(stop)
	for _, k := range start {
		s.reconcileShovel(k)
	}
	if len(start)+len(stop) > 0 {
		s.log.Info("shovels", zap.Bool("running_here", on), zap.Int("started", len(start)), zap.Int("stopped", len(stop)))
	}
}

func stopRuns(rs []*shovelRun) {
	for _, r := range rs {
		if r.sh != nil {
			r.sh.Stop()
		}
	}
}

// reconcileShovel makes the shovel of parameter k match its value: stops
// the one running, starts one for the value (if any, and if this node
// runs shovels).
func (s *Server) reconcileShovel(k paramKey) {
	s.shv.mu.Lock()
	old := s.shv.runs[k]
	delete(s.shv.runs, k)
	val, ok := s.shv.params[k]
	var r *shovelRun
	if ok && s.shv.active && !s.shv.closed {
		r = s.newShovelRun(k, val)
		s.shv.runs[k] = r
	}
	s.shv.mu.Unlock()
	if old != nil {
		stopRuns([]*shovelRun{old})
	}
	if r != nil && r.sh != nil {
		r.sh.Start()
	}
}

// newShovelRun parses a shovel's value and makes its shovel (not started).
func (s *Server) newShovelRun(k paramKey, val json.RawMessage) *shovelRun {
	var def map[string]any
	err := json.Unmarshal(val, &def)
	var cfg shovel.Config
	if err == nil {
		cfg, err = shovel.Parse(def)
	}
	if err == nil && (len(cfg.SrcURIs) == 0 || len(cfg.DestURIs) == 0) {
		err = fmt.Errorf("no URI to connect to")
	}
	if err != nil {
		s.log.Warn("shovel cannot run", zap.String("vhost", k.vhost), zap.String("shovel", k.name), zap.Error(err))
		return &shovelRun{err: err, at: time.Now()}
	}
	r := &shovelRun{cfg: cfg}
	r.sh = shovel.New(cfg, shovel.Options{Name: k.name, Vhost: k.vhost, ClusterName: s.nodeName(),
		Dialer: shovel.SplitDialer{Local: shovel.LocalDialer{Open: s.dialLocal}},
		Logger: s.log.Named("shovel"),
		OnComplete: func() {
			// src-delete-after reached: the shovel deletes its parameter,
			// as RabbitMQ's. Not on this goroutine: deleting stops it.
			s.shv.wg.Add(1)
			go func() {
				defer s.shv.wg.Done()
				s.shv.mu.Lock()
				same := s.shv.runs[k] == r
				s.shv.mu.Unlock()
				if !same {
					return
				}
				if _, err := s.DeleteParameter(k.component, k.vhost, k.name); err != nil {
					s.log.Error("completed shovel's parameter not deleted", zap.String("vhost", k.vhost), zap.String("shovel", k.name), zap.Error(err))
				}
			}()
		}})
	return r
}

// stopShovels stops every shovel and waits for the completions in
// progress (Shutdown, before the connections close).
func (s *Server) stopShovels() {
	s.shv.mu.Lock()
	s.shv.closed = true
	var stop []*shovelRun
	for k, r := range s.shv.runs {
		stop = append(stop, r)
		delete(s.shv.runs, k)
	}
	s.shv.mu.Unlock()
	stopRuns(stop)
	s.shv.wg.Wait()
}

// Parameters lists the runtime parameters of component (all when "") in
// vhost vh (all when ""), sorted by vhost and name.
func (s *Server) Parameters(component, vh string) []Parameter {
	s.shv.mu.Lock()
	var out []Parameter
	for k, v := range s.shv.params {
		if (component == "" || k.component == component) && (vh == "" || k.vhost == vh) {
			out = append(out, Parameter{VHost: k.vhost, Component: k.component, Name: k.name, Value: v})
		}
	}
	s.shv.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.VHost != b.VHost {
			return a.VHost < b.VHost
		}
		if a.Component != b.Component {
			return a.Component < b.Component
		}
		return a.Name < b.Name
	})
	return out
}

// LookupParameter is one runtime parameter.
func (s *Server) LookupParameter(component, vh, name string) (Parameter, bool) {
	s.shv.mu.Lock()
	defer s.shv.mu.Unlock()
	v, ok := s.shv.params[paramKey{vh, component, name}]
	return Parameter{VHost: vh, Component: component, Name: name, Value: v}, ok
}

// PutParameter stores a runtime parameter (its value already validated)
// and, for a shovel, (re)starts its shovel. The vhost must exist.
func (s *Server) PutParameter(p Parameter) (created bool, err error) {
	if !json.Valid(p.Value) {
		return false, fmt.Errorf("parameter %s/%s/%s: value is not JSON", p.VHost, p.Component, p.Name)
	}
	_, had := s.LookupParameter(p.Component, p.VHost, p.Name)
	return !had, s.writeParameter(paramKey{p.VHost, p.Component, p.Name}, p.Value)
}

// DeleteParameter removes a runtime parameter (a shovel's stops); it
// reports whether there was one.
func (s *Server) DeleteParameter(component, vh, name string) (found bool, err error) {
	if _, had := s.LookupParameter(component, vh, name); !had {
		return false, nil
	}
	return true, s.writeParameter(paramKey{vh, component, name}, nil)
}

// writeParameter stores (val) or deletes (nil) a parameter: through the
// metadata store in a cluster (every node applies it as it is
// committed), else here.
func (s *Server) writeParameter(k paramKey, val json.RawMessage) error {
	name := vhost.DefName(k.vhost, k.component, k.name)
	if s.node != nil {
		return s.node.Write([]cluster.Op{{Key: metaKey(defParam, name), Val: val, Delete: val == nil}})
	}
	b := &persist.Batch{}
	if val != nil {
		b.PutDef(defParam, name, val)
	} else {
		b.DeleteDef(defParam, name)
	}
	if err := s.store.CommitSync(b); err != nil {
		return err
	}
	s.applyParameter(k, val)
	return nil
}

// applyParameter applies a stored parameter change to this node.
func (s *Server) applyParameter(k paramKey, val json.RawMessage) {
	s.shv.mu.Lock()
	if val == nil {
		delete(s.shv.params, k)
	} else {
		s.shv.params[k] = append(json.RawMessage(nil), val...)
	}
	s.shv.mu.Unlock()
	switch k.component {
	case ShovelComponent:
		s.reconcileShovel(k)
	case FederationUpstreamComponent, FederationUpstreamSetComponent:
		s.kickFederation()
	}
}

// applyParameterDef is applyParameter for a replicated definition.
func (s *Server) applyParameterDef(parts []string, val []byte, del bool) {
	if len(parts) != 3 {
		return
	}
	if del {
		val = nil
	}
	s.applyParameter(paramKey{parts[0], parts[1], parts[2]}, val)
}

// dropVHostParameters deletes a deleted vhost's parameters, in b and
// here, and stops its shovels (deleteVHostLocal).
func (s *Server) dropVHostParameters(vh string, b *persist.Batch) {
	var keys []paramKey
	s.shv.mu.Lock()
	for k := range s.shv.params {
		if k.vhost == vh {
			keys = append(keys, k)
			delete(s.shv.params, k)
			b.DeleteDef(defParam, vhost.DefName(k.vhost, k.component, k.name))
		}
	}
	s.shv.mu.Unlock()
	for _, k := range keys {
		s.reconcileShovel(k)
	}
}

// ShovelStatus is a dynamic shovel's state, for GET /api/shovels.
type ShovelStatus struct {
	// Node is the node that runs it ("": this one).
	Node        string `json:",omitempty"`
	Name, VHost string
	// State is RabbitMQ's: starting (also while it fails to connect, as
	// RabbitMQ's worker), running or terminated.
	State string
	// Reason is why it is terminated, as RabbitMQ prints it (~p).
	Reason    string
	Timestamp time.Time
	// The running shovel's URIs (without credentials) and ends.
	SrcURI, DestURI             string
	SrcQueue, SrcExchange       string
	SrcExchangeKey              string
	DestQueue, DestExchange     string
	DestExchangeKey             *string
	Moved, Published, Remaining int64
}

// localShovels reports the shovels this node runs in vhost vh (all when
// ""), sorted by vhost and name.
func (s *Server) localShovels(vh string) []ShovelStatus {
	s.shv.mu.Lock()
	type kr struct {
		k paramKey
		r *shovelRun
	}
	var rs []kr
	for k, r := range s.shv.runs {
		if vh == "" || k.vhost == vh {
			rs = append(rs, kr{k, r})
		}
	}
	s.shv.mu.Unlock()
	out := make([]ShovelStatus, 0, len(rs))
	for _, x := range rs {
		out = append(out, shovelStatus(x.k, x.r))
	}
	sortShovels(out)
	return out
}

func shovelStatus(k paramKey, r *shovelRun) ShovelStatus {
	st := ShovelStatus{Name: k.name, VHost: k.vhost}
	if r.sh == nil {
		st.State, st.Reason, st.Timestamp = string(shovel.Terminated), fmt.Sprintf("%q", r.err.Error()), r.at
		return st
	}
	ss := r.sh.Status()
	st.Timestamp = ss.Timestamp
	st.Moved, st.Published, st.Remaining = int64(ss.Moved), int64(ss.Published), ss.Remaining
	switch {
	case ss.State == shovel.Running:
		st.State = string(shovel.Running)
		st.SrcURI, st.DestURI = ss.SrcURI, ss.DestURI
		c := r.cfg
		st.SrcQueue, st.SrcExchange, st.SrcExchangeKey = c.SrcQueue, c.SrcExchange, c.SrcExchangeKey
		st.DestQueue, st.DestExchange, st.DestExchangeKey = c.DestQueue, c.DestExchange, c.DestExchangeKey
	case ss.State == shovel.Starting, ss.Connecting && !ss.Done:
		// RabbitMQ's worker stops before it reports when it cannot
		// connect, and is restarted: it shows "starting" throughout.
		st.State = string(shovel.Starting)
	case ss.ClosedByServer:
		// rabbit_shovel_worker.erl terminate/2 for a
		// {shutdown, {server_initiated_close, ...}}.
		st.State, st.Reason = string(shovel.Terminated), `"needed a restart"`
	default:
		st.State, st.Reason = string(shovel.Terminated), fmt.Sprintf("%q", ss.Reason)
	}
	return st
}

// restartShovelLocal restarts a shovel this node runs; false if there is
// none.
func (s *Server) restartShovelLocal(vh, name string) bool {
	k := paramKey{vh, ShovelComponent, name}
	s.shv.mu.Lock()
	_, ok := s.shv.runs[k]
	s.shv.mu.Unlock()
	if ok {
		s.reconcileShovel(k)
	}
	return ok
}

// dialLocal is a shovel's connection to this broker: one end of a Unix
// socket pair, the other served here as a direct connection.
func (s *Server) dialLocal(ctx context.Context) (net.Conn, error) {
	nc, _, err := s.dialLocalID(ctx)
	return nc, err
}

// dialLocalID is dialLocal, with the id of the connection this server
// serves at the other end.
func (s *Server) dialLocalID(context.Context) (net.Conn, uint64, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("socketpair: %w", err)
	}
	ends := [2]net.Conn{}
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "shovel")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				ends[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, 0, fmt.Errorf("socketpair: %w", err)
		}
		ends[i] = directConn{c}
	}
	c := newConn(s, ends[1], s.nextID.Add(1))
	c.direct = true
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		ends[0].Close()
		ends[1].Close()
		return nil, 0, ErrServerClosed
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go c.serve()
	return ends[0], c.id, nil
}

// directConn is one end of a direct connection's socket pair, with an
// address to show.
type directConn struct{ net.Conn }

var directAddr = &net.UnixAddr{Name: "direct", Net: "unix"}

func (directConn) LocalAddr() net.Addr  { return directAddr }
func (directConn) RemoteAddr() net.Addr { return directAddr }

// LocalURIVhost says whether a shovel URI has no host (this broker,
// RabbitMQ's direct connection) and, if so, the vhost it opens ("/" when
// it names none).
func LocalURIVhost(uri string) (vh string, local bool) {
	if !shovel.IsLocal(uri) {
		return "", false
	}
	return shovel.Vhost(uri), true
}
