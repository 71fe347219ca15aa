package vhost

import "github.com/railmq/railmq/queue"

// FanOut hands msg to the queues it was routed to (qs, from Route) and
// stores a persistent message's record once however many durable queues
// take it: inside the entry of its one durable queue (Inline: one key
// instead of two), or as one record the durable queues' entries share
// (Shared), committed before them so that entries follow it. store is
// nil when nothing is durable; fl is the caller's flush set (see
// queue.PublishConfirm), or nil.
//
// A queue's take of msg is waited for when the queue writes msg to the
// store, or when rejects is set and the queue may refuse it (x-overflow
// reject-publish: a publisher in confirm mode must hear of it). If
// anything is to be waited for, newConf is called once, before any queue
// sees msg, with the number of Done calls to expect (one per waited queue,
// plus one for a shared record); it returns the Confirmer to give them, or
// nil to wait for nothing. A queue deleted meanwhile counts as done, as if
// msg had not been routed there.
//
// It reports whether any queue took msg (routed) and whether newConf was
// called (waited): if not, nothing of msg needs the store and the caller
// may confirm at once.
//
// The channel's publish and dead-lettering both come through here.
func FanOut(store queue.Store, msg *queue.Message, qs []*queue.Queue, rejects bool,
	newConf func(n int) queue.Confirmer, fl *queue.Flushes) (routed, waited bool) {
	durable, waits := 0, 0
	for _, q := range qs {
		d := msg.Persistent && store != nil && q.Durable()
		if d {
			durable++
		}
		if d || (rejects && q.MayReject()) {
			waits++
		}
	}
	if waits == 0 {
		for _, q := range qs {
			if q.PublishConfirm(msg, nil, fl) {
				routed = true
			}
		}
		return routed, false
	}
	n := waits
	if durable > 1 {
		n++ // the shared record
	}
	conf := newConf(n)
	if durable == 1 {
		// One durable queue: the record goes inside its entry, written by
		// the queue.
		msg.ID = store.NewMessageID()
		msg.Inline = true
	}
	if durable > 1 {
		msg.ID = store.NewMessageID()
		msg.Shared = true
		w := &queue.Writes{}
		w.PutMessage(msg.ID, queue.EncodeMessage(msg))
		if conf != nil {
			store.Commit(w, conf.Done) // the record first: entries follow it
		} else {
			store.Commit(w, nil)
		}
	}
	for _, q := range qs {
		wait := (msg.Persistent && store != nil && q.Durable()) || (rejects && q.MayReject())
		if !wait || conf == nil {
			routed = q.PublishConfirm(msg, nil, fl) || routed
			continue
		}
		if q.PublishConfirm(msg, conf, fl) {
			routed = true
		} else {
			conf.Done(nil) // deleted meanwhile: as if not routed there
		}
	}
	return routed, true
}
