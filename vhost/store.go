package vhost

import (
	"encoding/binary"
	"fmt"
	"sort"
	"time"

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

func (a storeAdapter) LoadEntries(q, after uint64, n int, done func([]queue.StoredEntry, error)) {
	a.s.ReadEntries(q, after, n, func(es []persist.Entry, err error) {
		if err != nil {
			done(nil, err)
			return
		}
		out := make([]queue.StoredEntry, len(es))
		for i, e := range es {
			out[i] = queue.StoredEntry{Seq: e.Seq, Msg: e.Msg, Shared: e.Shared, Transient: e.Transient,
				Redelivered: e.Redelivered, Inline: e.Inline, Count: e.Count, Record: e.Data}
		}
		done(out, nil)
	})
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
func defName(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
		b = append(b, p...)
	}
	return b
}

func splitDefName(b []byte) ([]string, error) {
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
	b.PutDef(persist.DefExchange, defName(v.name, ex.Name), encodeDef(amqp.Table{
		"type": ex.Kind.String(), "durable": ex.Durable, "auto_delete": ex.AutoDelete,
		"internal": ex.Internal, "arguments": orEmpty(ex.Args),
	}))
}

func (v *VHost) putQueueDef(b *persist.Batch, c *queue.Config) {
	b.PutDef(persist.DefQueue, defName(v.name, c.Name), encodeDef(amqp.Table{
		"id": int64(c.ID), "auto_delete": c.AutoDelete, "arguments": orEmpty(c.Args),
	}))
}

func bindingName(vh, source string, b exchange.Binding) []byte {
	kind := "q"
	if b.Dest.Exchange {
		kind = "x"
	}
	return defName(vh, source, kind, b.Dest.Name, b.Key, canonicalArgs(b.Args))
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

// --- recovery ------------------------------------------------------------

// Recover restores durable exchanges, queues (with their messages) and
// bindings from the store. It runs before any connection is accepted.
func (v *VHost) Recover(defaults queue.Config) error {
	if v.store == nil {
		return nil
	}
	start := time.Now()
	nx := 0
	err := v.store.Definitions(persist.DefExchange, func(name, val []byte) error {
		parts, err := splitDefName(name)
		if err != nil || len(parts) != 2 || parts[0] != v.name {
			return err
		}
		t, err := amqp.DecodeTable(val)
		if err != nil {
			return fmt.Errorf("exchange %q: %w", parts[1], err)
		}
		kind, _ := exchange.ParseKind(str(t["type"]))
		if kind == 0 {
			return fmt.Errorf("exchange %q: unknown type %v", parts[1], t["type"])
		}
		args, _ := t["arguments"].(amqp.Table)
		if len(args) == 0 {
			args = nil
		}
		v.exchanges[parts[1]] = exchange.New(parts[1], kind, true, t["auto_delete"] == true, t["internal"] == true, args)
		nx++
		return nil
	})
	if err != nil {
		return err
	}
	// Queues are rebuilt here but started only once the whole registry is
	// back (bindings too): a queue starts expiring and dead-lettering at
	// once, and its messages must find every exchange, queue and binding
	// they route to; and no commit may reach the store while the queues'
	// entries (and the shared messages' reference counts) are recovered.
	type pendingQueue struct {
		name string
		cfg  queue.Config
	}
	var pending []pendingQueue
	keep := map[uint64]bool{}
	nq, nm := 0, 0
	var maxID uint64
	err = v.store.Definitions(persist.DefQueue, func(name, val []byte) error {
		parts, err := splitDefName(name)
		if err != nil || len(parts) != 2 || parts[0] != v.name {
			return err
		}
		t, err := amqp.DecodeTable(val)
		if err != nil {
			return fmt.Errorf("queue %q: %w", parts[1], err)
		}
		id, _ := t["id"].(int64)
		args, _ := t["arguments"].(amqp.Table)
		if len(args) == 0 {
			args = nil
		}
		sum, err := v.store.RecoverQueue(uint64(id))
		if err != nil {
			return fmt.Errorf("queue %q: %w", parts[1], err)
		}
		qa, _ := validateQueueArgs(parts[1], v.name, args)
		cfg := v.queueConfig(defaults, QueueDecl{Name: parts[1], Durable: true, AutoDelete: t["auto_delete"] == true, Args: args}, qa)
		cfg.ID = uint64(id)
		cfg.Recovered = &queue.Recovered{Count: sum.Count, MaxSeq: sum.MaxSeq, Delivered: sum.Delivered}
		pending = append(pending, pendingQueue{parts[1], cfg})
		keep[uint64(id)] = true
		maxID = max(maxID, uint64(id))
		nq++
		nm += sum.Count
		v.log.Info("queue recovered", zap.String("queue", parts[1]), zap.Int("messages", sum.Count), zap.Int("transient_dropped", sum.Dropped),
			zap.Int("queues_so_far", nq), zap.Int("messages_so_far", nm),
			zap.Float64("messages_per_second", float64(nm)/max(time.Since(start).Seconds(), 1e-9)))
		return nil
	})
	if err != nil {
		return err
	}
	if v.nextQueueID.Load() < maxID {
		v.nextQueueID.Store(maxID)
	}
	nb := 0
	err = v.store.Definitions(persist.DefBinding, func(name, val []byte) error {
		parts, err := splitDefName(name)
		if err != nil || len(parts) != 6 || parts[0] != v.name {
			return err
		}
		t, _ := amqp.DecodeTable(val)
		args, _ := t["arguments"].(amqp.Table)
		if len(args) == 0 {
			args = nil
		}
		src := v.exchanges[parts[1]]
		if src == nil {
			return nil
		}
		src.Bind(exchange.Binding{Dest: exchange.Dest{Name: parts[3], Exchange: parts[2] == "x"}, Key: parts[4], Args: args})
		nb++
		return nil
	})
	if err != nil {
		return err
	}
	orphans, err := v.store.DropOrphans(keep)
	if err != nil {
		return err
	}
	// Now the queues start. Their first expiries and dead-letterings wait
	// for the registry's lock, so they see every queue.
	v.mu.Lock()
	for _, p := range pending {
		v.queues[p.name] = queue.New(p.cfg)
	}
	v.mu.Unlock()
	v.log.Info("definitions and messages recovered", zap.Int("exchanges", nx), zap.Int("queues", nq), zap.Int("bindings", nb),
		zap.Int("messages", nm), zap.Int("orphaned_queues_dropped", orphans), zap.Duration("took", time.Since(start)))
	return nil
}

func str(v any) string { s, _ := v.(string); return s }
