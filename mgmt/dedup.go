package mgmt

import "github.com/railmq/railmq/queue"

// dedupShown is a queue's messages_deduplicated (railmq's own): the
// duplicates it dropped, shown for a queue declared with
// x-message-deduplication, or once it has dropped one (deduplicating by
// a policy).
func dedupShown(q *queue.Queue) (int64, bool) {
	n := q.Deduplicated()
	if n > 0 {
		return n, true
	}
	v, ok := q.Config().Args["x-message-deduplication"]
	return 0, ok && v != false
}
