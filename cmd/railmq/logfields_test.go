package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// JSON lines end with the node's name, after their own fields (children
// loggers' too), once: a line naming a node itself keeps its own.
func TestNodeField(t *testing.T) {
	var buf bytes.Buffer
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey, enc.EncodeTime = "time", zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(&buf), zapcore.InfoLevel), withNode("rabbit@a"))
	log.Info("listening", zap.String("addr", ":5672"))
	log.With(zap.Int("conn", 1)).Named("store").Info("connection opened", zap.String("user", "guest"))
	log.Info("cluster node started", zap.String("node", "rabbit@a"))
	log.With(zap.String("node", "rabbit@b")).Warn("peer down")
	log.Debug("not logged")
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000Z0700", m["time"].(string)); err != nil {
			t.Errorf("time: %v", err)
		}
		_, rest, _ := strings.Cut(l, `"msg":`)
		got = append(got, rest)
	}
	want := []string{
		`"listening","addr":":5672","node":"rabbit@a"}`,
		`"connection opened","conn":1,"user":"guest","node":"rabbit@a"}`,
		`"cluster node started","node":"rabbit@a"}`,
		`"peer down","node":"rabbit@b"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
