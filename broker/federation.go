package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/federation"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// Federation (RabbitMQ's federation plugin): the links this node runs.
//
// What is federated follows from the runtime parameters of components
// federation-upstream and federation-upstream-set (shovels.go stores
// them) and from the policies' federation keys: each exchange or queue
// whose policy names upstreams (federation-upstream, -set or -pattern) gets
// one link per upstream (package federation). federationLoop reconciles
// the running links with that every second and at once after a parameter
// or policy changes (kickFederation), and every tick feeds the running
// links their exchange's bindings and their queue's demand.
//
// Links run where shovels do (standalone: here; in a cluster: on the
// metadata leader). A link publishes downstream through a direct
// connection to this broker (LocalPublisher, in confirm mode), shown as
// the link's local_connection and local_channel. A link that goes because
// its policy or upstream went removes what it made upstream (the exchange
// link's queue and exchange, unless resource-cleanup-mode is never), as
// RabbitMQ's does; one stopped by a shutdown leaves them.
//
// fedSet.mu guards the running links; a leaf (LOCKS.md), never held while
// a link starts or stops.

// The federation plugin's runtime parameter components.
const (
	FederationUpstreamComponent    = "federation-upstream"
	FederationUpstreamSetComponent = "federation-upstream-set"
)

// fedTick is how often running links get their bindings and demand;
// every fedReconcileTicks-th tick the links are reconciled.
const (
	fedTick           = 100 * time.Millisecond
	fedReconcileTicks = 10
)

type fedKey struct{ vhost, kind, name, upstream string }

// fedRun is one link this node runs.
type fedRun struct {
	fp      string // what it was made from: another value means another link
	link    fedLink
	xl      *federation.ExchangeLink // nil for a queue link
	pub     *federation.LocalPublisher
	connID  atomic.Uint64 // the publisher's connection here
	binds   *fedBindings  // exchange links
	demand  *fedDemand    // queue links
	cleanup bool          // resource-cleanup-mode default
}

type fedLink interface {
	Start()
	Stop()
	Restart()
	Status() federation.Status
}

type fedSet struct {
	mu   sync.Mutex // guards runs; a leaf (LOCKS.md)
	runs map[fedKey]*fedRun
	kick chan struct{}
	wg   sync.WaitGroup // federationLoop; cleanups
}

// kickFederation asks federationLoop to reconcile now.
func (s *Server) kickFederation() {
	select {
	case s.fed.kick <- struct{}{}:
	default:
	}
}

// startFederation starts federationLoop (Shutdown stops it).
func (s *Server) startFederation() {
	s.fed.runs = map[fedKey]*fedRun{}
	s.fed.kick = make(chan struct{}, 1)
	s.fed.wg.Add(1)
	go s.federationLoop()
}

func (s *Server) federationLoop() {
	defer s.fed.wg.Done()
	t := time.NewTicker(fedTick)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-s.stop:
			s.stopFederation()
			return
		case <-s.fed.kick:
			s.reconcileFederation()
			n = 0
		case <-t.C:
			if n++; n >= fedReconcileTicks {
				s.reconcileFederation()
				n = 0
			}
			s.feedFederation()
		}
	}
}

// fedWant is a link that should run.
type fedWant struct {
	up      federation.Upstream
	fp      string
	x       *exchange.Exchange
	q       *queue.Queue
	vh      *vhost.VHost
	cleanup bool
}

// wantedLinks is every link the parameters and policies ask for, and
// whether this node runs links at all (none are wanted when it does not).
func (s *Server) wantedLinks() (map[fedKey]fedWant, bool) {
	s.shv.mu.Lock()
	active := s.shv.active && !s.shv.closed
	params := map[paramKey]json.RawMessage{}
	for k, v := range s.shv.params {
		if k.component == FederationUpstreamComponent || k.component == FederationUpstreamSetComponent {
			params[k] = v
		}
	}
	s.shv.mu.Unlock()
	want := map[fedKey]fedWant{}
	if !active || len(params) == 0 {
		return want, active
	}
	for _, st := range s.allVHosts() {
		v := st.v
		if !v.HasFederationPolicy() {
			continue
		}
		ups, sets := s.vhostUpstreams(v.Name(), params)
		for _, x := range v.Exchanges() {
			if x.Name == "" || x.Internal || x.Kind == exchange.FederationUpstream || len(x.Name) > 4 && x.Name[:4] == "amq." {
				continue
			}
			k, val := v.FederationPolicy(x.Name, false, nil)
			for _, up := range pickUpstreams(k, val, ups, sets) {
				if up.Exchange == "" {
					up.Exchange = x.Name
				}
				fp := fmt.Sprintf("x %p %s %+v", x, x.Type(), up)
				want[fedKey{v.Name(), "exchange", x.Name, up.Name}] = fedWant{up: up, fp: fp, x: x, vh: v, cleanup: up.ResourceCleanupMode != "never"}
			}
		}
		for _, q := range v.Queues() {
			c := q.Config()
			if vhost.IsStream(c.Args) || c.Exclusive {
				continue
			}
			k, val := v.FederationPolicy(c.Name, true, c.Args)
			for _, up := range pickUpstreams(k, val, ups, sets) {
				fp := fmt.Sprintf("q %p %+v", q, up)
				want[fedKey{v.Name(), "queue", c.Name, up.Name}] = fedWant{up: up, fp: fp, q: q, vh: v}
			}
		}
	}
	return want, active
}

// vhostUpstreams parses vh's upstreams and sets (a value that does not
// parse is left out, with a warning).
func (s *Server) vhostUpstreams(vh string, params map[paramKey]json.RawMessage) (map[string]federation.Upstream, map[string][]federation.SetEntry) {
	ups := map[string]federation.Upstream{}
	sets := map[string][]federation.SetEntry{}
	for k, raw := range params {
		if k.vhost != vh {
			continue
		}
		var err error
		if k.component == FederationUpstreamComponent {
			var def map[string]any
			if err = json.Unmarshal(raw, &def); err == nil {
				var u federation.Upstream
				if u, err = federation.ParseUpstream(k.name, def); err == nil {
					ups[k.name] = u
				}
			}
		} else {
			var def []any
			if err = json.Unmarshal(raw, &def); err == nil {
				var set []federation.SetEntry
				if set, err = federation.ParseSet(k.name, def); err == nil {
					sets[k.name] = set
				}
			}
		}
		if err != nil {
			s.log.Warn("federation parameter cannot be used", zap.String("vhost", vh), zap.String("component", k.component),
				zap.String("name", k.name), zap.Error(err))
		}
	}
	return ups, sets
}

// pickUpstreams is what a policy's federation key names: one upstream,
// a set ("all": every upstream), or the upstreams whose names match a
// pattern; sorted by name.
func pickUpstreams(key, val string, ups map[string]federation.Upstream, sets map[string][]federation.SetEntry) []federation.Upstream {
	switch key {
	case "federation-upstream":
		if u, ok := ups[val]; ok {
			return []federation.Upstream{u}
		}
	case "federation-upstream-set":
		return federation.Resolve(val, sets[val], ups)
	case "federation-upstream-pattern":
		re, err := regexp.Compile(val)
		if err != nil {
			return nil
		}
		var out []federation.Upstream
		for _, u := range federation.Resolve("all", nil, ups) {
			if re.MatchString(u.Name) {
				out = append(out, u)
			}
		}
		return out
	}
	return nil
}

// reconcileFederation starts the links wanted and not running (or
// running from another value) and stops the others. A link no longer
// wanted while this node runs links is gone for good (its policy, its
// upstream or its exchange went): what it made upstream is removed. One
// stopped because this node no longer runs links (another does now) keeps
// it: the link that runs elsewhere uses it.
func (s *Server) reconcileFederation() {
	want, active := s.wantedLinks()
	var stop []*fedRun
	var gone []*fedRun // removed for good: clean up upstream
	start := map[fedKey]*fedRun{}
	s.fed.mu.Lock()
	for k, r := range s.fed.runs {
		w, ok := want[k]
		if ok && w.fp == r.fp {
			continue
		}
		delete(s.fed.runs, k)
		stop = append(stop, r)
		if !ok && active {
			gone = append(gone, r)
		}
	}
	for k, w := range want {
		if _, ok := s.fed.runs[k]; ok {
			continue
		}
		r := s.newFedRun(k, w)
		s.fed.runs[k] = r
		start[k] = r
	}
	s.fed.mu.Unlock()
	for _, r := range stop {
		r.stop()
	}
	for _, r := range gone {
		if r.xl != nil && r.cleanup {
			s.cleanupLink(r.xl)
		}
	}
	for _, r := range start {
		r.link.Start()
	}
	if len(start)+len(stop) > 0 {
		s.log.Info("federation links", zap.Int("started", len(start)), zap.Int("stopped", len(stop)))
	}
}

func (r *fedRun) stop() {
	r.link.Stop()
	r.pub.Close()
}

// cleanupLink removes what a link made upstream, in the background.
func (s *Server) cleanupLink(l *federation.ExchangeLink) {
	s.fed.wg.Add(1)
	go func() {
		defer s.fed.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		go func() { // a shutdown does not wait for the upstream
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := l.Cleanup(ctx); err != nil {
			s.log.Warn("federation link's upstream resources not removed", zap.Error(err))
		}
	}()
}

// newFedRun makes the link k wants (not started).
func (s *Server) newFedRun(k fedKey, w fedWant) *fedRun {
	r := &fedRun{fp: w.fp, cleanup: w.cleanup}
	kind := "exchange"
	if w.q != nil {
		kind = "queue"
	}
	r.pub = &federation.LocalPublisher{Vhost: k.vhost,
		Name: fmt.Sprintf("Federation link (upstream: %s, %s: %s)", w.up.Name, kind, k.name),
		Open: func(ctx context.Context) (net.Conn, error) {
			nc, id, err := s.dialLocalID(ctx)
			if err == nil {
				r.connID.Store(id)
			}
			return nc, err
		}}
	opts := federation.Options{ClusterName: s.clusterName(), Vhost: k.vhost, Logger: s.log.Named("federation"),
		Dialer: federation.SplitDialer{Local: federation.LocalDialer{Open: s.dialLocal}}}
	if w.x != nil {
		r.binds = &fedBindings{x: w.x, changed: make(chan struct{}, 1)}
		r.binds.refresh()
		spec := federation.ExchangeSpec{Name: w.x.Name, Type: w.x.Type(), Durable: w.x.Durable, AutoDelete: w.x.AutoDelete,
			Internal: w.x.Internal, Args: federation.Table(w.x.Args)}
		r.xl = federation.NewExchangeLink(w.up, spec, r.pub, r.binds, opts)
		r.link = r.xl
		return r
	}
	c := w.q.Config()
	r.demand = &fedDemand{q: w.q, changed: make(chan struct{}, 1)}
	r.demand.refresh()
	spec := federation.QueueSpec{Name: c.Name, Durable: c.Durable, AutoDelete: c.AutoDelete, Args: federation.Table(c.Args)}
	r.link = federation.NewQueueLink(w.up, spec, r.pub, r.demand, opts)
	return r
}

// feedFederation gives the running links their bindings and demand.
func (s *Server) feedFederation() {
	s.fed.mu.Lock()
	runs := make([]*fedRun, 0, len(s.fed.runs))
	for _, r := range s.fed.runs {
		runs = append(runs, r)
	}
	s.fed.mu.Unlock()
	for _, r := range runs {
		if r.link.Status().State == federation.Running {
			_ = r.pub.Connect(context.Background())
		}
		if r.binds != nil {
			r.binds.refresh()
		}
		if r.demand != nil {
			r.demand.refresh()
		}
	}
}

// stopFederation stops every link (Shutdown) and waits for cleanups.
func (s *Server) stopFederation() {
	s.fed.mu.Lock()
	runs := s.fed.runs
	s.fed.runs = map[fedKey]*fedRun{}
	s.fed.mu.Unlock()
	for _, r := range runs {
		r.stop()
	}
}

// waitFederation waits for federationLoop, which stops the links once
// s.stop is closed, and for the cleanups (Shutdown).
func (s *Server) waitFederation() { s.fed.wg.Wait() }

// clusterName is this broker's name in federation (the cluster_name
// server property): in the upstream queue's name, x-bound-from and
// x-received-from.
func (s *Server) clusterName() string { return "railmq@" + hostname }

// fedBindings is a federated exchange's bindings, as its link repeats
// them upstream.
type fedBindings struct {
	x       *exchange.Exchange
	mu      sync.Mutex // guards gen, last; a leaf (LOCKS.md)
	gen     any        // the exchange's Generation last read
	last    []federation.Binding
	changed chan struct{}
}

func (b *fedBindings) refresh() {
	gen := b.x.Generation()
	b.mu.Lock()
	same := gen == b.gen
	b.mu.Unlock()
	if same {
		return // every tick but those after a bind or unbind
	}
	bs := b.x.Bindings()
	out := make([]federation.Binding, 0, len(bs))
	for _, x := range bs {
		out = append(out, federation.Binding{Key: x.Key, Args: federation.Table(x.Args)})
	}
	b.mu.Lock()
	b.gen, b.last = gen, out
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

func (b *fedBindings) Bindings() []federation.Binding {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]federation.Binding(nil), b.last...)
}

func (b *fedBindings) Changed() <-chan struct{} { return b.changed }

// fedDemand is whether a federated queue wants messages: it has a
// consumer and nothing ready.
type fedDemand struct {
	q       *queue.Queue
	wanted  atomic.Bool
	changed chan struct{}
}

func (d *fedDemand) refresh() {
	w := d.q.Consumers() > 0 && d.q.Ready() == 0
	if d.wanted.Swap(w) != w {
		select {
		case d.changed <- struct{}{}:
		default:
		}
	}
}

func (d *fedDemand) Wanted() bool             { return d.wanted.Load() }
func (d *fedDemand) Changed() <-chan struct{} { return d.changed }

// FederationLink is a link this node runs, for GET /api/federation-links.
type FederationLink struct {
	federation.Status
	// Node is the node that runs it ("": this one).
	Node string `json:",omitempty"`
	// LocalConnection is the name of its connection to this broker, and
	// LocalChannel that connection's channel, while it runs.
	LocalConnection string
	LocalChannel    *Channel
}

// localFederationLinks lists the links this node runs of vhost vh ("":
// all), by vhost, type, name and upstream.
func (s *Server) localFederationLinks(vh string) []FederationLink {
	type kr struct {
		k fedKey
		r *fedRun
	}
	s.fed.mu.Lock()
	var rs []kr
	for k, r := range s.fed.runs {
		if vh == "" || k.vhost == vh {
			rs = append(rs, kr{k, r})
		}
	}
	s.fed.mu.Unlock()
	var chans []Channel
	out := make([]FederationLink, 0, len(rs))
	for _, x := range rs {
		l := FederationLink{Status: x.r.link.Status()}
		if id := x.r.connID.Load(); id != 0 && l.State == federation.Running {
			if chans == nil {
				chans = s.Channels()
			}
			for i := range chans {
				if chans[i].Conn.ID == id {
					l.LocalConnection = chans[i].Conn.Name
					if chans[i].Number == 1 {
						l.LocalChannel = &chans[i]
					}
				}
			}
		}
		out = append(out, l)
	}
	sortLinks(out)
	return out
}

// restartFederationLinkLocal restarts the link of vhost vh with id that
// this node runs; false if there is none.
func (s *Server) restartFederationLinkLocal(vh, id string) bool {
	s.fed.mu.Lock()
	var l fedLink
	for k, r := range s.fed.runs {
		if k.vhost == vh && r.link.Status().ID == id {
			l = r.link
			break
		}
	}
	s.fed.mu.Unlock()
	if l == nil {
		return false
	}
	l.Restart()
	return true
}
