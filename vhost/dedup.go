package vhost

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
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
// confirm mode gets basic.ack.
//
// A durable exchange's cache is stored (unless declared with
// x-cache-persistence "memory"): each new entry is one small key under
// prefix 'u', named by the cache slot it takes (so it overwrites the
// record of the entry it replaces, and nothing is ever deleted but the
// whole cache with its exchange), committed, in the registry's order,
// before the message's own writes; a confirm waits for it (see
// Scratch.DedupWrote). A restart restores the entries that have not
// expired.

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
	return int(min(n, 1<<40)), ttl, memory, nil
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
// its arguments were validated when it was declared. v.mu held.
func (v *VHost) attachDedup(ex *exchange.Exchange) {
	size, ttl, memory, err := dedupArgs(ex.Args)
	if err != nil {
		// Stored before validation existed, or by hand: a cache of one
		// entry keeps the exchange usable.
		size, ttl = 1, 0
	}
	d := exchange.NewDedup(size, ttl)
	if ex.Durable && !memory && v.store != nil {
		d.Owner = DefName(v.name, ex.Name)
	}
	ex.Dedup = d
}

// duplicate checks the message being routed (its headers in s) against
// ex's cache, adding it when new, and reports whether it is a duplicate.
// The cache's store writes are gathered in s, committed by Route. v.mu
// read-held.
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
	now := time.Now().UnixMilli()
	dup, slot, exp := d.Check(key, now, ttl, hasTTL)
	if !dup && slot >= 0 && d.Owner != nil {
		if s.dedupW == nil {
			s.dedupW = &persist.Batch{}
		}
		s.dedupW.PutDedup(persist.DedupExchange, d.Owner, uint32(slot), key, exp, now)
	}
	return dup
}

// commitDedup submits the cache writes routing gathered in s. v.mu
// read-held: a delete of the exchange (which drops its entries) is
// submitted after them.
func (v *VHost) commitDedup(s *Scratch) {
	w := s.dedupW
	s.dedupW = nil
	if w.Len() == 0 {
		return
	}
	s.DedupWrote = true
	v.store.Commit(w, func(err error) {
		if err != nil {
			v.log.Error("writing deduplication entries", zap.Error(err))
		}
	})
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

// recoverDedup restores a durable deduplication exchange's stored entries
// that have not expired. Recovery, before any connection.
func (v *VHost) recoverDedup(ex *exchange.Exchange) error {
	d := ex.Dedup
	if d == nil || d.Owner == nil {
		return nil
	}
	var es []exchange.Entry
	err := v.store.Dedups(persist.DedupExchange, d.Owner, func(slot uint32, id []byte, expires, added int64) {
		es = append(es, exchange.Entry{Slot: int32(min(slot, 1<<31-1)), Key: id, Expires: expires, Added: added})
	})
	if err != nil {
		return err
	}
	slices.SortStableFunc(es, func(a, b exchange.Entry) int { return cmp.Compare(a.Added, b.Added) })
	d.Restore(es, time.Now().UnixMilli())
	return nil
}
