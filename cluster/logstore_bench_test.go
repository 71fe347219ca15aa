package cluster

import (
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkStoreLogs: a leader's append of one round of S3's workload
// (an entry of 200 KiB), written and fsynced. An op is one StoreLogs.
func BenchmarkStoreLogs(b *testing.B) {
	s, err := OpenLogStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := make([]byte, 200<<10)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		if err := s.StoreLogs([]*raft.Log{{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
			b.Fatal(err)
		}
	}
}
