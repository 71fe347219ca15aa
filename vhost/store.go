package vhost

import (
	"encoding/binary"
	"fmt"
	"sort"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// storeAdapter lets queues reach the persist store through queue.Store.
type storeAdapter struct{ s *persist.Store }

func (a storeAdapter) NewMessageID() uint64 { return a.s.NewMessageID() }

func (a storeAdapter) Commit(w *queue.Writes, done func(error)) {
	b := &persist.Batch{}
	for i := range w.Ops {
		o := &w.Ops[i]
		switch o.Kind {
		case queue.PutMessage:
			b.PutMessage(o.Msg, o.Record)
		case queue.PutEntry, queue.UpdateEntry:
			switch {
			case o.Until != 0 && o.Inline:
				b.HoldEntryInline(o.Queue, o.Seq, o.Msg, o.Transient, o.Redelivered, o.Count, o.Until, o.Record)
			case o.Until != 0:
				b.HoldEntry(o.Queue, o.Seq, o.Msg, o.Shared, o.Transient, o.Redelivered, o.Count, o.Until)
			case o.Inline:
				b.PutEntryInline(o.Queue, o.Seq, o.Msg, o.Transient, o.Redelivered, o.Count, o.Record)
			case o.Kind == queue.PutEntry:
				b.PutEntry(o.Queue, o.Seq, o.Msg, o.Shared, o.Transient, o.Redelivered, o.Count)
			default:
				b.UpdateEntry(o.Queue, o.Seq, o.Msg, o.Shared, o.Transient, o.Redelivered, o.Count)
			}
		case queue.DeleteEntry:
			if o.Inline {
				b.DeleteEntryInline(o.Queue, o.Seq)
			} else {
				b.DeleteEntry(o.Queue, o.Seq, o.Msg, o.Shared)
			}
		case queue.PutDelivered:
			b.PutDelivered(o.Queue, o.Seq)
		case queue.DropRange:
			b.DropRange(o.Queue, o.Seq)
		case queue.DropQueue:
			b.DropQueue(o.Queue)
		}
	}
	a.s.Commit(b, done)
}

func (a storeAdapter) LoadEntries(q, after uint64, n int, maxBytes int64, done func([]queue.StoredEntry, error)) {
	a.s.ReadEntries(q, after, n, maxBytes, storedEntries(done))
}

// storedEntries converts what a read found for the queue's done.
func storedEntries(done func([]queue.StoredEntry, error)) func([]persist.Entry, error) {
	return func(es []persist.Entry, err error) {
		if err != nil {
			done(nil, err)
			return
		}
		out := make([]queue.StoredEntry, len(es))
		for i, e := range es {
			out[i] = queue.StoredEntry{Seq: e.Seq, Msg: e.Msg, Shared: e.Shared, Transient: e.Transient,
				Redelivered: e.Redelivered, Inline: e.Inline, Count: e.Count, Until: e.Until, Record: e.Data}
		}
		done(out, nil)
	}
}

// spillAdapter lets non-durable queues page to the spill through
// queue.Store. Their only writes that matter are page-outs (transient,
// inline entries), purges of the paged part and the queue's deletion; an
// entry is read back once, so its delete has nothing to do.
type spillAdapter struct{ s *persist.Spill }

func (a spillAdapter) NewMessageID() uint64 { return a.s.NewMessageID() }

func (a spillAdapter) Commit(w *queue.Writes, done func(error)) {
	var puts []persist.SpillEntry
	var id uint64
	drop, gone := false, false
	for i := range w.Ops {
		o := &w.Ops[i]
		switch o.Kind {
		case queue.PutEntry:
			puts = append(puts, persist.SpillEntry{Seq: o.Seq, Msg: o.Msg, Redelivered: o.Redelivered, Count: o.Count, Record: o.Record})
			id = o.Queue
		case queue.DropRange:
			puts, drop, id = puts[:0], true, o.Queue // pages out before it are purged too
		case queue.DropQueue:
			puts, gone, id = nil, true, o.Queue
		}
	}
	if len(puts) == 0 && !drop && !gone {
		if done != nil {
			done(nil)
		}
		return
	}
	a.s.Write(id, puts, drop, gone, done)
}

func (a spillAdapter) LoadEntries(q, after uint64, n int, maxBytes int64, done func([]queue.StoredEntry, error)) {
	a.s.Read(q, after, n, maxBytes, storedEntries(done))
}

// Store returns the queues' view of the store (nil without one).
func (v *VHost) Store() queue.Store {
	if v.store == nil {
		return nil
	}
	return storeAdapter{v.store}
}

// --- definitions ---------------------------------------------------------

// Definition keys: vhost name, then the object's names, each length
// prefixed, so that no name can run into the next.
func DefName(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
		b = append(b, p...)
	}
	return b
}

func SplitDefName(b []byte) ([]string, error) {
	var parts []string
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, fmt.Errorf("corrupt definition key")
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			return nil, fmt.Errorf("corrupt definition key")
		}
		parts = append(parts, string(b[2:2+n]))
		b = b[2+n:]
	}
	return parts, nil
}

// canonicalArgs encodes a table with sorted keys, so that equal
// arguments give equal binding keys.
func canonicalArgs(t amqp.Table) string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	for _, k := range keys {
		b = amqp.AppendTable(b, amqp.Table{k: t[k]})
	}
	return string(b)
}

func encodeDef(t amqp.Table) []byte { return amqp.AppendTable(nil, t)[4:] }

func (v *VHost) commitDefs(fill func(b *persist.Batch)) error {
	if v.store == nil {
		return nil
	}
	b := &persist.Batch{}
	fill(b)
	if b.Len() == 0 {
		return nil
	}
	// Not waited for: the committer writes in submission order and fsyncs
	// each group, so a definition is durable no later than any message
	// confirmed into it afterwards (as RabbitMQ, which does not fsync a
	// declare either). defMu keeps submissions in the registry's order.
	v.store.Commit(b, func(err error) {
		if err != nil {
			v.log.Error("writing definitions", zap.Error(err))
		}
	})
	return nil
}

func (v *VHost) putExchangeDef(b *persist.Batch, ex *exchange.Exchange) {
	b.PutDef(persist.DefExchange, DefName(v.name, ex.Name), encodeDef(amqp.Table{
		"type": ex.Type(), "durable": ex.Durable, "auto_delete": ex.AutoDelete,
		"internal": ex.Internal, "arguments": orEmpty(ex.Args),
	}))
}

func (v *VHost) putQueueDef(b *persist.Batch, c *queue.Config) {
	b.PutDef(persist.DefQueue, DefName(v.name, c.Name), encodeDef(amqp.Table{
		"id": int64(c.ID), "auto_delete": c.AutoDelete, "arguments": orEmpty(c.Args),
	}))
}

func bindingName(vh, source string, b exchange.Binding) []byte {
	kind := "q"
	if b.Dest.Exchange {
		kind = "x"
	}
	return DefName(vh, source, kind, b.Dest.Name, b.Key, canonicalArgs(b.Args))
}

func (v *VHost) putBindingDef(b *persist.Batch, source string, bd exchange.Binding) {
	b.PutDef(persist.DefBinding, bindingName(v.name, source, bd), encodeDef(amqp.Table{"arguments": orEmpty(bd.Args)}))
}

func orEmpty(t amqp.Table) amqp.Table {
	if t == nil {
		return amqp.Table{}
	}
	return t
}

// durableBinding reports whether a binding outlives a restart: its source
// and destination both do.
func (v *VHost) durableBinding(src *exchange.Exchange, d exchange.Dest) bool {
	if !src.Durable {
		return false
	}
	if d.Exchange {
		x := v.exchanges[d.Name]
		return x != nil && x.Durable
	}
	q := v.queues[d.Name]
	return q != nil && q.Durable()
}
