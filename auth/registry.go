package auth

import (
	"sort"
	"sync"
)

// Registry holds the users and their grants. Safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex // guards users, grants; a leaf lock
	users  map[string]*User
	grants map[key]*Grant
}

type key struct{ vhost, user string }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{users: map[string]*User{}, grants: map[key]*Grant{}}
}

// User returns a user by name, or nil.
func (r *Registry) User(name string) *User {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.users[name]
}

// Users are all users, by name.
func (r *Registry) Users() []*User {
	r.mu.RLock()
	out := make([]*User, 0, len(r.users))
	for _, u := range r.users {
		out = append(out, u)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PutUser adds or replaces a user.
func (r *Registry) PutUser(u *User) {
	r.mu.Lock()
	r.users[u.Name] = u
	r.mu.Unlock()
}

// DeleteUser removes a user and its permissions everywhere; it reports
// whether there was one. Grants connections hold refuse from now on.
func (r *Registry) DeleteUser(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.users[name] == nil {
		return false
	}
	delete(r.users, name)
	for k, g := range r.grants {
		if k.user == name {
			g.perm.Store(nil)
			g.topic.Store(nil)
			delete(r.grants, k)
		}
	}
	return true
}

// Grant is user's grant in vhost: the one the registry keeps when user
// has (or had) permissions there, else a grant with none that the
// registry does not keep. Looking up never adds to the registry, so
// names from a request (a made-up vhost in a URL) cannot grow it: it
// holds one grant per permission or topic permission an operator set,
// and forgets a vhost's or a user's with them. A connection holds the
// kept grant of the vhost it was let into, and sees changes to it.
func (r *Registry) Grant(vhost, user string) *Grant {
	r.mu.RLock()
	g := r.grants[key{vhost, user}]
	r.mu.RUnlock()
	if g != nil {
		return g
	}
	return &Grant{User: user, VHost: vhost}
}

// keep is user's kept grant in vhost, made (with no permissions) if need
// be. r.mu held.
func (r *Registry) keep(vhost, user string) *Grant {
	k := key{vhost, user}
	g := r.grants[k]
	if g == nil {
		g = &Grant{User: user, VHost: vhost}
		r.grants[k] = g
	}
	return g
}

// Len is the number of grants the registry keeps.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.grants)
}

// SetPermission sets user's permission in vhost.
func (r *Registry) SetPermission(vhost, user string, p *Permission) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keep(vhost, user).perm.Store(p)
}

// ClearPermission removes user's permission in vhost; it reports whether
// there was one.
func (r *Registry) ClearPermission(vhost, user string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.grants[key{vhost, user}]
	return g != nil && g.perm.Swap(nil) != nil
}

// SetTopicPermission sets user's topic permission on an exchange in vhost.
func (r *Registry) SetTopicPermission(vhost, user string, tp *TopicPermission) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.keep(vhost, user)
	m := map[string]*TopicPermission{}
	if old := g.topic.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[tp.Exchange] = tp
	g.topic.Store(&m)
}

// ClearTopicPermission removes user's topic permissions in vhost: on one
// exchange, or on all when exchange is "". It reports how many went.
func (r *Registry) ClearTopicPermission(vhost, user, exchange string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.grants[key{vhost, user}]
	if g == nil {
		return 0
	}
	old := g.topic.Load()
	if old == nil {
		return 0
	}
	m := map[string]*TopicPermission{}
	n := 0
	for k, v := range *old {
		if exchange == "" || k == exchange {
			n++
			continue
		}
		m[k] = v
	}
	g.topic.Store(&m)
	return n
}

// DeleteVHost removes every grant in vhost.
func (r *Registry) DeleteVHost(vhost string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, g := range r.grants {
		if k.vhost == vhost {
			g.perm.Store(nil)
			g.topic.Store(nil)
			delete(r.grants, k)
		}
	}
}

// PermissionEntry is one user's permission in one vhost.
type PermissionEntry struct {
	VHost, User string
	*Permission
}

// Permissions lists every permission set, by vhost then user.
func (r *Registry) Permissions() []PermissionEntry {
	r.mu.RLock()
	var out []PermissionEntry
	for k, g := range r.grants {
		if p := g.perm.Load(); p != nil {
			out = append(out, PermissionEntry{k.vhost, k.user, p})
		}
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].VHost != out[j].VHost {
			return out[i].VHost < out[j].VHost
		}
		return out[i].User < out[j].User
	})
	return out
}

// TopicPermissionEntry is one user's topic permission on one exchange.
type TopicPermissionEntry struct {
	VHost, User string
	*TopicPermission
}

// TopicPermissions lists every topic permission, by vhost, user, exchange.
func (r *Registry) TopicPermissions() []TopicPermissionEntry {
	r.mu.RLock()
	var out []TopicPermissionEntry
	for k, g := range r.grants {
		if m := g.topic.Load(); m != nil {
			for _, tp := range *m {
				out = append(out, TopicPermissionEntry{k.vhost, k.user, tp})
			}
		}
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.VHost != b.VHost {
			return a.VHost < b.VHost
		}
		if a.User != b.User {
			return a.User < b.User
		}
		return a.Exchange < b.Exchange
	})
	return out
}
