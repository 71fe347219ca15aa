package cluster

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestStopAwareFuture: stopAware gives raft's apply future the group's
// stop channel (raft answers no future left in its apply queue at
// shutdown; waitLocal would wait for it for ever). If a raft upgrade
// renames the field, this fails rather than the hang coming back.
func TestStopAwareFuture(t *testing.T) {
	_, tr := raft.NewInmemTransport("a")
	conf := raft.DefaultConfig()
	conf.LocalID = "a"
	store := raft.NewInmemStore()
	r, err := raft.NewRaft(conf, &raft.MockFSM{}, store, store, raft.NewInmemSnapshotStore(), tr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Shutdown().Error() }()
	stop := make(chan struct{})
	f := stopAware(r.Apply([]byte("x"), time.Second), stop)
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer {
		t.Fatalf("raft's future is a %T", f)
	}
	got := v.Elem().FieldByName("ShutdownCh")
	if !got.IsValid() || got.Interface().(chan struct{}) != stop {
		t.Fatalf("the future's ShutdownCh is not the group's stop: %v", got)
	}
	_ = f.Error() // a follower answers ErrNotLeader
}
