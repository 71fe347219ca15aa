package broker

import "github.com/railmq/railmq/channel"

// PendingAck is an unacked delivery of a channel with its ack deadline
// (amq.railmq.lease moves it): what the management API shows as a
// channel's pending_acks.
type PendingAck = channel.PendingAck

// PendingAcks lists up to limit unacked deliveries of channel number n of
// connection connID, in tag order; nil when there is no such channel.
func (s *Server) PendingAcks(connID uint64, n uint16, limit int) []PendingAck {
	for _, c := range s.openConns() {
		if c.id != connID {
			continue
		}
		c.snapMu.Lock()
		ch := c.snap[n]
		c.snapMu.Unlock()
		if ch == nil {
			return nil
		}
		return ch.PendingAcks(limit)
	}
	return nil
}

// LeaseCounts are the leases and retries workers asked for since start
// (amq.railmq.lease, amq.railmq.retry): deadlines moved, retries
// scheduled, such publishes refused.
type LeaseCounts struct {
	Extended, Retried, Refused int64
}

// LeaseCounts reads the broker's lease counts.
func (s *Server) LeaseCounts() LeaseCounts {
	t := &s.totals
	return LeaseCounts{Extended: t.LeasesExtended.Load(), Retried: t.RetriesScheduled.Load(), Refused: t.LeasesRefused.Load()}
}
