// Package lint holds repository-wide checks.
package lint

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/railmq/railmq/"

// allowed lists, per package, the module packages and third-party modules
// it may import (the direction of imports in STYLE.md). The standard
// library is allowed, except what banned says.
var allowed = map[string][]string{
	"amqp":     {},
	"auth":     {"amqp"},
	"exchange": {"amqp"},
	"queue":    {"amqp", "go.uber.org/zap"},
	"persist":  {"crypt", "github.com/dgraph-io/badger/v4", "go.uber.org/zap"},
	"vhost":    {"amqp", "auth", "exchange", "queue", "persist", "go.uber.org/zap"},
	"channel":  {"amqp", "auth", "exchange", "queue", "vhost", "go.uber.org/zap"},
	"stream":   {"go.uber.org/zap"},
	"cluster":  {"crypt", "github.com/hashicorp/raft", "github.com/hashicorp/go-hclog", "github.com/dgraph-io/badger/v4", "go.uber.org/zap"},
	// Encryption at rest: keys, Badger's encryption, AES-GCM formats.
	"crypt": {"github.com/dgraph-io/badger/v4"},
	// Never broker (or channel): the node imports it.
	"replica": {"amqp", "queue", "vhost", "cluster", "stream", "go.uber.org/zap"},
	"broker":  {"amqp", "auth", "exchange", "queue", "vhost", "persist", "channel", "cluster", "replica", "stream", "shovel", "federation", "crypt", "go.uber.org/zap"},
	// Above broker: the management plane and the metrics, never channel
	// (what a channel holds comes through broker's admin API).
	"mgmt":    {"amqp", "auth", "exchange", "queue", "vhost", "persist", "broker", "cluster", "replica", "go.uber.org/zap"},
	"metrics": {"broker", "vhost", "queue", "replica", "github.com/prometheus/client_golang", "go.uber.org/zap"},
	// The shovel engine: an AMQP client, knowing nothing of the broker
	// (the broker gives it a Dialer for local URIs).
	"shovel": {"amqp", "github.com/rabbitmq/amqp091-go", "go.uber.org/zap"},
	// The federation engine: an AMQP client too (shovel's URI parsing);
	// the broker implements its Publisher, Bindings and Demand.
	"federation": {"shovel", "github.com/rabbitmq/amqp091-go", "go.uber.org/zap"},
	// Test helper for the package tests of broker/, channel/, vhost/:
	// standard library only, or it would make a cycle.
	"internal/poll": {},
}

// banned lists, per package, what it must never import, the standard
// library included (STYLE.md): the broker is the AMQP node and knows
// neither HTTP nor Prometheus; the management plane and the metrics see
// channels only through broker's admin API.
var banned = map[string][]string{
	"broker":  {"net/http", "github.com/prometheus/client_golang"},
	"mgmt":    {"channel"},
	"metrics": {"channel"},
}

// free lists the packages that may import anything: the commands, test
// helpers and black-box tests (STYLE.md: cmd/*, internal/*, conformance).
// Every other package must be in allowed.
var free = map[string]bool{
	"cmd/railmq":         true,
	"cmd/railmq-perf":    true,
	"cmd/railmqctl":      true,
	"conformance":        true,
	"conformance/cgroup": true,
	"deploy":             true,
	"internal/lint":      true,
	"internal/testutil":  true,
}

func TestLayout(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		rules, ok := allowed[pkg]
		if !ok {
			if !free[pkg] {
				t.Errorf("%s is not in layout_test.go: add it to allowed with the module packages and modules it may import "+
					"(STYLE.md, direction of imports: arrows point down only), or to free if it is a command or test helper", pkg)
			}
			continue
		}
		for _, imp := range fields[1:] {
			name := strings.TrimPrefix(imp, mod)
			if permitted(banned[pkg], name) {
				t.Errorf("%s imports %s, which STYLE.md forbids", pkg, imp)
				continue
			}
			if !strings.Contains(strings.Split(imp, "/")[0], ".") {
				continue // standard library
			}
			if !permitted(rules, name) {
				t.Errorf("%s imports %s, which STYLE.md forbids", pkg, imp)
			}
		}
	}
}

func permitted(rules []string, imp string) bool {
	for _, r := range rules {
		if imp == r || strings.HasPrefix(imp, r+"/") {
			return true
		}
	}
	return false
}
