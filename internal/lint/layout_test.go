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
// library is always allowed.
var allowed = map[string][]string{
	"amqp":     {},
	"exchange": {"amqp"},
	"queue":    {"amqp", "go.uber.org/zap"},
	"persist":  {"github.com/dgraph-io/badger/v4", "go.uber.org/zap"},
	"vhost":    {"amqp", "exchange", "queue", "persist", "go.uber.org/zap"},
	"channel":  {"amqp", "exchange", "queue", "vhost", "go.uber.org/zap"},
	"broker":   {"amqp", "exchange", "queue", "vhost", "persist", "channel", "go.uber.org/zap"},
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
			continue // cmd/*, internal/*, conformance: anything
		}
		for _, imp := range fields[1:] {
			if !strings.Contains(strings.Split(imp, "/")[0], ".") {
				continue // standard library
			}
			name := strings.TrimPrefix(imp, mod)
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
