package cluster

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/railmq/railmq/crypt"
)

func testKeys(k byte, old ...byte) *crypt.Keys {
	ks := &crypt.Keys{Key: bytes.Repeat([]byte{k}, 32), KeyFile: "key"}
	for _, o := range old {
		ks.Old = append(ks.Old, crypt.OldKey{Key: bytes.Repeat([]byte{o}, 32), File: "old"})
	}
	return ks
}

func writeSnapshot(t *testing.T, s raft.SnapshotStore, index uint64, data []byte) string {
	t.Helper()
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	sink, err := s.Create(1, index, 1, raft.Configuration{Servers: []raft.Server{{ID: "a", Address: "a"}}}, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.ID()
}

func readSnapshot(t *testing.T, s raft.SnapshotStore, id string) (*raft.SnapshotMeta, []byte, error) {
	t.Helper()
	m, rc, err := s.Open(id)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return m, b, err
}

// stateFiles is every snapshot's state.bin, concatenated.
func stateFiles(t *testing.T, dir string) []byte {
	t.Helper()
	var all []byte
	ms, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	for _, p := range ms {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// Encrypted snapshots: raft sees the plaintext and its size; the files
// hold ciphertext; another key cannot open them; a rotation writes the
// newest again under the new key, which then opens it alone.
func TestEncryptedSnapshots(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("snapshot-secret "), 10000) // several blocks
	s, err := snapshotStore(dir, testKeys(1), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	id := writeSnapshot(t, s, 10, data)
	ms, err := s.List()
	if err != nil || len(ms) != 1 || ms[0].Size != int64(len(data)) {
		t.Fatalf("list: %v %+v", err, ms)
	}
	m, b, err := readSnapshot(t, s, id)
	if err != nil || !bytes.Equal(b, data) || m.Size != int64(len(data)) {
		t.Fatalf("read back %d bytes (size %v), %v", len(b), m, err)
	}
	if bytes.Contains(stateFiles(t, dir), []byte("snapshot-secret")) {
		t.Fatal("snapshot in the clear")
	}
	other, err := snapshotStore(dir, testKeys(2), hclog.NewNullLogger())
	if err == nil {
		if _, _, err = readSnapshot(t, other, id); err == nil {
			t.Fatal("another key opened the snapshot")
		}
	}
	rot, err := snapshotStore(dir, testKeys(2, 1), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ms, err = rot.List()
	if err != nil || len(ms) != 2 || ms[0].Index != 10 || ms[0].ID == id {
		t.Fatalf("after the rotation: %v %+v", err, ms)
	}
	only, err := snapshotStore(dir, testKeys(2), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, b, err := readSnapshot(t, only, ms[0].ID); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("the new key alone: %d bytes, %v", len(b), err)
	}
	// raft's next snapshots reap the one under the old key.
	writeSnapshot(t, only, 20, []byte("next"))
	ms, _ = only.List()
	for _, m := range ms {
		if m.ID == id {
			t.Fatalf("the old key's snapshot is still there: %+v", ms)
		}
	}
}
