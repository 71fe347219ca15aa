package vhost

import (
	"testing"

	"github.com/railmq/railmq/amqp"
)

func TestParseDefaultQueueType(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
		err  string // rabbit_queue_type:validate_default_queue_type's texts (v4.3.5)
	}{
		{nil, "", ""},
		{"undefined", "", ""},
		{"quorum", "quorum", ""},
		{"rabbit_quorum_queue", "quorum", ""},
		{"classic", "classic", ""},
		{"rabbit_classic_queue", "classic", ""},
		{"", "", "default_queue_type must not be an empty string"},
		{"bogus", "", "bogus is not a valid queue type"},
		{"stream", "stream", ""},
		{"rabbit_stream_queue", "stream", ""},
		{float64(5), "", "5 is not a valid default_queue_type value"},
	} {
		got, err := ParseDefaultQueueType(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("%v: %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// WithDefaultType writes the default where rabbit_amqqueue's
// augment_declare_args (v3.10.8) does, and only there.
func TestWithDefaultType(t *testing.T) {
	for _, tc := range []struct {
		name string
		dqt  string
		d    QueueDecl
		want any // x-queue-type afterwards; nil: none
	}{
		{"durable", "quorum", QueueDecl{Name: "q", Durable: true}, "quorum"},
		{"transient", "quorum", QueueDecl{Name: "q"}, nil},
		{"auto-delete", "quorum", QueueDecl{Name: "q", Durable: true, AutoDelete: true}, nil},
		{"exclusive", "quorum", QueueDecl{Name: "q", Durable: true, Exclusive: true}, nil},
		{"server-named durable", "quorum", QueueDecl{Durable: true}, "quorum"},
		{"passive", "quorum", QueueDecl{Name: "q", Durable: true, Passive: true}, nil},
		{"named classic", "quorum", QueueDecl{Name: "q", Durable: true, Args: amqp.Table{"x-queue-type": "classic"}}, "classic"},
		{"named empty", "quorum", QueueDecl{Name: "q", Durable: true, Args: amqp.Table{"x-queue-type": ""}}, ""},
		{"classic default, transient", "classic", QueueDecl{Name: "q"}, "classic"},
		{"no default", "", QueueDecl{Name: "q", Durable: true}, nil},
	} {
		orig := tc.d.Args
		got := WithDefaultType(tc.d, tc.dqt)
		v, ok := got.Args["x-queue-type"]
		if !ok {
			v = nil
		}
		if v != tc.want {
			t.Errorf("%s: x-queue-type %v, want %v", tc.name, v, tc.want)
		}
		if orig != nil && len(orig) != len(tc.d.Args) {
			t.Errorf("%s: the caller's table changed", tc.name)
		}
	}
}

func TestPoliciesOfQueueType(t *testing.T) {
	mk := func(name, applyTo string) *PolicyDef {
		p, err := NewPolicyDef(name, ".*", applyTo, 0, map[string]any{"max-length": float64(1)}, false)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ps := []*PolicyDef{mk("all", "all"), mk("cq", "classic_queues"), mk("qq", "quorum_queues"), mk("s", "streams"), mk("q", "queues")}
	names := func(ps []*PolicyDef) (s string) {
		for _, p := range ps {
			s += p.Name + " "
		}
		return s
	}
	if got := names(ofQueueType(ps, nil)); got != "all cq q " {
		t.Errorf("classic: %s", got)
	}
	if got := names(ofQueueType(ps, amqp.Table{"x-queue-type": "quorum"})); got != "all qq q " {
		t.Errorf("quorum: %s", got)
	}
	if got := ofQueueType(ps[:1], nil); &got[0] != &ps[0] {
		t.Errorf("a list with nothing to leave out is copied")
	}
}
