package persist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	"github.com/railmq/railmq/crypt"
	"go.uber.org/zap"
)

// Encryption at rest (docs/encryption.md). The store is Badger encrypted
// with its own encryption under Options.Keys (crypt.Keys.Badger: the
// key registry is checked first, so that a wrong or missing key is an
// error naming the store, and a store written with an old key has its
// master key rotated). The page files of non-durable queues are
// encrypted with AES-GCM under a key made for this process alone: they
// are removed at every start, so no key of the operator's is needed to
// read them, and none can.

// openBadger opens the store's Badger under opt.Keys.
func openBadger(bo badger.Options, opt Options) (*badger.DB, error) {
	bo, rotated, err := opt.Keys.Badger(bo)
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	if rotated {
		opt.Logger.Info("store master key rotated to the new data encryption key", zap.String("dir", opt.Dir), zap.String("key_file", opt.Keys.KeyFile))
	}
	db, err := badger.Open(bo)
	if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		return nil, fmt.Errorf("opening store in %s: %w (the data encryption key does not match the store's)", opt.Dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("opening store in %s: %w", opt.Dir, err)
	}
	return db, nil
}

// OpenEncryptedSpill is OpenSpill whose page files hold each record
// encrypted (AES-256-GCM under a random key of this process, the entry's
// seq, message id, flags and count authenticated with it).
func OpenEncryptedSpill(dir string, reserve int64, mem *atomic.Int64, before func(), log *zap.Logger) (*Spill, error) {
	seal, err := crypt.Ephemeral()
	if err != nil {
		return nil, err
	}
	return openSpill(dir, reserve, mem, before, log, seal)
}

// appendEntry encodes one entry, its record sealed when the spill
// encrypts.
func (s *Spill) appendEntry(b []byte, e *SpillEntry) []byte {
	if s.seal == nil {
		return appendSpill(b, e)
	}
	start := len(b)
	b = appendSpill(b, e)
	b = s.seal.Seal(b, start+spillHeader, b[start+4:start+spillHeader])
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// open decrypts the records of entries read, in place.
func (s *Spill) open(es []Entry) error {
	if s.seal == nil {
		return nil
	}
	var ad [spillHeader - 4]byte
	for i := range es {
		e := &es[i]
		binary.BigEndian.PutUint64(ad[0:], e.Seq)
		binary.BigEndian.PutUint64(ad[8:], e.Msg)
		ad[16] = 0
		if e.Redelivered {
			ad[16] = 1
		}
		binary.BigEndian.PutUint32(ad[17:], e.Count)
		p, err := s.seal.Open(e.Data, ad[:])
		if err != nil {
			return fmt.Errorf("entry %d: %w", e.Seq, err)
		}
		e.Data = p
	}
	return nil
}
