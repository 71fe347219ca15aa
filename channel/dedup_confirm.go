package channel

import "github.com/railmq/railmq/queue"

// duplicate confirms a publish that a deduplication exchange found to be
// a duplicate and routed nowhere, as its x-deduplication-confirm (or the
// message's header) asks (vhost/dedup_confirm.go): "ack" once everything
// the store was given before it is durable (the original's writes and
// its id among them; an original still on its way to the store is
// waited for), "nack" at once. Either way it is not returned to a
// mandatory publisher: the confirm is the answer.
func (c *Channel) duplicate(how queue.DedupConfirm) {
	c.scratch.ResetSeen()
	c.counts.UnroutableDropped.Add(1)
	c.stats.DropUnroutable.Add(1)
	conf := c.newConfirm(1)
	if conf == nil {
		return
	}
	if how == queue.DedupConfirmNack {
		conf.Done(queue.ErrDuplicate)
		return
	}
	// Its original may not be stored yet (its entry is held until it
	// is, vhost.Scratch.DupHeld): the ack waits for it.
	c.cfg.VHost.AfterDuplicate(c.scratch.DupHeld, conf.Done)
}
