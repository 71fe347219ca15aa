package auth

import (
	"errors"
	"testing"

	"github.com/railmq/railmq/amqp"
)

// Hashes as RabbitMQ's rabbit_password makes them (the SHA-256 one is the
// example of RabbitMQ's documentation on passwords: salt 908DC60A,
// password test12: base64 of salt ++ H(salt ++ password)), for each
// algorithm it takes on import.
func TestPasswordHashes(t *testing.T) {
	for _, tc := range []struct{ algo, hash string }{
		{SHA256, "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"},
		{SHA512, "kI3GChuNuIYf8lRbCCxZjgjKwsY19ns6+uFO0zcXRBGA/XGJPYD8OWMy7EB8TaOmAzjP2azv84GbINYwX2cDWb4DHnc="},
		{MD5, "kI3GChNpte2FApYFXScl+0dIluk="},
	} {
		if tc.hash == "" {
			continue
		}
		h, err := DecodeHash(tc.algo, tc.hash)
		if err != nil {
			t.Fatalf("%s: %v", tc.algo, err)
		}
		u := &User{Name: "u", Hash: h, Algo: tc.algo}
		if !u.CheckPassword("test12") || u.CheckPassword("test13") || u.CheckPassword("") {
			t.Fatalf("%s: password check wrong", tc.algo)
		}
		if EncodeHash(h) != tc.hash {
			t.Fatalf("%s: round trip %s", tc.algo, EncodeHash(h))
		}
	}
	for _, algo := range []string{SHA256, SHA512, MD5} {
		h, err := HashPassword(algo, "s3cret")
		if err != nil {
			t.Fatal(err)
		}
		if u := (&User{Hash: h, Algo: algo}); !u.CheckPassword("s3cret") || u.CheckPassword("s3cre") {
			t.Fatalf("%s: fresh hash does not check", algo)
		}
	}
	if _, err := DecodeHash(SHA256, "AAAA"); err == nil {
		t.Fatal("a hash of the wrong length was taken")
	}
	if (&User{}).CheckPassword("") {
		t.Fatal("a user without a password logged in")
	}
}

func TestPermissionPatterns(t *testing.T) {
	p, err := NewPermission("^bob-", "", ".*")
	if err != nil {
		t.Fatal(err)
	}
	g := &Grant{User: "bob", VHost: "/"}
	g.perm.Store(p)
	for _, tc := range []struct {
		op         Op
		kind, name string
		want       string
	}{
		{Configure, "queue", "bob-q", ""},
		{Configure, "queue", "x-bob-q", "ACCESS_REFUSED - access to queue 'x-bob-q' in vhost '/' refused for user 'bob'"},
		{Write, "exchange", "", "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'bob'"}, // "" is ^$
		{Read, "queue", "anything", ""},
	} {
		err := g.Check(tc.op, tc.kind, tc.name)
		var e *amqp.Error
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v %s %q: %v", tc.op, tc.kind, tc.name, err)
		case tc.want != "" && (!errors.As(err, &e) || e.Code != amqp.AccessRefused || e.Text != tc.want):
			t.Errorf("%v %s %q: %v, want %q", tc.op, tc.kind, tc.name, err, tc.want)
		}
	}
	if _, err := NewPermission("(", ".*", ".*"); err == nil {
		t.Fatal("an invalid pattern was taken")
	}
	tp, err := NewTopicPermission("amq.topic", "^{username}\\.", "", "bob", "/")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*TopicPermission{"amq.topic": tp}
	g.topic.Store(&m)
	if err := g.CheckTopic(Write, "amq.topic", "bob.orders"); err != nil {
		t.Fatal(err)
	}
	if err := g.CheckTopic(Write, "amq.topic", "alice.orders"); err == nil || err.Error() == "" {
		t.Fatal("alice's key allowed to bob")
	}
	if err := g.CheckTopic(Read, "other", "anything"); err != nil {
		t.Fatalf("an exchange without a topic permission: %v", err)
	}
}

// Looking a grant up never adds one: a management request naming a
// made-up vhost cannot grow the registry (issue 38, item 6: 1,200 such
// requests took a broker from 22 MB to 612 MB). It keeps one grant per
// permission set, and forgets it with its vhost.
func TestGrantLookupDoesNotGrow(t *testing.T) {
	r := NewRegistry()
	p, _ := NewPermission(".*", ".*", ".*")
	r.SetPermission("v", "u", p)
	kept := r.Grant("v", "u")
	for i := 0; i < 1000; i++ {
		if g := r.Grant("made-up-"+string(rune('a'+i%26))+string(make([]byte, i%7)), "u"); g.Permission() != nil {
			t.Fatal("a made-up vhost has permissions")
		}
		if r.ClearPermission("made-up", "u") || r.ClearTopicPermission("made-up", "u", "") != 0 {
			t.Fatal("cleared what was never set")
		}
	}
	if n := r.Len(); n != 1 {
		t.Fatalf("%d grants kept after 1,000 made-up lookups, want 1", n)
	}
	if r.Grant("v", "u") != kept || kept.Permission() != p {
		t.Fatal("the kept grant changed")
	}
	r.DeleteVHost("v")
	if n := r.Len(); n != 0 || kept.Permission() != nil {
		t.Fatalf("after the vhost's deletion: %d grants, permission %v", n, kept.Permission())
	}
}
