package vhost

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/railmq/railmq/queue"
)

// fakeStore records the writes it is given and confirms each on a
// goroutine of its own, as the committer would.
type fakeStore struct {
	mu     sync.Mutex
	ids    uint64
	writes []queue.StoreWrite
	wg     sync.WaitGroup
}

func (s *fakeStore) NewMessageID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return s.ids
}

func (s *fakeStore) Commit(w *queue.Writes, done func(error)) {
	s.mu.Lock()
	s.writes = append(s.writes, w.Ops...)
	s.mu.Unlock()
	if done != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			done(nil)
		}()
	}
}

func (s *fakeStore) LoadEntries(_, _ uint64, _ int, _ int64, done func([]queue.StoredEntry, error)) {
	done(nil, nil)
}

// count returns how many writes of kind the store got for message id,
// and how many of those were shared and inline.
func (s *fakeStore) count(kind queue.WriteKind, id uint64) (n, shared, inline int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.writes {
		if w.Kind == kind && w.Msg == id {
			n++
			if w.Shared {
				shared++
			}
			if w.Inline {
				inline++
			}
		}
	}
	return n, shared, inline
}

// countConf counts its Done calls and closes all when they reach want.
type countConf struct {
	want int32
	got  atomic.Int32
	all  chan struct{}
}

func (c *countConf) Done(error) {
	if c.got.Add(1) == c.want {
		close(c.all)
	}
}

func TestFanOut(t *testing.T) {
	type queueKind int
	const (
		transient queueKind = iota
		durable
		mayReject // transient, x-max-length with reject-publish
		deletedDurable
	)
	for _, tc := range []struct {
		name       string
		persistent bool
		noStore    bool
		rejects    bool
		noConf     bool // newConf returns nil: a publisher not in confirm mode
		queues     []queueKind
		routed     bool
		n          int // newConf's count; 0: not called
		inline     bool
		shared     bool
	}{
		{name: "transient message", queues: []queueKind{durable, durable}, routed: true},
		{name: "no queue", persistent: true, routed: false},
		{name: "transient queues", persistent: true, queues: []queueKind{transient, transient}, routed: true},
		{name: "no store", persistent: true, noStore: true, queues: []queueKind{durable, durable}, routed: true},
		{name: "one durable queue", persistent: true, queues: []queueKind{transient, durable}, routed: true, n: 1, inline: true},
		{name: "three durable queues", persistent: true, queues: []queueKind{durable, transient, durable, durable}, routed: true, n: 4, shared: true},
		{name: "may reject, publisher confirms", rejects: true, queues: []queueKind{mayReject, transient}, routed: true, n: 1},
		{name: "may reject, no confirms", queues: []queueKind{mayReject}, routed: true},
		{name: "durable and may reject", persistent: true, rejects: true, queues: []queueKind{mayReject, durable}, routed: true, n: 2, inline: true},
		{name: "one queue deleted", persistent: true, queues: []queueKind{deletedDurable, durable}, routed: true, n: 3, shared: true},
		{name: "only queue deleted", persistent: true, queues: []queueKind{deletedDurable}, routed: false, n: 1, inline: true},
		{name: "no confirmer", persistent: true, noConf: true, queues: []queueKind{durable, durable}, routed: true, n: 3, shared: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &fakeStore{}
			var qs []*queue.Queue
			for i, k := range tc.queues {
				cfg := queue.Config{Name: "q" + string(rune('a'+i))}
				switch k {
				case durable, deletedDurable:
					cfg.Durable, cfg.Store, cfg.ID = true, fs, uint64(i+1)
				case mayReject:
					p := queue.NoPolicy
					p.MaxLength, p.Overflow = 10, queue.RejectPublish
					cfg.Policy = &p
				}
				q := queue.New(cfg)
				if k == deletedDurable {
					if _, err := q.Delete(false, false); err != nil {
						t.Fatal(err)
					}
				} else {
					t.Cleanup(func() { _, _ = q.Delete(false, false) })
				}
				qs = append(qs, q)
			}
			var store queue.Store = fs
			if tc.noStore {
				store = nil
			}
			msg := &queue.Message{RoutingKey: "k", Body: []byte("body"), Persistent: tc.persistent}
			calls := 0
			var conf *countConf
			routed, waited := FanOut(store, msg, qs, tc.rejects, func(n int) queue.Confirmer {
				calls++
				conf = &countConf{want: int32(n), all: make(chan struct{})}
				if tc.noConf {
					return nil
				}
				return conf
			}, nil)
			if routed != tc.routed || waited != (tc.n > 0) || calls > 1 {
				t.Fatalf("routed %v waited %v (newConf called %d times), want %v %v", routed, waited, calls, tc.routed, tc.n > 0)
			}
			if conf != nil && int(conf.want) != tc.n {
				t.Fatalf("newConf(%d), want %d", conf.want, tc.n)
			}
			if msg.Inline != tc.inline || msg.Shared != tc.shared || (msg.ID != 0) != (tc.inline || tc.shared) {
				t.Fatalf("message id %d inline %v shared %v, want inline %v shared %v", msg.ID, msg.Inline, msg.Shared, tc.inline, tc.shared)
			}
			if conf != nil && !tc.noConf {
				select {
				case <-conf.all:
				case <-time.After(10 * time.Second):
					t.Fatalf("%d of %d confirms", conf.got.Load(), conf.want)
				}
			}
			// The record is stored once: apart when shared (before the
			// entries), else inside the one entry.
			if records, _, _ := fs.count(queue.PutMessage, msg.ID); tc.shared != (records == 1) || records > 1 {
				t.Fatalf("%d records stored", records)
			}
			if tc.noConf || tc.n == 0 {
				fs.wg.Wait()
				return
			}
			nDurable := 0
			for _, k := range tc.queues {
				if k == durable {
					nDurable++
				}
			}
			entries, shared, inline := fs.count(queue.PutEntry, msg.ID)
			switch {
			case tc.shared && (entries != nDurable || shared != nDurable || inline != 0),
				tc.inline && (entries != nDurable || inline != nDurable || shared != 0):
				t.Fatalf("%d entries (%d shared, %d inline) for %d durable queues", entries, shared, inline, nDurable)
			}
			fs.wg.Wait()
		})
	}
}
