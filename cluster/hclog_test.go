package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// raft's lines through the adapter: one entry each, raft's message as the
// message, its pairs as fields, levels mapped, the group named.
func TestHCLogAdapter(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	hl := newHCLog(zap.New(core).Named("raft"), hclog.Warn)
	hl.Info("entering follower state", "follower", "x") // under the level
	hl.Warn("failed to contact", "server-id", "rabbit2@h", "time", 3*time.Second, "error", errors.New("refused"))
	groupLog(hl, "g1", "'q' in vhost '/'").Error("failed to appendEntries to", "peer", hclog.Fmt("%s@%s", "rabbit3", "h"))
	hl.Named("raft-net").Warn("odd", "dangling")
	got := logs.AllUntimed()
	if len(got) != 3 {
		t.Fatalf("%d entries: %v", len(got), got)
	}
	w := got[0]
	if w.Message != "failed to contact" || w.Level != zapcore.WarnLevel || w.LoggerName != "raft" {
		t.Errorf("entry %+v", w)
	}
	f := w.ContextMap()
	if f["raft_group"] != "meta" || f["server_id"] != "rabbit2@h" || f["time"] != "3s" && f["time"] != 3*time.Second || f["error"] != "refused" {
		t.Errorf("fields %v", f)
	}
	g := got[1].ContextMap()
	if got[1].Level != zapcore.ErrorLevel || g["raft_group"] != "g1" || g["queue"] != "'q' in vhost '/'" || g["peer"] != "rabbit3@h" {
		t.Errorf("group entry %v %v", got[1].Level, g)
	}
	if n := got[2].ContextMap(); n["raft_part"] != "raft-net" || n["extra_value"] != "dangling" {
		t.Errorf("named entry %v", n)
	}
	if hl.IsInfo() || !hl.IsWarn() {
		t.Error("levels")
	}
}
