package exchange

import "hash/maphash"

// Held entries. A publish's new id is in the cache (a duplicate of it is
// found) from the moment it is routed, but a durable cache must not
// store it before the message it stands for is stored: a crash between
// the two would leave an entry without its message, and the publisher's
// retry of the unconfirmed message would be dropped as a duplicate of
// nothing. So a publish adds its id with Hold, which keeps the entry out
// of the log, and releases it (Release) once the message's own writes
// are durable; the entry then goes into the segment being filled and is
// written by the next Flush, before the next commit's batches (the
// store runs flushers first), so ahead of anything that commit deletes
// (an ack of the message among them).

// DedupTicket names an entry Hold added, for Release. The zero ticket
// names none.
type DedupTicket struct {
	slot int32
	gen  uint32
}

// Hold is Check for a publish whose message is not stored yet: a new
// entry of a durable cache is kept out of the log until Release(t) (or
// Abandon(t)). An id not added gives the zero ticket; a duplicate of a
// held entry gives that entry's ticket (for Wait), of another the zero
// ticket.
func (d *DedupCache) Hold(key []byte, now, ttl int64, hasTTL bool) (dup bool, t DedupTicket) {
	return d.check(key, now, ttl, hasTTL, true)
}

// Release lets the entry t names be written (at the next Flush): its
// message's writes are durable. An entry evicted meanwhile, or a zero
// ticket, is not written.
func (d *DedupCache) Release(t DedupTicket) {
	d.settle(t, nil)
}

// Abandon is Release for a publish that failed (nacked: its message may
// not be stored): the entry stays in the cache, as any id routed, but
// is never written; what Waits for it gets err.
func (d *DedupCache) Abandon(t DedupTicket, err error) {
	d.settle(t, err)
}

func (d *DedupCache) settle(t DedupTicket, err error) {
	if t.gen == 0 {
		return
	}
	d.mu.Lock()
	ws := d.waits[t]
	delete(d.waits, t)
	if s := d.heldSlot(t); s != nil {
		s.held = false
		if err != nil {
			s.nolog = true
		} else {
			d.logEntry(t.slot)
		}
	}
	d.mu.Unlock()
	for _, w := range ws {
		w(err) // after the entry is in the log: a commit submitted now writes it
	}
}

// Wait has fn called when the held entry t names (a duplicate's
// original) is released (nil) or abandoned (its error), and reports
// true; false, without calling fn, when t names no held entry (the
// zero ticket, or one settled already).
func (d *DedupCache) Wait(t DedupTicket, fn func(error)) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t.gen == 0 {
		return false
	}
	if _, waiting := d.waits[t]; !waiting && d.heldSlot(t) == nil {
		return false
	}
	if d.waits == nil {
		d.waits = make(map[DedupTicket][]func(error))
	}
	d.waits[t] = append(d.waits[t], fn)
	return true
}

// heldSlot is the slot of the held entry t names, nil if none. d.mu
// held.
func (d *DedupCache) heldSlot(t DedupTicket) *dslot {
	if int(t.slot) >= len(d.slots) {
		return nil
	}
	s := &d.slots[t.slot]
	if s.klen < 0 || s.gen != t.gen || !s.held {
		return nil
	}
	return s
}

// Recall adds an id found in a stored message that came through the
// exchange (recovery, after Restore): its entry may have been lost by a
// crash after the message was stored, and a retry of the message must
// still be a duplicate. added is when the message came (unix ms); ttl
// and hasTTL are its x-cache-ttl header's, as for Check. An expired id,
// one the cache holds, or one older than the least recently used entry
// of a full cache is left; a new entry is written at the next Flush.
func (d *DedupCache) Recall(key []byte, added, now, ttl int64, hasTTL bool) {
	h := maphash.Bytes(d.seed, key)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !hasTTL {
		ttl = d.TTL
		hasTTL = ttl > 0
	}
	var expires int64
	if hasTTL {
		if ttl <= 0 {
			return // never added
		}
		expires = added + ttl + 1
	}
	if expires != 0 && expires <= now {
		return
	}
	if j, found := d.m[h]; found && d.sameKey(j, key) {
		return
	}
	if len(d.m) >= d.Size && d.tail >= 0 && d.slots[d.tail].added >= added {
		// Full of ids as recent: an old stored message's id must not
		// push out a newer one (whose message may be consumed).
		return
	}
	i := d.add(h, key, expires, added)
	if d.Owner != nil {
		d.logEntry(i)
	}
}

// ClearFirst has the next Flush call its wipe first, whether or not
// there is anything to write: a new exchange's cache clears what a
// deleted one of its name left in the store, in the same write as (and
// before) its first entries, so that nothing of the old cache survives
// and nothing of the new one is cleared.
func (d *DedupCache) ClearFirst() {
	d.mu.Lock()
	d.clear = true
	d.mu.Unlock()
}

// logEntry puts the entry of slot i into the segment being filled.
// d.mu held, d.Owner set.
func (d *DedupCache) logEntry(i int32) {
	s := &d.slots[i]
	s.seg = d.seg
	d.live[d.seg]++
	var key []byte
	if s.klen > inlineKey {
		key = []byte(d.long[i])
	} else {
		key = s.key[:s.klen]
	}
	d.pend = AppendEntry(d.pend, key, s.expires, s.added)
}
