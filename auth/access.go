package auth

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/railmq/railmq/amqp"
)

// Op is what a permission allows.
type Op int

// The three permissions, in RabbitMQ's order.
const (
	Configure Op = iota
	Write
	Read
)

func (o Op) String() string { return [...]string{"configure", "write", "read"}[o] }

// User is a user as RabbitMQ's internal backend keeps one. A User is not
// changed once made: an update replaces it.
type User struct {
	Name string
	Hash []byte // salt ++ digest (password.go); nil: no password login
	Algo string // hashing algorithm (SHA256 ...)
	Tags []string
	// Limits: max-connections, max-channels (absent: none).
	Limits map[string]int64
}

// CheckPassword reports whether pass is the user's password.
func (u *User) CheckPassword(pass string) bool { return checkPassword(u.Algo, u.Hash, pass) }

// HasTag reports whether the user has tag.
func (u *User) HasTag(tag string) bool { return slices.Contains(u.Tags, tag) }

// ParseTags reads tags as the API takes them: a comma-separated string
// (spaces around names ignored) or a list.
func ParseTags(v any) ([]string, error) {
	var raw []string
	switch t := v.(type) {
	case nil:
	case string:
		raw = strings.Split(t, ",")
	case []any:
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("tags: %v is not a string", x)
			}
			raw = append(raw, s)
		}
	default:
		return nil, fmt.Errorf("tags: not a string or a list")
	}
	tags := []string{}
	for _, s := range raw {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(tags, s) {
			tags = append(tags, s)
		}
	}
	return tags, nil
}

// Permission is a user's configure, write and read patterns in a vhost.
// An empty pattern matches nothing ("^$"), as RabbitMQ reads it; a
// pattern matches anywhere in a name unless anchored (re:run).
type Permission struct {
	Configure, Write, Read string
	re                     [3]*regexp.Regexp
}

// NewPermission compiles the three patterns.
func NewPermission(configure, write, read string) (*Permission, error) {
	p := &Permission{Configure: configure, Write: write, Read: read}
	for i, s := range []string{configure, write, read} {
		re, err := compile(s)
		if err != nil {
			return nil, err
		}
		p.re[i] = re
	}
	return p, nil
}

func compile(s string) (*regexp.Regexp, error) {
	if s == "" {
		s = "^$"
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression %q: %w", s, err)
	}
	return re, nil
}

// Allows reports whether the pattern for op matches name.
func (p *Permission) Allows(op Op, name string) bool { return p.re[op].MatchString(name) }

// TopicPermission is a user's write and read patterns on the routing
// keys of one topic exchange in a vhost. The patterns may name
// {username} and {vhost}, replaced before they are compiled.
type TopicPermission struct {
	Exchange, Write, Read string
	re                    [2]*regexp.Regexp // write, read
}

// NewTopicPermission compiles a topic permission for user in vhost.
func NewTopicPermission(exchange, write, read, user, vhost string) (*TopicPermission, error) {
	tp := &TopicPermission{Exchange: exchange, Write: write, Read: read}
	r := strings.NewReplacer("{username}", user, "{vhost}", vhost)
	for i, s := range []string{write, read} {
		re, err := compile(r.Replace(s))
		if err != nil {
			return nil, err
		}
		tp.re[i] = re
	}
	return tp, nil
}

// Grant is a user's rights in one vhost, as a connection checks them. It
// stays the same object while an operator changes the permissions in it,
// so connections see the change at their next check.
type Grant struct {
	User, VHost string
	perm        atomic.Pointer[Permission]                  // nil: no permissions
	topic       atomic.Pointer[map[string]*TopicPermission] // by exchange; nil: none
}

// Permission is the grant's permission now, or nil.
func (g *Grant) Permission() *Permission { return g.perm.Load() }

// Check refuses op on a queue or exchange (kind) by name, with RabbitMQ's
// 403 and text. The default exchange is checked as amq.default.
func (g *Grant) Check(op Op, kind, name string) error {
	return g.CheckWith(g.perm.Load(), op, kind, name)
}

// CheckWith is Check against p (a Permission the caller loaded, e.g. to
// remember what it checked against).
func (g *Grant) CheckWith(p *Permission, op Op, kind, name string) error {
	if kind == "exchange" && name == "" {
		name = "amq.default"
	}
	if p != nil && p.Allows(op, name) {
		return nil
	}
	return amqp.Errorf(amqp.AccessRefused, "access to %s '%s' in vhost '%s' refused for user '%s'", kind, name, g.VHost, g.User)
}

// TopicChecked reports whether routing keys on exchange are checked (a
// topic permission names it).
func (g *Grant) TopicChecked(exchange string) bool {
	m := g.topic.Load()
	return m != nil && (*m)[exchange] != nil
}

// CheckTopic refuses op (Write or Read) of routing key on a topic
// exchange whose topic permission does not match it; without a topic
// permission for the exchange everything is allowed (RabbitMQ's rule).
func (g *Grant) CheckTopic(op Op, exchange, key string) error {
	m := g.topic.Load()
	if m == nil {
		return nil
	}
	tp := (*m)[exchange]
	if tp == nil {
		return nil
	}
	i := 0
	if op == Read {
		i = 1
	}
	if tp.re[i].MatchString(key) {
		return nil
	}
	return amqp.Errorf(amqp.AccessRefused, "access to topic '%s' in exchange '%s' in vhost '%s' refused for user '%s'", key, exchange, g.VHost, g.User)
}
