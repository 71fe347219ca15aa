package queue

import (
	"encoding/binary"
	"errors"
)

// Store is how a queue reaches durable storage. It uses built-in types
// only, so that the store (persist) satisfies it through a thin adapter
// without importing this package.
type Store interface {
	// NewMessageID returns a fresh message id.
	NewMessageID() uint64
	// Commit writes w in the next group commit and calls done (if not nil)
	// once it is durable, or with the error that kept it from being so.
	Commit(w *Writes, done func(error))
	// LoadEntries reads up to max of queue's entries with seq > after, in
	// order, with their message records, and stops once the records passed
	// maxBytes (at least one is read); it calls done with them; the
	// read sees every earlier Commit. done runs on the store's goroutine
	// (or on the caller's, when the store is closed) and must not block:
	// the queue posts what it read to itself (see paging.go).
	LoadEntries(queue, after uint64, max int, maxBytes int64, done func([]StoredEntry, error))
}

// StoredEntry is a queue entry read back from the store.
type StoredEntry struct {
	Seq, Msg    uint64
	Shared      bool
	Transient   bool
	Redelivered bool
	Inline      bool // the record was stored inside the entry
	Count       uint32
	Until       int64  // held back for a retry delay until then (unix nanos); 0: not held
	Record      []byte // EncodeMessage's output
}

// WriteKind says what a StoreWrite does.
type WriteKind uint8

// Write kinds.
const (
	PutMessage WriteKind = iota + 1
	PutEntry
	UpdateEntry
	DeleteEntry
	PutDelivered
	DropRange
	DropQueue
)

// StoreWrite is one change in a Writes.
type StoreWrite struct {
	Kind                           WriteKind
	Queue, Seq, Msg                uint64
	Shared, Transient, Redelivered bool
	// Inline: PutEntry and UpdateEntry carry the message Record inside the
	// entry; DeleteEntry removes such an entry (there is no record apart).
	Inline bool
	Count  uint32
	// Until: an UpdateEntry of a message held back for a retry delay
	// until then (unix nanos; retry.go).
	Until  int64
	Record []byte
}

// Writes is a group of changes for one Commit.
type Writes struct {
	Ops []StoreWrite
}

// Len is the number of changes.
func (w *Writes) Len() int { return len(w.Ops) }

func (w *Writes) add(op StoreWrite) { w.Ops = append(w.Ops, op) }

// PutMessage stores a message record.
func (w *Writes) PutMessage(id uint64, rec []byte) {
	w.add(StoreWrite{Kind: PutMessage, Msg: id, Record: rec})
}

// EncodeMessage is the stored form of a message: exchange, routing key,
// properties and body, with the time it was published.
func EncodeMessage(m *Message) []byte {
	b := make([]byte, 0, 1+len(m.Exchange)+1+len(m.RoutingKey)+4+len(m.Props)+18+len(m.Body))
	b = append(b, byte(len(m.Exchange)))
	b = append(b, m.Exchange...)
	b = append(b, byte(len(m.RoutingKey)))
	b = append(b, m.RoutingKey...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Props)))
	b = append(b, m.Props...)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Enqueued))
	b = binary.BigEndian.AppendUint64(b, uint64(m.Expires))
	var f byte
	if m.Persistent {
		f |= 1
	}
	b = append(b, f, m.Priority)
	return append(b, m.Body...)
}

var errRecord = errors.New("corrupt message record")

// DecodeMessage reverses EncodeMessage. The message's slices alias rec.
func DecodeMessage(rec []byte) (*Message, error) {
	m := &Message{}
	p := rec
	if len(p) < 1 || len(p) < 1+int(p[0]) {
		return nil, errRecord
	}
	m.Exchange, p = string(p[1:1+int(p[0])]), p[1+int(p[0]):]
	if len(p) < 1 || len(p) < 1+int(p[0]) {
		return nil, errRecord
	}
	m.RoutingKey, p = string(p[1:1+int(p[0])]), p[1+int(p[0]):]
	if len(p) < 4 {
		return nil, errRecord
	}
	n := binary.BigEndian.Uint32(p)
	if uint64(len(p)-4) < uint64(n)+18 {
		return nil, errRecord
	}
	m.Props, p = p[4:4+n], p[4+n:]
	m.Enqueued = int64(binary.BigEndian.Uint64(p))
	m.Expires = int64(binary.BigEndian.Uint64(p[8:]))
	m.Persistent = p[16]&1 != 0
	m.Priority = p[17]
	m.Body = p[18:]
	return m, nil
}
