package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/railmq/railmq/crypt"
)

// Encryption at rest of a node's raft state (docs/encryption.md): with
// NodeConfig.Keys set, the log Badgers (the metadata group's and the
// one the quorum queues share) use Badger's encryption (crypt.Keys.Badger),
// and snapshots are written through crypt's AES-GCM file format
// (encSnapshots). Snapshots sent to a follower go in plaintext over the
// inter-node link (--cluster-tls encrypts that) and are encrypted again
// by the follower as it stores them.

// openLogDB opens a raft log Badger in dir under ks (nil: plaintext).
func openLogDB(dir string, ks *crypt.Keys) (*badger.DB, error) {
	opts, _, err := ks.Badger(logDBOptions(dir))
	if err != nil {
		return nil, fmt.Errorf("cluster: opening the raft log: %w", err)
	}
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: opening the raft log in %s: %w", dir, err)
	}
	return db, nil
}

// openLogStore is OpenLogStore under ks.
func openLogStore(dir string, ks *crypt.Keys) (*LogStore, error) {
	db, err := openLogDB(dir, ks)
	if err != nil {
		return nil, err
	}
	s, err := GroupLogStore(db, nil)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// snapshotStore is the file snapshot store in dir, encrypted under ks
// when set.
func snapshotStore(dir string, ks *crypt.Keys, hl hclog.Logger) (raft.SnapshotStore, error) {
	fs, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl)
	if err != nil || ks == nil {
		return fs, err
	}
	es := &encSnapshots{fs: fs, ks: ks}
	if err := es.rekey(); err != nil {
		return nil, fmt.Errorf("cluster: writing the snapshot in %s again under the new data encryption key: %w", dir, err)
	}
	return es, nil
}

// rekey writes the newest snapshot again under the current key if an
// old key wrote it (a rotation): raft restores the newest, so the old
// key is not needed for it afterwards. The copy is a new snapshot of the
// same index and term (FileSnapshotStore writes it to a temporary
// directory and renames it: a crash leaves the old one); the older one
// stays until raft's next snapshots reap it.
func (s *encSnapshots) rekey() error {
	ms, err := s.fs.List()
	if err != nil || len(ms) == 0 {
		return err
	}
	m := ms[0]
	_, rc, err := s.fs.Open(m.ID)
	if err != nil {
		return err
	}
	defer rc.Close()
	hdr := make([]byte, crypt.HeaderSize)
	if _, err := io.ReadFull(rc, hdr); err != nil {
		return err
	}
	if s.ks.Current(hdr) {
		return nil
	}
	r, err := s.ks.NewReader(io.MultiReader(bytes.NewReader(hdr), rc))
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", m.ID, err)
	}
	_, trans := raft.NewInmemTransport("") // encodes peers as the network transport does: their addresses
	defer trans.Close()
	sink, err := s.Create(m.Version, m.Index, m.Term, m.Configuration, m.ConfigurationIndex, trans)
	if err != nil {
		return err
	}
	if _, err := io.Copy(sink, r); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// encSnapshots encrypts the snapshots of a FileSnapshotStore: what the
// FSM writes goes through crypt's file format, and Open decrypts. The
// sizes it reports are the plaintext's (raft checks a copied snapshot's
// length against them).
type encSnapshots struct {
	fs raft.SnapshotStore
	ks *crypt.Keys
}

func (s *encSnapshots) Create(version raft.SnapshotVersion, index, term uint64, c raft.Configuration,
	ci uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.fs.Create(version, index, term, c, ci, trans)
	if err != nil {
		return nil, err
	}
	w, err := s.ks.NewWriter(sink)
	if err != nil {
		sink.Cancel()
		return nil, err
	}
	return &encSink{SnapshotSink: sink, w: w}, nil
}

func (s *encSnapshots) List() ([]*raft.SnapshotMeta, error) {
	ms, err := s.fs.List()
	for _, m := range ms {
		m.Size = crypt.PlainSize(m.Size)
	}
	return ms, err
}

func (s *encSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	m, rc, err := s.fs.Open(id)
	if err != nil {
		return nil, nil, err
	}
	r, err := s.ks.NewReader(rc)
	if err != nil {
		rc.Close()
		if errors.Is(err, crypt.ErrNotEncrypted) {
			return nil, nil, fmt.Errorf("cluster: snapshot %s is not encrypted, but a data encryption key was given", id)
		}
		return nil, nil, fmt.Errorf("cluster: snapshot %s: %w (key files: %s)", id, err, s.ks.Describe())
	}
	m.Size = crypt.PlainSize(m.Size)
	return m, struct {
		io.Reader
		io.Closer
	}{r, rc}, nil
}

type encSink struct {
	raft.SnapshotSink
	w io.WriteCloser
}

func (s *encSink) Write(p []byte) (int, error) { return s.w.Write(p) }

func (s *encSink) Close() error {
	if err := s.w.Close(); err != nil {
		s.SnapshotSink.Cancel()
		return err
	}
	return s.SnapshotSink.Close()
}
