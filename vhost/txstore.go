package vhost

import (
	"errors"

	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// CommitAtomic writes w in one atomic store write (queue.AtomicStore: a
// transaction's tx.commit).
func (a storeAdapter) CommitAtomic(w *queue.Writes, done func(error)) {
	a.s.CommitAtomic(batchOf(w), done)
}

// TxnLimits are the most changes, and bytes, one atomic write takes.
func (a storeAdapter) TxnLimits() (count, size int64) { return a.s.TxnLimits() }

// TooBig reports whether err is an atomic write over TxnLimits.
func (a storeAdapter) TooBig(err error) bool { return errors.Is(err, persist.ErrTxnTooBig) }
