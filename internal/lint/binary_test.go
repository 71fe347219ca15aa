package lint

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNoBinaryTracked fails if git tracks a build output: an executable
// (ELF, Mach-O, PE) or any file with a NUL byte in its first 8 KiB that is
// not an image (STYLE.md: no build output is tracked).
func TestNoBinaryTracked(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if strings.HasSuffix(name, ".png") || strings.HasSuffix(name, ".jpg") {
			continue
		}
		f, err := os.Open("../../" + name)
		if err != nil {
			continue // deleted in the work tree
		}
		head := make([]byte, 8192)
		n, _ := f.Read(head)
		f.Close()
		head = head[:n]
		for _, magic := range [][]byte{{0x7f, 'E', 'L', 'F'}, {0xcf, 0xfa, 0xed, 0xfe}, {'M', 'Z'}} {
			if bytes.HasPrefix(head, magic) {
				t.Errorf("%s is an executable: build outputs are not tracked (.gitignore)", name)
			}
		}
		if bytes.IndexByte(head, 0) >= 0 && !strings.HasPrefix(name, "amqp/testdata/") {
			t.Errorf("%s is binary: build outputs and data are not tracked", name)
		}
	}
}
