package queue

// Dead-letter reasons, as RabbitMQ writes them in x-death.
const (
	ReasonRejected      = "rejected"
	ReasonExpired       = "expired"
	ReasonMaxLen        = "maxlen"
	ReasonDeliveryLimit = "delivery_limit"
)

// DeadLetterFunc republishes a message that leaves q for reason. done,
// when not nil, must be called once the copies are durable (or could not
// be made), so that the queue's own entry is removed only then.
type DeadLetterFunc func(q *Queue, d Delivery, reason string, done func())

// DeadLetterSettledFunc republishes a message that leaves q for reason
// to the queues its dead-letter exchange routes it to but those took
// holds (they confirmed it before), and calls done once each of them has
// confirmed it or refused it: took lists the ones that confirmed it, and
// settled says whether the message may leave q (every target it routes
// to has it, or it routes nowhere now but some target took it before).
// settled is false when the exchange is missing, routes it nowhere, or a
// target refused it: q keeps it and sends it again later (RabbitMQ's
// rabbit_fifo_dlx_worker).
type DeadLetterSettledFunc func(q *Queue, d Delivery, reason string, took map[string]bool, done func(took []string, settled bool))

// deadLetter removes d from the queue for reason: republished to the
// dead-letter exchange when there is one, else dropped. A stored entry is
// deleted only once the copies are durable.
func (q *Queue) deadLetter(d Delivery, reason string) {
	q.account(-d.Msg.MemSize())
	q.cfg.Totals.countDeadLetter(reason, q.pol.DeadLetter != nil)
	if q.pol.DeadLetter == nil {
		q.deleteEntry(&d)
		return
	}
	if q.dedup != nil {
		q.dedupForget(d.Msg)
	}
	if !q.stored(&d) {
		q.pol.DeadLetter(q, d, reason, nil)
		return
	}
	if q.w.Len() > 0 {
		// d's entry may be among this round's writes (a TTL of 0, a
		// length limit): they go to the store first, so that the delete,
		// which done may submit at once, comes after its put.
		q.commit()
	}
	store, del := q.cfg.Store, StoreWrite{Kind: DeleteEntry, Queue: q.storeID(d.Lane), Seq: d.Seq, Msg: d.Msg.ID, Shared: d.Msg.Shared, Inline: d.Msg.Inline}
	q.pol.DeadLetter(q, d, reason, func() {
		store.Commit(&Writes{Ops: []StoreWrite{del}}, nil)
	})
}
