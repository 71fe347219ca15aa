package cluster

import (
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// TestDropGroupLogLeavesOthersWriting: deleting one group's log from a
// Badger the node's other groups share never fails their writes (raft
// panics when it cannot save its term), and leaves their keys alone.
func TestDropGroupLogLeavesOthersWriting(t *testing.T) {
	db, err := OpenLogDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	gone, err := GroupLogStore(db, groupPrefix("gone"))
	if err != nil {
		t.Fatal(err)
	}
	stays, err := GroupLogStore(db, groupPrefix("stays"))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 20000; i += 1000 {
		var ls []*raft.Log
		for j := i; j < i+1000; j++ {
			ls = append(ls, &raft.Log{Index: j, Term: 1, Type: raft.LogCommand, Data: make([]byte, 100)})
		}
		if err := gone.StoreLogs(ls); err != nil {
			t.Fatal(err)
		}
	}
	if err := stays.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for term := uint64(2); ; term++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := stays.SetUint64([]byte("CurrentTerm"), term); err != nil {
				werr = err
				return
			}
		}
	}()
	for round := 0; round < 3; round++ {
		if err := DropGroupLog(db, groupPrefix("gone")); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if werr != nil {
		t.Fatalf("a write of another group failed during the drop: %v", werr)
	}
	again, err := GroupLogStore(db, groupPrefix("gone"))
	if err != nil {
		t.Fatal(err)
	}
	if first, _ := again.FirstIndex(); first != 0 {
		t.Fatalf("the dropped log still starts at %d", first)
	}
	if term, err := stays.GetUint64([]byte("CurrentTerm")); err != nil || term < 2 {
		t.Fatalf("the other group's term: %d, %v", term, err)
	}
}
