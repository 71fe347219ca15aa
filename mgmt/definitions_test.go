package mgmt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/railmq/railmq/broker"
)

// TestImportLogsProgress: a long import says how far it has got.
func TestImportLogsProgress(t *testing.T) {
	defer func(n int) { importProgressEvery = n }(importProgressEvery)
	importProgressEvery = 10
	core, logs := observer.New(zapcore.InfoLevel)
	s, err := broker.New(broker.Options{DataDir: t.TempDir(), Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown(context.Background()) }()
	var qs, bs []string
	for i := 0; i < 25; i++ {
		qs = append(qs, fmt.Sprintf(`{"name": "q%d", "vhost": "/", "durable": false, "auto_delete": false, "arguments": {}}`, i))
		bs = append(bs, fmt.Sprintf(`{"source": "amq.direct", "vhost": "/", "destination": "q%d", "destination_type": "queue", "routing_key": "k", "arguments": {}}`, i))
	}
	path := filepath.Join(t.TempDir(), "defs.json")
	if err := os.WriteFile(path, []byte(`{"queues": [`+strings.Join(qs, ",")+`], "bindings": [`+strings.Join(bs, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := LoadDefinitions(s, path); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range logs.FilterMessageSnippet("importing definitions").All() {
		c := e.ContextMap()
		got = append(got, fmt.Sprintf("%s %v/%v %v/%v", e.Message, c["queues_so_far"], c["queues"], c["bindings_so_far"], c["bindings"]))
	}
	want := []string{"importing definitions: queues 10/25 <nil>/<nil>", "importing definitions: queues 20/25 <nil>/<nil>",
		"importing definitions: bindings <nil>/<nil> 10/25", "importing definitions: bindings <nil>/<nil> 20/25"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("progress lines:\n%q\nwant\n%q", got, want)
	}
}
