package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLocksListed fails on a mutex that LOCKS.md does not name: every
// sync.Mutex or sync.RWMutex field of a struct in the module's non-test
// code must appear there as `pkg.Type.field` (STYLE.md: any mutex is
// listed in LOCKS.md with its order). A command's package is named by its
// folder (railmq-perf.runner.errMu).
func TestLocksListed(t *testing.T) {
	root := "../.."
	doc, err := os.ReadFile(filepath.Join(root, "LOCKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	fs := token.NewFileSet()
	n := 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "data") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fs, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" && strings.Contains(p, "gen.go") {
			return nil // a generator, not the broker
		}
		pkg := f.Name.Name
		if pkg == "main" {
			pkg = filepath.Base(filepath.Dir(p))
		}
		ast.Inspect(f, func(node ast.Node) bool {
			ts, ok := node.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fld := range st.Fields.List {
				sel, ok := fld.Type.(*ast.SelectorExpr)
				if !ok {
					continue
				}
				if x, _ := sel.X.(*ast.Ident); x == nil || x.Name != "sync" || (sel.Sel.Name != "Mutex" && sel.Sel.Name != "RWMutex") {
					continue
				}
				names := []string{sel.Sel.Name} // embedded: named by its type
				if len(fld.Names) > 0 {
					names = names[:0]
					for _, nm := range fld.Names {
						names = append(names, nm.Name)
					}
				}
				for _, nm := range names {
					n++
					full := pkg + "." + ts.Name.Name + "." + nm
					if !strings.Contains(string(doc), "`"+full+"`") {
						rel, _ := filepath.Rel(root, p)
						t.Errorf("%s: mutex %s is not in LOCKS.md: list it (as `%s`) with its order", rel, full, full)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("found no mutex: the walk is broken")
	}
}
