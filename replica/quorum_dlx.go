package replica

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/queue"
)

// A quorum queue's dead letters, on the node that leads its group.
//
// At most once (the default), the leader republishes each as the entry
// that killed it is applied, and forgets it (RabbitMQ's
// rabbit_quorum_queue:dead_letter_publish). At least once
// (x-dead-letter-strategy at-least-once with x-overflow reject-publish),
// the log holds them until their targets confirm (cluster/fifo_dlx.go),
// and the leader's dlxWorker is RabbitMQ's rabbit_fifo_dlx_worker: it
// sends up to dlxWindow of them at a time, each to the queues its
// dead-letter exchange routes it to, and once every one of them has
// confirmed it, proposes DeadSettled, which removes it from the queue. One
// that goes nowhere (no such exchange, no binding) or that a target
// refuses waits dlxRetry and is sent again, to the targets that have not
// confirmed it. The worker's state is the leader's alone: a member that
// becomes leader starts with none, and sends every held dead letter again
// (at least once: a target may get a copy twice); one that stops leading
// drops it.
//
// dlxWorker.mu guards the worker's state; it is taken by raft's FSM
// goroutine (applying, on the leader), the ticker and the targets'
// confirms (store committer, other groups' answers), under
// cluster.QueueFSM.mu (Group.View) or with no lock held; nothing is taken
// under it.

// dlxWindow is how many dead letters the leader has taken on at once.
// RabbitMQ's worker takes 32 (dead_letter_worker_consumer_prefetch); with
// 32, BenchmarkQuorumDeadLetterTCP moved 11 k msg/s at least once against
// 37 k at most once, each copy waiting for its target's fsync before the
// next took its place; with 256, 32-35 k, as at most once.
const dlxWindow = 256

// dlxRetry is how long a dead letter that could not be settled waits
// before it is sent again. RabbitMQ waits its confirm timeout for these
// too (dead_letter_worker_publisher_confirm_timeout, 180 s), or a change
// of the queue's policy; a copy that was never sent, or that a target
// refused, can be sent sooner without making a duplicate.
const dlxRetry = 2 * time.Second

// dlxConfirmTimeout is how long a copy waits for its confirms before it
// is sent again (dead_letter_worker_publisher_confirm_timeout).
const dlxConfirmTimeout = 180 * time.Second

type dlxWorker struct {
	mu      sync.Mutex
	pending map[uint64]*dlxPending // by message id: the dead letters taken on
	pumping bool                   // a pump runs; again: run it once more after
	again   bool
	gen     uint64 // counts resets: answers to a copy sent before one are the old leader's
	dropped bool   // logged: no dead-letter exchange any more
}

// dlxPending is one dead letter the leader has taken on.
type dlxPending struct {
	took     map[string]bool // targets that confirmed it
	sentAt   time.Time       // its copies' sending; zero when none is on its way
	retryAt  time.Time       // when it may be sent again (sentAt zero)
	settling bool            // DeadSettled proposed
}

// atLeastOnce reports whether a quorum queue's arguments make its dead
// letters at least once: RabbitMQ's rabbit_quorum_queue:dlh takes the
// strategy only with a dead-letter exchange and x-overflow reject-publish.
func atLeastOnce(args amqp.Table) bool {
	_, dlx := args["x-dead-letter-exchange"]
	return dlx && args["x-dead-letter-strategy"] == "at-least-once" && args["x-overflow"] == "reject-publish"
}

// Warnings RabbitMQ logs for quorum queue arguments it takes but does not
// follow (rabbit_quorum_queue:overflow, dlh).
const (
	warnRejectPublishDLX = "invalid overflow strategy reject-publish-dlx for a quorum queue: drop-head"
	warnNoDLX            = "dead-letter-strategy without a dead-letter-exchange: dead-lettering disabled"
	warnAtMostOnce       = "dead-letter-strategy at-least-once is incompatible with overflow drop-head: at-most-once"
)

// quorumArgWarnings are the warnings RabbitMQ logs for a quorum queue's
// arguments.
func quorumArgWarnings(args amqp.Table) []string {
	var out []string
	if args["x-overflow"] == "reject-publish-dlx" {
		out = append(out, warnRejectPublishDLX)
	}
	_, dlx := args["x-dead-letter-exchange"]
	switch s, _ := args["x-dead-letter-strategy"].(string); {
	case s != "" && !dlx:
		out = append(out, warnNoDLX)
	case s == "at-least-once" && args["x-overflow"] != "reject-publish":
		out = append(out, warnAtMostOnce)
	}
	return out
}

// deadLetters carries out an applied entry's dead letters on the leader:
// at most once, republished now; at least once, the worker's (pump).
func (qq *quorumQueue) deadLetters(e *cluster.Effects, leader bool) {
	if !leader {
		qq.dlx.reset()
		return
	}
	held := false
	for _, dl := range e.DeadLetters {
		if dl.Held {
			held = true
			continue
		}
		if p := qq.policy(); p != nil && p.DeadLetter != nil {
			p.DeadLetter(qq.q, queue.Delivery{Msg: &queue.Message{Exchange: dl.Msg.Exchange, RoutingKey: dl.Msg.RoutingKey,
				Props: dl.Msg.Props, Body: dl.Msg.Body}}, dl.Reason, nil)
		}
	}
	if held || qq.dlx.busy() {
		qq.pumpDeadLetters(time.Now())
	}
}

// reset drops the worker's state (this member no longer leads).
func (w *dlxWorker) reset() {
	w.mu.Lock()
	if len(w.pending) > 0 {
		w.pending = nil
		w.gen++
	}
	w.mu.Unlock()
}

// busy reports whether the worker has dead letters taken on.
func (w *dlxWorker) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) > 0
}

// dlxSend is a copy to send: the dead letter and the targets it is not
// to go to again.
type dlxSend struct {
	dl   cluster.DeadLetter
	took map[string]bool
}

// pumpDeadLetters sends the held dead letters that are due, on the
// leader: those not taken on yet, while fewer than dlxWindow are, and
// those whose retry or confirm timeout has come. Called on raft's FSM
// goroutine (after an entry) and by the ticker; one pump runs at a time.
func (qq *quorumQueue) pumpDeadLetters(now time.Time) {
	w := &qq.dlx
	if !qq.g.IsLeader() {
		w.reset()
		return
	}
	w.mu.Lock()
	if w.pumping {
		w.again = true
		w.mu.Unlock()
		return
	}
	w.pumping = true
	w.mu.Unlock()
	for {
		pol, sends, drop, gen := qq.dueDeadLetters(now)
		if drop != nil {
			qq.g.Submit(cluster.DeadSettled(drop...), nil)
		}
		for i := range sends {
			s := &sends[i]
			id := s.dl.ID
			d := queue.Delivery{Msg: &queue.Message{Exchange: s.dl.Msg.Exchange, RoutingKey: s.dl.Msg.RoutingKey,
				Props: s.dl.Msg.Props, Body: s.dl.Msg.Body}}
			pol.DeadLetterSettled(qq.q, d, s.dl.Reason, s.took, func(took []string, settled bool) {
				qq.deadLetterAnswered(id, gen, took, settled)
			})
		}
		w.mu.Lock()
		if !w.again {
			w.pumping = false
			w.mu.Unlock()
			return
		}
		w.again = false
		w.mu.Unlock()
		now = time.Now()
	}
}

// dueDeadLetters takes on the dead letters to send now; drop lists all
// of them when the queue has no dead-letter exchange any more (RabbitMQ
// drops them when dead-lettering is switched off: rabbit_fifo_dlx:
// switch_from).
func (qq *quorumQueue) dueDeadLetters(now time.Time) (pol *queue.Policy, sends []dlxSend, drop []uint64, gen uint64) {
	w := &qq.dlx
	pol = qq.policy()
	qq.g.View(func(f *cluster.Fifo) {
		w.mu.Lock()
		defer w.mu.Unlock()
		gen = w.gen
		for id := range w.pending {
			if !f.IsDiscard(id) {
				delete(w.pending, id) // settled, purged
			}
		}
		if n, _ := f.Discarded(); n == 0 {
			return
		}
		if pol == nil || pol.DeadLetterSettled == nil {
			if !w.dropped {
				w.dropped = true
				n, b := f.Discarded()
				qq.m.log.Info("quorum queue without a dead-letter exchange: its held dead letters deleted",
					zap.String("queue", qq.q.Name()), zap.Int("messages", n), zap.Int64("bytes", b))
			}
			f.EachDiscard(func(dl cluster.DeadLetter) bool {
				drop = append(drop, dl.ID)
				return true
			})
			return
		}
		w.dropped = false
		if w.pending == nil {
			w.pending = map[uint64]*dlxPending{}
		}
		room, seen := dlxWindow-len(w.pending), 0
		f.EachDiscard(func(dl cluster.DeadLetter) bool {
			p := w.pending[dl.ID]
			switch {
			case p != nil:
				seen++
				due := !p.settling && ((p.sentAt.IsZero() && !now.Before(p.retryAt)) ||
					(!p.sentAt.IsZero() && now.Sub(p.sentAt) >= dlxConfirmTimeout))
				if !due {
					return room > 0 || seen < len(w.pending)
				}
			case room > 0:
				room--
				p = &dlxPending{took: map[string]bool{}}
				w.pending[dl.ID] = p
			default:
				return seen < len(w.pending)
			}
			p.sentAt = now
			took := make(map[string]bool, len(p.took))
			for t := range p.took {
				took[t] = true
			}
			sends = append(sends, dlxSend{dl: dl, took: took})
			return room > 0 || seen < len(w.pending)
		})
	})
	return pol, sends, drop, gen
}

// deadLetterAnswered records what the targets of a dead letter's copies
// did; settled, it proposes DeadSettled.
func (qq *quorumQueue) deadLetterAnswered(id, gen uint64, took []string, settled bool) {
	w := &qq.dlx
	w.mu.Lock()
	if p := w.pending[id]; p != nil && w.gen == gen {
		for _, t := range took {
			p.took[t] = true
		}
		p.sentAt = time.Time{}
		if settled {
			p.settling = true
		} else {
			p.retryAt = time.Now().Add(dlxRetry)
		}
	}
	w.mu.Unlock()
	if !settled {
		return
	}
	// Proposed even when this member no longer leads: the targets have
	// the copies. Should it not be committed, the message is sent again.
	qq.g.Submit(cluster.DeadSettled(id), func(_ cluster.Effects, err error) {
		if err == nil {
			return
		}
		w.mu.Lock()
		if p := w.pending[id]; p != nil && p.settling {
			delete(w.pending, id)
		}
		w.mu.Unlock()
	})
}

// describeDeadLetters adds the at-least-once dead letters held to the
// management API's view of the queue: messages_dlx and message_bytes_dlx,
// and in messages (rabbit_quorum_queue:handle_tick; RabbitMQ 3.10.8
// shows a queue with 3 held as messages 3, messages_dlx 3, messages_ready
// and messages_unacknowledged 0).
func (qq *quorumQueue) describeDeadLetters(m map[string]any) {
	var n int
	var b int64
	qq.g.View(func(f *cluster.Fifo) { n, b = f.Discarded() })
	m["messages_dlx"], m["message_bytes_dlx"] = n, b
	switch x := m["messages"].(type) {
	case int:
		m["messages"] = x + n
	case int64:
		m["messages"] = x + int64(n)
	}
}

// warnQuorumArgs logs RabbitMQ's warnings for cfg's arguments.
func (m *Manager) warnQuorumArgs(cfg *queue.Config) {
	for _, w := range quorumArgWarnings(cfg.Args) {
		m.log.Warn(w, zap.String("queue", cfg.Name), zap.String("vhost", cfg.VHost))
	}
}

// refuseDeleteIf refuses a queue.delete with if-unused or if-empty, as
// RabbitMQ does for every quorum queue (rabbit_quorum_queue:delete, 3.10.8
// to 4.3.5), in its words: 540, which closes the connection.
func refuseDeleteIf(cfg *queue.Config, ifUnused, ifEmpty bool) error {
	flag := "if-unused"
	switch {
	case ifUnused:
	case ifEmpty:
		flag = "if-empty"
	default:
		return nil
	}
	return amqp.Errorf(amqp.NotImplemented, "cannot delete queue '%s' in vhost '%s'. queue.delete operations with %s flag set are not supported by quorum queues",
		cfg.Name, cfg.VHost, flag)
}
