package vhost

import (
	"crypto/sha256"
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

func (a storeAdapter) Commit(w *queue.Writes, done func(error)) { a.s.Commit(batchOf(w), done) }

// batchOf is the store's batch for w.
func batchOf(w *queue.Writes) *persist.Batch {
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
	return b
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
// prefixed, so that no name can run into the next. A part of 65,535 bytes
// or more (which no stored key holds: it is over the store's key limit)
// has 0xffff and a 32-bit length in front, so a length never wraps.
func DefName(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		if len(p) >= longPart {
			b = binary.BigEndian.AppendUint16(b, longPart)
			b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		} else {
			b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
		}
		b = append(b, p...)
	}
	return b
}

// longPart marks a DefName part whose length follows in 32 bits.
const longPart = 0xffff

func SplitDefName(b []byte) ([]string, error) {
	var parts []string
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, fmt.Errorf("corrupt definition key")
		}
		n, h := int(binary.BigEndian.Uint16(b)), 2
		if n == longPart {
			if len(b) < 6 {
				return nil, fmt.Errorf("corrupt definition key")
			}
			n, h = int(binary.BigEndian.Uint32(b[2:])), 6
		}
		if len(b)-h < n {
			return nil, fmt.Errorf("corrupt definition key")
		}
		parts = append(parts, string(b[h:h+n]))
		b = b[h+n:]
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

// commitDefs submits the definitions fill writes to the store and returns
// a wait for them to be stored. Called with defMu held, so that the store
// receives them in the registry's order; wait is called once defMu is
// released (declares on other connections share the fsync). A declare,
// bind or delete is answered once wait returns, as RabbitMQ answers
// declare-ok once its metadata store has the change; wait's error (a
// failed write: a full disk, a key the store refuses) is the client's.
func (v *VHost) commitDefs(fill func(b *persist.Batch)) (wait func() error) {
	if v.store == nil {
		return stored
	}
	b := &persist.Batch{}
	fill(b)
	if b.Len() == 0 {
		return stored
	}
	ch := make(chan error, 1)
	v.store.Commit(b, func(err error) {
		if err != nil {
			v.log.Error("writing definitions", zap.Error(err))
		}
		ch <- err
	})
	return func() error {
		if err := <-ch; err != nil {
			return fmt.Errorf("storing the definition: %w", err)
		}
		return nil
	}
}

// stored is commitDefs' wait when there is nothing to store.
func stored() error { return nil }

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

// bindingName is a binding's key: vhost, source, destination kind and
// name, routing key and arguments (canonicalArgs, so that equal tables
// name one binding). A binding whose key that would make longer than the
// store takes (a large arguments table, a long routing key: RabbitMQ's
// HTTP API takes one of 70,000 bytes) is named instead by the SHA-256 of
// its routing key and arguments, in the last part, after a 0xff byte
// (canonicalArgs starts with a table's 32-bit length, so with 0xff only
// for a table of 4 GiB), the routing key part left empty; the value
// holds both (bindingValue). Every binding the store could hold before
// keeps its key: none is to be migrated.
func bindingName(vh, source string, b exchange.Binding) []byte {
	kind := "q"
	if b.Dest.Exchange {
		kind = "x"
	}
	args := canonicalArgs(b.Args)
	name := DefName(vh, source, kind, b.Dest.Name, b.Key, args)
	if defKeyLen(name) <= persist.MaxKeySize {
		return name
	}
	sum := sha256.Sum256(DefName(b.Key, args))
	return DefName(vh, source, kind, b.Dest.Name, "", hashedArgs+string(sum[:]))
}

// hashedArgs starts the last part of a binding key that names its routing
// key and arguments by their hash.
const hashedArgs = "\xff"

// defKeyLen is the length of the store's key for a definition name
// (persist's 'd' kind name).
func defKeyLen(name []byte) int { return 2 + len(name) }

// bindingValue is a binding's stored value: its arguments and routing
// key (the key's copy is empty when the key is hashed).
func bindingValue(b exchange.Binding) []byte {
	return encodeDef(amqp.Table{"arguments": orEmpty(b.Args), "routing_key": b.Key})
}

// bindingKey is the routing key of a stored binding: the value's, else
// (written before the value held it) the key's.
func bindingKey(parts []string, t amqp.Table) string {
	if k, ok := t["routing_key"].(string); ok {
		return k
	}
	return parts[4]
}

func (v *VHost) putBindingDef(b *persist.Batch, source string, bd exchange.Binding) {
	b.PutDef(persist.DefBinding, bindingName(v.name, source, bd), bindingValue(bd))
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
	return q != nil && v.storedHere(q)
}

// storedHere reports whether a queue's definition is in this node's
// store: a durable classic queue's, or a standalone node's quorum
// queue's (a cluster's are the metadata store's). v.mu held.
func (v *VHost) storedHere(q *queue.Queue) bool {
	return q.Durable() || (v.repl == nil && q.Replicated())
}
