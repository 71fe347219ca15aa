package crypt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"
)

// ErrNoKey is returned for an encrypted store opened without a key.
var ErrNoKey = errors.New("is encrypted, but no --data-encryption-key-file was given")

// ErrPlainStore is returned for a store written without encryption
// opened with a key.
var ErrPlainStore = errors.New("is not encrypted, but --data-encryption-key-file was given " +
	"(railmq does not encrypt an existing store in place: see docs/encryption.md, Migrating)")

// Badger prepares bo (its Dir set) to open a Badger store under ks (nil:
// no encryption), before badger.Open. Badger encrypts its tables, value
// log and memtable WALs with data keys (AES-CTR), kept in its key
// registry (the KEYREGISTRY file) encrypted with the master key, ks.Key.
//
// It reads the key registry first, so that a wrong or missing key is an
// error that says so, never an empty store (badger.Open alone answers a
// bare ErrEncryptionKeyMismatch): a store encrypted with an old key
// (one of ks.Old) has its registry rewritten with ks.Key, Badger's
// master-key rotation (badger's `rotate` command does the same); its
// data keys, and so the data, stay as they are. rotated reports that.
func (ks *Keys) Badger(bo badger.Options) (out badger.Options, rotated bool, err error) {
	dir := bo.Dir
	if ks != nil {
		bo = bo.WithEncryptionKey(ks.Key)
		if ks.DataKeyRotation > 0 {
			bo = bo.WithEncryptionKeyRotationDuration(ks.DataKeyRotation)
		}
		if bo.IndexCacheSize == 0 {
			bo = bo.WithIndexCacheSize(8 << 20) // Badger's advice with encryption
		}
	}
	if _, err := os.Stat(filepath.Join(dir, badger.KeyRegistryFileName)); errors.Is(err, fs.ErrNotExist) {
		return bo, false, nil // a new store
	} else if err != nil {
		return bo, false, err
	}
	opened := func(key []byte) error {
		kr, err := badger.OpenKeyRegistry(badger.KeyRegistryOptions{Dir: dir, ReadOnly: true, EncryptionKey: key})
		if err == nil {
			return kr.Close()
		}
		return err
	}
	if ks == nil {
		err := opened(nil)
		if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
			return bo, false, fmt.Errorf("the store in %s %w", dir, ErrNoKey)
		}
		return bo, false, wrapRegistry(dir, err)
	}
	err = opened(ks.Key)
	if !errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		return bo, false, wrapRegistry(dir, err)
	}
	for _, o := range ks.Old {
		kro := badger.KeyRegistryOptions{Dir: dir, ReadOnly: true, EncryptionKey: o.Key}
		kr, err := badger.OpenKeyRegistry(kro)
		if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
			continue
		}
		if err != nil {
			return bo, false, wrapRegistry(dir, err)
		}
		kro.EncryptionKey, kro.ReadOnly = ks.Key, false
		if err := badger.WriteKeyRegistry(kr, kro); err != nil {
			return bo, false, fmt.Errorf("rotating the master key of the store in %s from %s to %s: %w", dir, o.File, ks.KeyFile, err)
		}
		return bo, true, nil
	}
	if opened(nil) == nil {
		return bo, false, fmt.Errorf("the store in %s %w", dir, ErrPlainStore)
	}
	return bo, false, fmt.Errorf("the store in %s: %w (key files: %s); give the key it was written with, "+
		"or that key as --data-encryption-old-key-file beside the new one to rotate", dir, ErrWrongKey, ks.Describe())
}

func wrapRegistry(dir string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("reading the key registry of the store in %s: %w", dir, err)
}
