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
// entry of a durable cache is kept out of the log until Release(t). A
// duplicate, or an id not added, gives the zero ticket.
func (d *DedupCache) Hold(key []byte, now, ttl int64, hasTTL bool) (dup bool, t DedupTicket) {
	return d.check(key, now, ttl, hasTTL, true)
}

// Release lets the entry t names be written (at the next Flush): its
// message's writes are durable. An entry evicted meanwhile, or a zero
// ticket, is not written.
func (d *DedupCache) Release(t DedupTicket) {
	if t.gen == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if int(t.slot) >= len(d.slots) {
		return
	}
	s := &d.slots[t.slot]
	if s.klen < 0 || s.gen != t.gen || !s.held {
		return
	}
	s.held = false
	d.logEntry(t.slot)
}

// Recall adds an id found in a stored message that came through the
// exchange (recovery, after Restore): its entry may have been lost by a
// crash after the message was stored, and a retry of the message must
// still be a duplicate. added is when the message came (unix ms); ttl
// and hasTTL are its x-cache-ttl header's, as for Check. An expired id,
// or one the cache holds, is left; a new entry is written at the next
// Flush.
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
