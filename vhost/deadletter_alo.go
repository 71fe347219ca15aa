package vhost

import (
	"errors"
	"sync"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
)

// At-least-once dead-lettering (a quorum queue's x-dead-letter-strategy
// at-least-once): the copy goes to each target queue on its own, with a
// confirm from each, so that the source learns which took it, and keeps
// the message until all have (RabbitMQ's rabbit_fifo_dlx_worker: forward,
// handle_settled, redeliver). A target that confirmed it is not sent it
// again.

// setDeadLetter gives a queue's policy its dead-lettering to dlx.
func (v *VHost) setDeadLetter(p *queue.Policy, dlx string, dlrk *string) {
	p.DeadLetter = v.deadLetterFunc(dlx, dlrk)
	p.DeadLetterSettled = v.deadLetterSettledFunc(dlx, dlrk)
}

// deadLetterSettledFunc is deadLetterFunc reporting what the targets did.
func (v *VHost) deadLetterSettledFunc(dlx string, dlrk *string) queue.DeadLetterSettledFunc {
	return func(src *queue.Queue, d queue.Delivery, reason string, took map[string]bool, done func([]string, bool)) {
		c, err := v.deadLetterCopy(src, d, reason, dlx, dlrk)
		if err != nil {
			// A missing dead-letter exchange: kept until it exists
			// (rabbit_fifo_dlx_worker:lookup_dlx). Properties that do not
			// decode never will: let it go (logged by deadLetterCopy).
			var ae *amqp.Error
			done(nil, !errors.As(err, &ae))
			return
		}
		var todo []*queue.Queue
		for _, q := range c.targets {
			if !took[q.Name()] {
				todo = append(todo, q)
			}
		}
		var delayed []string
		for _, x := range c.sc.Delayed {
			if !took[delayedTarget(x.Name)] {
				delayed = append(delayed, x.Name)
			}
		}
		if len(c.targets)+len(c.sc.Delayed) == 0 {
			// Routed nowhere: kept, unless a target took it before and
			// the routes to it went since (rabbit_fifo_dlx_worker:
			// redeliver0, mandatory's sense).
			done(nil, len(took) > 0)
			return
		}
		if len(todo)+len(delayed) == 0 {
			done(nil, true)
			return
		}
		w := &dlWait{done: done}
		w.pending = len(todo) + len(delayed) + 1 // + 1: this call's, released below
		store := v.Store()
		for _, q := range todo {
			m := *c.msg // FanOut marks the copy with its store record
			name := q.Name()
			_, waited := FanOut(store, &m, []*queue.Queue{q}, true /* rejects */, func(int) queue.Confirmer {
				return w.target(name)
			}, nil)
			if !waited {
				w.target(name).Done(nil) // in the queue (or deleted meanwhile): nothing to wait for
			}
		}
		for _, x := range c.sc.Delayed {
			name := delayedTarget(x.Name)
			if took[name] {
				continue
			}
			m := *c.msg
			conf, waits := w.target(name), v.DelayWaits(x, &m)
			v.Delay(x, &m, c.sc.Extra, c.sc.Delay, conf)
			if !waits {
				conf.Done(nil) // held in memory: no write to wait for
			}
		}
		w.finish(true)
	}
}

// delayedTarget names a delayed exchange among the targets a dead
// letter's copy took (queue names cannot hold a NUL).
func delayedTarget(x string) string { return "\x00delayed " + x }

// dlWait gathers one dead letter's confirms from its targets.
type dlWait struct {
	mu      sync.Mutex // guards the rest; a leaf: done runs after it is released
	pending int
	took    []string
	refused bool
	done    func([]string, bool)
}

// target is the Confirmer of the copy sent to the target named name.
func (w *dlWait) target(name string) queue.Confirmer { return dlTarget{w, name} }

// finish counts one answer in: ok says whether it was a confirm.
func (w *dlWait) finish(ok bool, name ...string) {
	w.mu.Lock()
	if ok {
		w.took = append(w.took, name...)
	} else {
		w.refused = true
	}
	w.pending--
	last := w.pending == 0
	took, settled := w.took, !w.refused
	w.mu.Unlock()
	if last {
		w.done(took, settled)
	}
}

type dlTarget struct {
	w    *dlWait
	name string
}

// Done: the target confirmed the copy (nil) or refused it (a full
// reject-publish queue, a quorum queue that could not commit it).
func (t dlTarget) Done(err error) { t.w.finish(err == nil, t.name) }
