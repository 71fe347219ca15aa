package vhost

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// Exchange-level deduplication (exchange type x-message-deduplication), as
// the rabbitmq-message-deduplication plugin does it
// (rabbit_message_deduplication_exchange.ex in
// noxdafox/rabbitmq-message-deduplication): the cache is checked before
// routing, and a duplicate routes nowhere. What follows from an empty
// route follows here too, as in RabbitMQ: the alternate exchange, if any,
// gets it; a mandatory one is returned (312 NO_ROUTE); a publisher in
// confirm mode gets basic.ack. x-deduplication-confirm changes that
// (dedup_confirm.go).
//
// A durable exchange's cache is stored (unless declared with
// x-cache-persistence "memory") as a log of segments under prefix 'u'
// (exchange.DedupCache), written by the store's flusher at the start of
// a group commit. A new id is in the cache at once (a duplicate is found
// in memory), but it is stored only after its message: a publish holds
// its new ids (Scratch.HoldDedup, exchange.DedupCache.Hold) and releases
// them once the queues have stored or taken the message
// (channel/dedup_gate.go, dedup_held.go for a delayed message coming
// due, the atomic tx.commit); the confirm waits for the commit that
// writes them. So, whatever the crash point:
//   - neither stored: the retry is new, routed and stored;
//   - the message stored, its id not: recovery takes the id back from
//     the stored message (recallDedup: a durable classic queue's
//     persistent message published to the exchange), and the retry is a
//     duplicate; for a message that came through another exchange or
//     went to a quorum queue the retry is stored again (twice, never
//     lost);
//   - the id stored: its message was stored before it, or was consumed
//     and acked (an ack's delete is in the id's commit or a later one,
//     and the flusher writes first: a crash keeps a prefix of a commit);
//   - a transient message, or one no queue took: the id is released once
//     the queues took it (nothing to store first) and kept across a
//     crash, as the plugin keeps its cache on disk whatever the
//     message's delivery mode: a transient message has no promise to
//     outlive a crash, and a retry of it is a duplicate.
// A duplicate of a held id is acked once the original is released and
// its id durable (VHost.AfterDuplicate). A restart restores the entries
// that have not expired.

// The plugin's validate texts. Its Elixir strings end lines with a
// backslash, which drops the newline but keeps the next line's
// indentation: the texts below carry those spaces, as the plugin sends
// them.
const (
	dedupSizeText        = "Missing or invalid argument, " + "          " + "'x-cache-size' must be an integer greater than 0"
	dedupSizeStrText     = "Missing or invalid argument, " + "                      " + "'x-cache-size' must be an integer greater than 0"
	dedupTTLText         = "Invalid argument, " + "             " + "'x-cache-ttl' must be an integer greater than 0"
	dedupTTLStrText      = "Invalid argument, " + "                      " + "'x-cache-ttl' must be an integer greater than 0"
	dedupPersistenceText = "Invalid argument, " + "             " + "'x-cache-persistence' must be either 'disk' or 'memory'"
)

// dedupArgs checks a new deduplication exchange's arguments as the
// plugin's validate/1 does, in its order, and returns the cache's size,
// TTL (0 without) and whether it is kept in memory only.
//
// One difference: a longstr size or TTL is accepted by the plugin when it
// starts with an integer (Integer.parse), and the exchange then fails to
// start if the rest is not part of it or the number is not positive; here
// such a string is refused with the plugin's text for a bad string.
func dedupArgs(args amqp.Table) (size int, ttl int64, memory bool, err error) {
	n, err := dedupInt(args, "x-cache-size", true, dedupSizeText, dedupSizeStrText)
	if err != nil {
		return 0, 0, false, err
	}
	ttl, err = dedupInt(args, "x-cache-ttl", false, dedupTTLText, dedupTTLStrText)
	if err != nil {
		return 0, 0, false, err
	}
	if p, ok := args["x-cache-persistence"]; ok {
		s, isStr := p.(string)
		if !isStr || (s != "disk" && s != "memory") {
			return 0, 0, false, amqp.Errorf(amqp.PreconditionFailed, "%s", dedupPersistenceText)
		}
		memory = s == "memory"
	}
	return int(min(n, 1<<31-1)), ttl, memory, nil // slots are numbered in int32
}

func dedupInt(args amqp.Table, name string, required bool, text, strText string) (int64, error) {
	v, ok := args[name]
	if !ok {
		if required {
			return 0, amqp.Errorf(amqp.PreconditionFailed, "%s", text)
		}
		return 0, nil
	}
	if s, isStr := v.(string); isStr {
		n, err := strconv.ParseInt(strings.TrimPrefix(s, "+"), 10, 64)
		if err != nil || n <= 0 {
			return 0, amqp.Errorf(amqp.PreconditionFailed, "%s", strText)
		}
		return n, nil
	}
	n, isInt := amqp.Int(v)
	if !isInt || n <= 0 {
		return 0, amqp.Errorf(amqp.PreconditionFailed, "%s", text)
	}
	return n, nil
}

// attachDedup gives a new (or recovered) deduplication exchange its cache;
// its arguments were validated when it was declared. A durable cache
// rides on the store's group commits (persist.Store.AddFlusher); a new
// one first clears whatever a deleted exchange of its name left (its
// vhost deleted, say), before any of its own segments can be written.
// v.mu held.
func (v *VHost) attachDedup(ex *exchange.Exchange, recovering bool) {
	size, ttl, memory, err := dedupArgs(ex.Args)
	if err != nil {
		// Stored before validation existed, or by hand: a cache of one
		// entry keeps the exchange usable.
		size, ttl = 1, 0
	}
	var owner []byte
	if ex.Durable && !memory && v.store != nil {
		owner = DefName(v.name, ex.Name)
	}
	d := exchange.NewDedup(size, ttl, owner)
	d.Memory = v.memory
	if owner != nil {
		if !recovering {
			d.ClearFirst()
		}
		d.Unregister = v.store.AddFlusher(func(b *persist.Batch) {
			d.Flush(func() { b.DropDedup(persist.DedupExchange, owner) }, func(seg uint64, entries []byte, dead []uint64) {
				if entries != nil {
					b.PutDedup(persist.DedupExchange, owner, seg, entries)
				}
				for _, s := range dead {
					b.DeleteDedup(persist.DedupExchange, owner, s)
				}
			})
		})
	}
	ex.Dedup = d
}

// dedupPolicy applies a policy's x-cache-size and x-cache-ttl to a
// deduplication exchange's window, or its arguments' when the policy
// (p, nil without one) sets none: as the plugin's policy_changed, which
// resets to the arguments and then applies the policy's. The plugin's
// x-cache-persistence policy only relabels its cache (the table keeps
// its storage), so it changes nothing here either.
func (v *VHost) dedupPolicy(ex *exchange.Exchange, p *PolicyDef) {
	size, ttl, _, err := dedupArgs(ex.Args)
	if err != nil {
		size, ttl = 1, 0
	}
	if p != nil {
		if f, ok := p.Definition["x-cache-size"].(float64); ok {
			size = int(min(f, 1<<31-1))
		}
		if f, ok := p.Definition["x-cache-ttl"].(float64); ok {
			ttl = int64(f)
		}
	}
	ex.Dedup.SetOptions(size, ttl)
}

// duplicate checks the message being routed (its headers in s) against
// ex's cache, adding it when new, and reports whether it is a duplicate.
// v.mu read-held.
func (v *VHost) duplicate(ex *exchange.Exchange, s *Scratch) bool {
	d := ex.Dedup
	if d == nil {
		return false
	}
	val, ok := amqp.HeaderField(s.RawHeaders, exchange.DedupHeader)
	if !ok {
		return false // no id: never a duplicate, never cached
	}
	var buf [9]byte
	key := amqp.FieldKey(val, &buf)
	var ttl int64
	hasTTL := false
	if t, ok := amqp.HeaderField(s.RawHeaders, exchange.DedupTTLField); ok {
		ttl, hasTTL = amqp.FieldInt(t)
	}
	if s.HoldDedup && d.Owner != nil {
		dup, t := d.Hold(key, time.Now().UnixMilli(), ttl, hasTTL)
		switch {
		case t == (exchange.DedupTicket{}):
		case dup:
			s.DupHeld = append(s.DupHeld, DedupHold{d, t}) // its original is not stored yet
		default:
			s.DedupHeld = append(s.DedupHeld, DedupHold{d, t})
		}
		if dup {
			d.Dropped.Add(1)
		}
		return dup
	}
	dup := d.Check(key, time.Now().UnixMilli(), ttl, hasTTL)
	if dup {
		d.Dropped.Add(1)
	}
	if !dup && d.Owner != nil {
		s.DedupWrote = true // the next commit stores it (Route kicks one)
	}
	return dup
}

// DedupHold is a new id Route added to a durable deduplication cache
// and holds out of the store until the message is stored (Scratch.HoldDedup).
type DedupHold struct {
	d *exchange.DedupCache
	t exchange.DedupTicket
}

// ReleaseDedup lets the held entries be written: the message they stand
// for is stored (or needs no store). The next commit writes them, ahead
// of its batches (persist.Store.AddFlusher): done (nil: none) runs once
// they are durable.
func (v *VHost) ReleaseDedup(hs []DedupHold, done func(error)) {
	for _, h := range hs {
		h.d.Release(h.t)
	}
	if done != nil {
		v.AfterStored(done)
	} else if v.store != nil {
		v.store.Kick()
	}
}

// dedupQueue reports whether a queue's arguments ask for queue-level
// deduplication. The plugin reads x-message-deduplication as a boolean
// but tests it with Elixir's truthiness (enable_dedup_queue?): any value
// but false turns it on. There is nothing to refuse.
func dedupQueue(args amqp.Table) bool {
	v, ok := args["x-message-deduplication"]
	return ok && v != false
}

// recoverDedupIDs reads the ids of a deduplicating queue's stored
// messages (recovery, before the queue starts).
func (v *VHost) recoverDedupIDs(storeID uint64, rec *queue.Recovered) error {
	var buf [9]byte
	return v.store.ScanEntries(storeID, func(e persist.Entry) {
		if e.Transient {
			return // dropped by recovery
		}
		m, err := queue.DecodeMessage(e.Data)
		if err != nil {
			return
		}
		if id, ok := queue.DedupID(m.Props, &buf); ok {
			rec.DedupIDs = append(rec.DedupIDs, string(id))
		}
	})
}

// dedupOwners are the vhost's durable deduplication exchanges' caches,
// by exchange name (recovery, after the exchanges).
func (v *VHost) dedupOwners() map[string]*exchange.DedupCache {
	var xs map[string]*exchange.DedupCache
	for name, ex := range v.exchanges {
		if ex.Dedup != nil && ex.Dedup.Owner != nil {
			if xs == nil {
				xs = make(map[string]*exchange.DedupCache)
			}
			xs[name] = ex.Dedup
		}
	}
	return xs
}

// recallDedup adds, to the durable deduplication exchanges of xs (by
// name), the id of each stored message published to one of them: its
// entry may be lost (the crash came after the message was stored and
// before the entry, which follows it), and a retry of the message must
// be a duplicate all the same. Recovery, queue by queue.
func (v *VHost) recallDedup(storeID uint64, xs map[string]*exchange.DedupCache) error {
	var buf [9]byte
	now := time.Now().UnixMilli()
	return v.store.ScanEntries(storeID, func(e persist.Entry) {
		if e.Transient {
			return // dropped by recovery
		}
		m, err := queue.DecodeMessage(e.Data)
		if err != nil {
			return
		}
		d := xs[m.Exchange]
		if d == nil {
			return
		}
		h := amqp.PropsHeaders(m.Props)
		val, ok := amqp.HeaderField(h, exchange.DedupHeader)
		if !ok {
			return
		}
		var ttl int64
		hasTTL := false
		if t, ok := amqp.HeaderField(h, exchange.DedupTTLField); ok {
			ttl, hasTTL = amqp.FieldInt(t)
		}
		d.Recall(amqp.FieldKey(val, &buf), m.Enqueued/1e6, now, ttl, hasTTL)
	})
}

// AbandonDedup is ReleaseDedup for a publish that failed: its held
// entries stay in the caches but are never stored, and the duplicates
// waiting for them (AfterDuplicate) get err.
func (v *VHost) AbandonDedup(hs []DedupHold, err error) {
	for _, h := range hs {
		h.d.Abandon(h.t, err)
	}
}

// AfterDuplicate calls done once the originals of a duplicate (the held
// entries Route found it to duplicate, Scratch.DupHeld) are stored with
// their messages, and everything submitted to the store so far is
// durable; with the error of an original that failed.
func (v *VHost) AfterDuplicate(hs []DedupHold, done func(error)) {
	if len(hs) == 0 {
		v.AfterStored(done)
		return
	}
	var left atomic.Int32
	var failed atomic.Pointer[error]
	left.Store(int32(len(hs)))
	one := func(err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
		if left.Add(-1) > 0 {
			return
		}
		if e := failed.Load(); e != nil {
			done(*e)
			return
		}
		v.AfterStored(done)
	}
	for _, h := range hs {
		if !h.d.Wait(h.t, one) {
			one(nil)
		}
	}
}

// AfterStored calls done once everything submitted to the store so far
// is durable (at once without a store): a publish that wrote only cache
// entries is confirmed once they are.
func (v *VHost) AfterStored(done func(error)) {
	if v.store == nil {
		done(nil)
		return
	}
	v.store.Commit(&persist.Batch{}, done)
}

// recoverDedup replays a durable deduplication exchange's stored log
// (the newest entries that have not expired come back) and notes the
// segments left without entries in drop. Recovery, before any connection.
func (v *VHost) recoverDedup(ex *exchange.Exchange, drop *persist.Batch) error {
	d := ex.Dedup
	if d == nil || d.Owner == nil {
		return nil
	}
	now := time.Now().UnixMilli()
	return v.store.Dedups(persist.DedupExchange, d.Owner, func(seg uint64, entries []byte) error {
		dead, ok := d.Restore(seg, entries, now)
		if !ok {
			v.log.Error("corrupt deduplication segment", zap.String("exchange", ex.Name), zap.Uint64("segment", seg))
		}
		for _, s := range dead {
			drop.DeleteDedup(persist.DedupExchange, d.Owner, s)
		}
		return nil
	})
}
