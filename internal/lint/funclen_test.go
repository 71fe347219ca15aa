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

// maxFuncLines is the longest a function may be (issue: "no function over
// ~150 lines outside generated code and method switches").
const maxFuncLines = 150

// switches are the functions exempt from maxFuncLines: each is one switch
// over a method or op kind, one short case per kind, which reads best
// whole.
var switches = map[string]bool{
	"channel/channel.go handle": true, // one case per AMQP method
	"queue/apply.go apply":      true, // one case per queue op
}

// TestFunctionLength fails on a function over maxFuncLines lines in the
// module's non-test, non-generated Go files.
func TestFunctionLength(t *testing.T) {
	root := "../.."
	fs := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" || d.Name() == "data") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || strings.HasSuffix(p, "_gen.go") {
			return nil
		}
		f, err := parser.ParseFile(fs, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fs.Position(fd.End()).Line - fs.Position(fd.Pos()).Line + 1
			if n > maxFuncLines && !switches[filepath.ToSlash(rel)+" "+fd.Name.Name] {
				t.Errorf("%s: %s is %d lines (at most %d): split it", rel, fd.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
