package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// commit is the source revision, set with -ldflags "-X main.commit=...";
// otherwise the vcs.revision go build records from a git checkout.
var commit = ""

// printVersion is railmq --version: the version, then the Go version and
// the commit it was built from (with "+modified" when the checkout had
// changes), on one line.
func printVersion(w io.Writer) {
	rev, modified := commit, false
	if info, ok := debug.ReadBuildInfo(); ok && rev == "" {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	fmt.Fprintf(w, "railmq %s (%s", version, runtime.Version())
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if modified {
			rev += "+modified"
		}
		fmt.Fprintf(w, ", commit %s", rev)
	}
	fmt.Fprintln(w, ")")
}
