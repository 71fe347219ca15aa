package lint

import (
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestReadmeLayout fails when README.md's layout table and the module's
// packages (go list ./...) differ: every package is in the table, and
// every row names a package.
func TestReadmeLayout(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(readme)
	i := strings.Index(sec, "\n## Layout")
	if i < 0 {
		t.Fatal("README.md has no ## Layout section")
	}
	sec = sec[i+1:]
	if j := strings.Index(sec[1:], "\n## "); j >= 0 {
		sec = sec[:j+1]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9/_-]+?)/?` \\|")
	inTable := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		inTable[m[1]] = true
	}
	out, err := exec.Command("go", "list", mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		pkgs[strings.TrimPrefix(p, mod)] = true
	}
	var missing, extra []string
	for p := range pkgs {
		if !inTable[p] {
			missing = append(missing, p)
		}
	}
	for p := range inTable {
		if !pkgs[p] {
			extra = append(extra, p)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("README.md's layout table lacks %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("README.md's layout table names %v, which go list does not", extra)
	}
}
