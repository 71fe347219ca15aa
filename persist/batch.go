package persist

import (
	"github.com/dgraph-io/badger/v4"
)

type opKind uint8

const (
	opSet opKind = iota
	opDelete
	opPutEntry
	opDeleteEntry
	opDropQueue
	opDropRange
	opDropPrefix // every key starting with key
)

type op struct {
	kind   opKind
	key    []byte
	val    []byte
	queue  uint64
	msg    uint64
	shared bool
}

// Batch is a group of changes committed together.
type Batch struct {
	ops  []op
	load func(*badger.Txn) error // a read ordered after earlier writes
	done func(error)
	// atomic: written in one Badger transaction (CommitAtomic, txn.go).
	atomic bool
}

// PutMessage stores a message record.
func (b *Batch) PutMessage(id uint64, rec []byte) {
	b.ops = append(b.ops, op{kind: opSet, key: messageKey(id), val: rec})
}

// PutEntry stores (or rewrites) queue's entry seq for message msg. shared
// marks a message that entries of other queues reference too; transient a
// paged-out message that recovery drops.
func (b *Batch) PutEntry(queue, seq, msg uint64, shared, transient, redelivered bool, count uint32) {
	var f byte
	if shared {
		f |= entryShared
	}
	if transient {
		f |= entryTransient
	}
	if redelivered {
		f |= entryRedelivered
	}
	b.ops = append(b.ops, op{kind: opPutEntry, key: entryKey(queue, seq), val: entryValue(msg, f, count), msg: msg, shared: shared})
}

// PutEntryInline stores queue's entry seq with the message record inside
// it: one key written and one deleted per message, for a message no other
// queue references.
func (b *Batch) PutEntryInline(queue, seq, msg uint64, transient, redelivered bool, count uint32, rec []byte) {
	f := byte(entryInline)
	if transient {
		f |= entryTransient
	}
	if redelivered {
		f |= entryRedelivered
	}
	v := append(entryValue(msg, f, count), rec...)
	b.ops = append(b.ops, op{kind: opSet, key: entryKey(queue, seq), val: v})
}

// HoldEntry rewrites an existing entry (as UpdateEntry) as held back for
// a retry delay until until (unix nanos): recovery finds it still held.
func (b *Batch) HoldEntry(queue, seq, msg uint64, shared, transient, redelivered bool, count uint32, until int64) {
	b.ops = append(b.ops, op{kind: opSet, key: entryKey(queue, seq), val: entryValueHeld(msg, entryFlags(shared, transient, redelivered), count, until)})
}

// HoldEntryInline is HoldEntry for an entry stored with its record.
func (b *Batch) HoldEntryInline(queue, seq, msg uint64, transient, redelivered bool, count uint32, until int64, rec []byte) {
	v := append(entryValueHeld(msg, entryInline|entryFlags(false, transient, redelivered), count, until), rec...)
	b.ops = append(b.ops, op{kind: opSet, key: entryKey(queue, seq), val: v})
}

func entryFlags(shared, transient, redelivered bool) byte {
	var f byte
	if shared {
		f |= entryShared
	}
	if transient {
		f |= entryTransient
	}
	if redelivered {
		f |= entryRedelivered
	}
	return f
}

// DeleteEntryInline removes an entry stored with its record.
func (b *Batch) DeleteEntryInline(queue, seq uint64) {
	b.ops = append(b.ops, op{kind: opDelete, key: entryKey(queue, seq)})
}

// UpdateEntry rewrites an existing entry (redelivered flag, delivery
// count) without counting a new reference.
func (b *Batch) UpdateEntry(queue, seq, msg uint64, shared, transient, redelivered bool, count uint32) {
	b.PutEntry(queue, seq, msg, shared, transient, redelivered, count)
	b.ops[len(b.ops)-1].kind = opSet
}

// DeleteEntry removes queue's entry seq, and the message record once no
// entry references it.
func (b *Batch) DeleteEntry(queue, seq, msg uint64, shared bool) {
	b.ops = append(b.ops, op{kind: opDeleteEntry, key: entryKey(queue, seq), msg: msg, shared: shared})
}

// DropQueue removes every entry of a queue (and unreferenced messages).
func (b *Batch) DropQueue(queue uint64) {
	b.ops = append(b.ops, op{kind: opDropQueue, queue: queue})
}

// DropRange removes queue's entries with seq >= from (a purge of the
// part of a queue that is on disk only).
func (b *Batch) DropRange(queue, from uint64) {
	b.ops = append(b.ops, op{kind: opDropRange, queue: queue, msg: from})
}

// PutDelivered records the highest sequence of queue handed to a consumer:
// recovery flags the entries up to it redelivered.
func (b *Batch) PutDelivered(queue, seq uint64) {
	var v [8]byte
	putUint64(v[:], seq)
	b.ops = append(b.ops, op{kind: opSet, key: deliveredKey(queue), val: v[:]})
}

// PutDef stores a definition; name is the registry's key for it.
func (b *Batch) PutDef(kind byte, name, val []byte) {
	b.ops = append(b.ops, op{kind: opSet, key: defKey(kind, name), val: val})
}

// DeleteDef removes a definition.
func (b *Batch) DeleteDef(kind byte, name []byte) {
	b.ops = append(b.ops, op{kind: opDelete, key: defKey(kind, name)})
}

// PutDelayed stores a delayed message of the exchange the registry keys
// name, due at due (Unix ms), seq telling apart messages due at the same
// millisecond. A transient one is dropped at recovery.
func (b *Batch) PutDelayed(name []byte, due int64, seq uint64, transient bool, rec []byte) {
	v := make([]byte, 1, 1+len(rec))
	if transient {
		v[0] = delayedTransient
	}
	b.ops = append(b.ops, op{kind: opSet, key: delayedKey(name, due, seq), val: append(v, rec...)})
}

// DeleteDelayed removes a delayed message (routed, or dropped).
func (b *Batch) DeleteDelayed(name []byte, due int64, seq uint64) {
	b.ops = append(b.ops, op{kind: opDelete, key: delayedKey(name, due, seq)})
}

// DropDelayed removes every delayed message of an exchange (deleted).
func (b *Batch) DropDelayed(name []byte) {
	b.ops = append(b.ops, op{kind: opDropPrefix, key: delayedPrefix(name)})
}

// Defs calls f for each definition the batch puts (del false) or deletes,
// in order, and reports whether the batch holds anything else.
func (b *Batch) Defs(f func(kind byte, name, val []byte, del bool)) (other bool) {
	for _, o := range b.ops {
		if len(o.key) < 2 || o.key[0] != prefixDef || (o.kind != opSet && o.kind != opDelete) {
			other = true
			continue
		}
		f(o.key[1], o.key[2:], o.val, o.kind == opDelete)
	}
	return other || b.load != nil
}

// PutDedup stores segment seg of owner's deduplication cache log: the
// entries it gained since the previous segment (opaque here).
func (b *Batch) PutDedup(kind byte, owner []byte, seg uint64, entries []byte) {
	b.ops = append(b.ops, op{kind: opSet, key: dedupKey(kind, owner, seg), val: entries})
}

// DeleteDedup removes segment seg of owner's deduplication cache log.
func (b *Batch) DeleteDedup(kind byte, owner []byte, seg uint64) {
	b.ops = append(b.ops, op{kind: opDelete, key: dedupKey(kind, owner, seg)})
}

// DropDedup removes owner's whole deduplication cache (its exchange is
// deleted, or declared anew over what a deleted one left).
func (b *Batch) DropDedup(kind byte, owner []byte) {
	b.ops = append(b.ops, op{kind: opDropPrefix, key: dedupPrefix(kind, owner)})
}

// check makes Badger's per-entry checks on every key and value the
// batch writes (a drop's prefix is only read, never written).
func (b *Batch) check(maxVal int64) error {
	for i := range b.ops {
		o := &b.ops[i]
		if o.kind == opDropQueue || o.kind == opDropRange || o.kind == opDropPrefix {
			continue
		}
		if err := checkEntry(o.key, o.val, maxVal); err != nil {
			return err
		}
	}
	return nil
}

// Len is the number of changes in the batch.
func (b *Batch) Len() int { return len(b.ops) }

func putUint64(b []byte, v uint64) {
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}
