package broker

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"sort"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// Users, permissions and vhosts live in the store as definitions beside
// the vhosts' own (persist def kinds, names as vhost.DefName makes them),
// written at once (CommitSync) when an operator changes them.
const (
	defVHost     = persist.DefVHost // vhost name → VHostRecord
	defUser      = persist.DefUser  // user name → userRec
	defPerm      = persist.DefPerm  // vhost, user → permRec
	defTopicPerm = persist.DefTopic // vhost, user, exchange → topicRec
)

// VHostRecord is what is stored of a vhost (as JSON, under defVHost).
type VHostRecord struct {
	Description string           `json:"description"`
	Tags        []string         `json:"tags"`
	Limits      map[string]int64 `json:"limits"` // empty, not nil: a vhost-limits parameter of no limits (RabbitMQ's [])
	// DefaultQueueType is the type of the queues declared in the vhost
	// that name none (vhost.ParseDefaultQueueType); "" for none.
	DefaultQueueType string `json:"default_queue_type,omitempty"`
}

type userRec struct {
	Hash   string           `json:"password_hash"`
	Algo   string           `json:"hashing_algorithm"`
	Tags   []string         `json:"tags"`
	Limits map[string]int64 `json:"limits,omitempty"`
}

type permRec struct {
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

type topicRec struct {
	Write string `json:"write"`
	Read  string `json:"read"`
}

// vhostState is a vhost and what the API shows of it.
type vhostState struct {
	v   *vhost.VHost
	rec VHostRecord
}

// loadAccess reads the stored vhosts, users and permissions into s, and
// on a store that has none (a fresh one, or one written before railmq
// stored users) creates the default vhost and user, as a fresh RabbitMQ
// node does (RABBITMQ_DEFAULT_USER, _PASS, _VHOST): the users of
// Options.Users if given, else DefaultUser. Options.Users given to a
// store that has users are added or updated (their passwords set): they
// keep working as before users were stored.
func (s *Server) loadAccess() (vhosts map[string]VHostRecord, err error) {
	vhosts = map[string]VHostRecord{}
	type perm struct {
		vh, user string
		rec      permRec
	}
	type topic struct {
		vh, user, ex string
		rec          topicRec
	}
	var perms []perm
	var topics []topic
	err = s.store.Definitions(func(kind byte, name, val []byte) error {
		switch kind {
		case defVHost, defUser, defPerm, defTopicPerm:
		default:
			return nil
		}
		parts, err := vhost.SplitDefName(name)
		if err != nil {
			return err
		}
		switch {
		case kind == defVHost && len(parts) == 1:
			var r VHostRecord
			if err := json.Unmarshal(val, &r); err != nil {
				return fmt.Errorf("vhost %q: %w", parts[0], err)
			}
			vhosts[parts[0]] = r
		case kind == defUser && len(parts) == 1:
			var r userRec
			if err := json.Unmarshal(val, &r); err != nil {
				return fmt.Errorf("user %q: %w", parts[0], err)
			}
			h, err := auth.DecodeHash(r.Algo, r.Hash)
			if err != nil {
				return fmt.Errorf("user %q: %w", parts[0], err)
			}
			s.reg.PutUser(&auth.User{Name: parts[0], Hash: h, Algo: r.Algo, Tags: r.Tags, Limits: r.Limits})
		case kind == defPerm && len(parts) == 2:
			var r permRec
			if err := json.Unmarshal(val, &r); err != nil {
				return fmt.Errorf("permission of %q in %q: %w", parts[1], parts[0], err)
			}
			perms = append(perms, perm{parts[0], parts[1], r})
		case kind == defTopicPerm && len(parts) == 3:
			var r topicRec
			if err := json.Unmarshal(val, &r); err != nil {
				return fmt.Errorf("topic permission of %q in %q: %w", parts[1], parts[0], err)
			}
			topics = append(topics, topic{parts[0], parts[1], parts[2], r})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, p := range perms {
		pm, err := auth.NewPermission(p.rec.Configure, p.rec.Write, p.rec.Read)
		if err != nil {
			return nil, fmt.Errorf("permission of %q in %q: %w", p.user, p.vh, err)
		}
		s.reg.SetPermission(p.vh, p.user, pm)
	}
	for _, t := range topics {
		tp, err := auth.NewTopicPermission(t.ex, t.rec.Write, t.rec.Read, t.user, t.vh)
		if err != nil {
			return nil, fmt.Errorf("topic permission of %q in %q: %w", t.user, t.vh, err)
		}
		s.reg.SetTopicPermission(t.vh, t.user, tp)
	}
	b := &persist.Batch{}
	fresh := len(vhosts) == 0 && len(s.reg.Users()) == 0
	if fresh {
		vh := s.opts.DefaultVHost
		vhosts[vh] = VHostRecord{Description: "Default virtual host", Tags: []string{}}
		putVHostDef(b, vh, vhosts[vh])
		users := s.opts.Users
		if users == nil {
			users = map[string]string{s.opts.DefaultUser: s.opts.DefaultPass}
		}
		names := make([]string, 0, len(users))
		for n := range users {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := s.bootstrapUser(b, n, users[n], vh); err != nil {
				return nil, err
			}
		}
		s.log.Info("created the default vhost and users", zap.String("vhost", vh), zap.Strings("users", names))
	} else {
		for n, pass := range s.opts.Users {
			if u := s.reg.User(n); u != nil && u.CheckPassword(pass) {
				continue
			}
			if err := s.bootstrapUser(b, n, pass, s.opts.DefaultVHost); err != nil {
				return nil, err
			}
			s.log.Info("user from the command line stored", zap.String("user", n))
		}
	}
	if b.Len() > 0 {
		if err := s.store.CommitSync(b); err != nil {
			return nil, err
		}
	}
	return vhosts, nil
}

// bootstrapUser adds (or updates the password of) an administrator with
// every permission in vh, unless it has some there already.
func (s *Server) bootstrapUser(b *persist.Batch, name, pass, vh string) error {
	h, err := auth.HashPassword(auth.SHA256, pass)
	if err != nil {
		return err
	}
	u := &auth.User{Name: name, Hash: h, Algo: auth.SHA256, Tags: []string{"administrator"}}
	if old := s.reg.User(name); old != nil {
		u.Tags, u.Limits = old.Tags, old.Limits
	}
	s.reg.PutUser(u)
	putUserDef(b, u)
	if s.reg.Grant(vh, name).Permission() == nil {
		p, _ := auth.NewPermission(".*", ".*", ".*")
		s.reg.SetPermission(vh, name, p)
		putPermDef(b, vh, name, p)
	}
	return nil
}

func putVHostDef(b *persist.Batch, name string, r VHostRecord) {
	v, _ := json.Marshal(r)
	b.PutDef(defVHost, vhost.DefName(name), v)
}

func putUserDef(b *persist.Batch, u *auth.User) {
	tags := u.Tags
	if tags == nil {
		tags = []string{}
	}
	v, _ := json.Marshal(userRec{Hash: auth.EncodeHash(u.Hash), Algo: u.Algo, Tags: tags, Limits: u.Limits})
	b.PutDef(defUser, vhost.DefName(u.Name), v)
}

func putPermDef(b *persist.Batch, vh, user string, p *auth.Permission) {
	v, _ := json.Marshal(permRec{p.Configure, p.Write, p.Read})
	b.PutDef(defPerm, vhost.DefName(vh, user), v)
}

func putTopicDef(b *persist.Batch, vh, user string, tp *auth.TopicPermission) {
	v, _ := json.Marshal(topicRec{tp.Write, tp.Read})
	b.PutDef(defTopicPerm, vhost.DefName(vh, user, tp.Exchange), v)
}

// login checks user/pass for a client at remote. Loopback-only users
// (guest by default, as RabbitMQ's loopback_users) are refused from any
// other address.
func (s *Server) login(user, pass string, remote net.Addr) (*auth.User, bool) {
	u := s.reg.User(user)
	if u == nil || !u.CheckPassword(pass) {
		return nil, false
	}
	if slices.Contains(s.opts.LoopbackUsers, user) && !isLoopback(remote) {
		return nil, false
	}
	return u, true
}

func isLoopback(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return false
}

// openVHost makes the vhost's registry, sharing the broker's queue ids,
// page files and memory pressure.
func (s *Server) openVHost(name string) *vhost.VHost {
	vh := vhost.New(name, &s.memory, s.log, s.store, s.opts.QueueWindow, s.opts.QueueWindowBytes)
	vh.ShareQueueIDs(&s.queueIDs)
	vh.PageTransientTo(s.spill)
	vh.PageUnderPressure(&s.paging)
	vh.PacePublishers(!s.opts.NoPublisherPacing)
	vh.CountInto(&s.totals)
	if s.rep != nil { // in a cluster, nil while recovering: New sets it on every vhost
		vh.SetQuorum(s.rep)
	}
	if s.opts.Cluster != nil {
		vh.ReplicateTo(replicator{s})
	}
	return vh
}

// recoverVHosts opens the stored vhosts and recovers them all before
// any of their queues starts, then drops the entries of queues none of
// them keeps.
func (s *Server) recoverVHosts(recs map[string]VHostRecord, pols storedPolicies) error {
	keep := map[uint64]bool{}
	var starts []func()
	vhs := map[string]*vhostState{}
	names := make([]string, 0, len(recs))
	for n := range recs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		vh := s.openVHost(n)
		vh.SetMaxQueues(limitOf(recs[n].Limits, "max-queues"))
		vh.SetDefaultQueueType(recs[n].DefaultQueueType)
		if l, ok := pols[n]; ok {
			vh.SetPolicies(l[0], l[1]) // nothing to apply them to yet: recovery does
		}
		vhs[n] = &vhostState{v: vh, rec: recs[n]}
		if f := s.opts.RecoveryProgress; f != nil {
			vh.ReportRecovery(func(done, total, messages int) { f(n, done, total, messages) })
		}
		start, err := vh.RecoverDeferred(queue.Config{}, keep)
		if err != nil {
			for _, o := range vhs {
				o.v.Close()
			}
			return fmt.Errorf("vhost %q: %w", n, err)
		}
		starts = append(starts, start)
	}
	orphans, err := s.store.DropOrphans(keep)
	if err != nil {
		return err
	}
	if orphans > 0 {
		s.log.Info("orphaned queues dropped", zap.Int("queues", orphans))
	}
	for _, start := range starts {
		start()
	}
	s.vhosts.Store(&vhs)
	return nil
}

// vhostByName returns a vhost, or nil.
func (s *Server) vhostByName(name string) *vhostState { return (*s.vhosts.Load())[name] }

// allVHosts lists the vhosts by name.
func (s *Server) allVHosts() []*vhostState {
	m := *s.vhosts.Load()
	out := make([]*vhostState, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].v.Name() < out[j].v.Name() })
	return out
}

// vhostMap is the broker's vhosts, replaced whole on a change (copy on
// write, under vhMu) so that connection.open reads it without a lock.
type vhostMap = atomic.Pointer[map[string]*vhostState]

// putVHost adds a vhost, or updates its description, tags and limits.
// It reports whether it was new. In a cluster every node does it, as the
// change is committed (replicate.go).
func (s *Server) putVHost(name string, rec VHostRecord) (bool, error) {
	if s.node != nil {
		_, existed := (*s.vhosts.Load())[name]
		v, _ := json.Marshal(rec)
		return !existed, s.node.Write([]cluster.Op{{Key: metaKey(defVHost, vhost.DefName(name)), Val: v}})
	}
	return s.putVHostLocal(name, rec)
}

func (s *Server) putVHostLocal(name string, rec VHostRecord) (bool, error) {
	s.vhMu.Lock()
	defer s.vhMu.Unlock()
	old := *s.vhosts.Load()
	b := &persist.Batch{}
	putVHostDef(b, name, rec)
	if err := s.store.CommitSync(b); err != nil {
		return false, err
	}
	m := make(map[string]*vhostState, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	st, ok := old[name]
	if ok {
		m[name] = &vhostState{v: st.v, rec: rec}
	} else {
		m[name] = &vhostState{v: s.openVHost(name), rec: rec}
		s.log.Info("vhost created", zap.String("vhost", name))
	}
	m[name].v.SetMaxQueues(limitOf(rec.Limits, "max-queues"))
	m[name].v.SetDefaultQueueType(rec.DefaultQueueType)
	s.vhosts.Store(&m)
	return !ok, nil
}

// deleteVHost closes the vhost's connections (320, as RabbitMQ), then
// deletes everything in it and its permissions. It reports whether there
// was one. In a cluster every node does it, as the change is committed.
func (s *Server) deleteVHost(name string) (bool, error) {
	if s.node != nil {
		if s.vhostByName(name) == nil {
			return false, nil
		}
		// Its permissions and policies go with it, from the store too.
		ops := []cluster.Op{{Key: metaKey(defVHost, vhost.DefName(name)), Delete: true}}
		for _, kind := range []byte{defPerm, defTopicPerm, defPolicy, defOpPolicy, defParam, persist.DefExchange, persist.DefQueue, persist.DefBinding} {
			for _, o := range s.node.Keys(metaKey(kind, vhost.DefName(name))) {
				ops = append(ops, cluster.Op{Key: o.Key, Delete: true})
			}
		}
		return true, s.node.Write(ops)
	}
	return s.deleteVHostLocal(name)
}

func (s *Server) deleteVHostLocal(name string) (bool, error) {
	s.vhMu.Lock()
	defer s.vhMu.Unlock()
	old := *s.vhosts.Load()
	st, ok := old[name]
	if !ok {
		return false, nil
	}
	m := make(map[string]*vhostState, len(old))
	for k, v := range old {
		if k != name {
			m[k] = v
		}
	}
	s.vhosts.Store(&m) // no new connection finds it
	s.closeConnsWhere(func(c *conn) bool { return c.vh == st.v },
		amqp.Errorf(amqp.ConnectionForced, "vhost '%s' is deleted", name), "vhost deleted")
	b := &persist.Batch{}
	b.DeleteDef(defVHost, vhost.DefName(name))
	for _, p := range s.reg.Permissions() {
		if p.VHost == name {
			b.DeleteDef(defPerm, vhost.DefName(name, p.User))
		}
	}
	for _, t := range s.reg.TopicPermissions() {
		if t.VHost == name {
			b.DeleteDef(defTopicPerm, vhost.DefName(name, t.User, t.Exchange))
		}
	}
	pols, ops := st.v.Policies()
	for _, p := range pols {
		b.DeleteDef(defPolicy, vhost.DefName(name, p.Name))
	}
	for _, p := range ops {
		b.DeleteDef(defOpPolicy, vhost.DefName(name, p.Name))
	}
	s.dropVHostParameters(name, b)
	s.reg.DeleteVHost(name)
	if err := s.store.CommitSync(b); err != nil {
		return true, err
	}
	s.log.Info("vhost deleted", zap.String("vhost", name))
	return true, st.v.Destroy()
}

// closeConnsWhere closes the open connections that match with e.
func (s *Server) closeConnsWhere(match func(c *conn) bool, e *amqp.Error, reason string) {
	for _, c := range s.openConns() {
		if match(c) {
			c.closeWith(e, reason)
		}
	}
}

// parseCredentials extracts the user and password from a start-ok
// response for mechanism PLAIN ("\0user\0pass", authzid ignored) or
// AMQPLAIN (a table body with LOGIN and PASSWORD).
func parseCredentials(mechanism, response string) (user, pass string, ok bool) {
	switch mechanism {
	case "PLAIN":
		parts := splitNUL(response)
		if len(parts) != 3 {
			return "", "", false
		}
		return parts[1], parts[2], true
	case "AMQPLAIN":
		t, err := amqp.DecodeTable([]byte(response))
		if err != nil {
			return "", "", false
		}
		user, uok := t["LOGIN"].(string)
		pass, pok := t["PASSWORD"].(string)
		return user, pass, uok && pok
	}
	return "", "", false
}

func splitNUL(s string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}
