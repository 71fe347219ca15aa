package mgmt

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// The web console: static files embedded in the binary (nothing is
// fetched at run time), served by the management listener at / and
// /console/. The page logs in with the broker's users and polls the
// management API, like any other client of it.

//go:embed console
var consoleFiles embed.FS

var consoleFS = func() http.Handler {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	return http.FileServer(http.FS(sub))
}()

// withConsole serves the console's files and sends everything else
// (the API) to api.
func withConsole(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			switch p := r.URL.Path; {
			case p == "/":
				w.Header().Set("Cache-Control", "no-cache")
				consoleFS.ServeHTTP(w, r)
				return
			case strings.HasPrefix(p, "/console/"):
				w.Header().Set("Cache-Control", "no-cache")
				http.StripPrefix("/console", consoleFS).ServeHTTP(w, r)
				return
			}
		}
		api.ServeHTTP(w, r)
	})
}

// Startup serves the management listener while the broker starts: the
// console, and for the API a 503 that says how far recovery has got
// ("recovering 120 of 400 queues"), which the console shows instead of an
// error. Ready hands the listener over to the API's handler. Its
// Progress is broker.Options.RecoveryProgress.
type Startup struct {
	mu                    sync.Mutex // guards the progress fields
	vhost                 string
	done, total, messages int
	vhostsDone            int
	ready                 atomic.Pointer[http.Handler]
	console               http.Handler
}

// NewStartup returns a Startup serving the console until Ready.
func NewStartup() *Startup {
	st := &Startup{}
	st.console = withConsole(http.HandlerFunc(st.recovering))
	return st
}

// Progress records recovery's progress: vhost's queues done of total, and
// the messages found so far in it.
func (st *Startup) Progress(vhost string, done, total, messages int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if vhost != st.vhost && st.vhost != "" {
		st.vhostsDone++
	}
	st.vhost, st.done, st.total, st.messages = vhost, done, total, messages
}

// Ready makes h serve everything from now on.
func (st *Startup) Ready(h http.Handler) { st.ready.Store(&h) }

func (st *Startup) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := st.ready.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	st.console.ServeHTTP(w, r)
}

func (st *Startup) recovering(w http.ResponseWriter, _ *http.Request) {
	st.mu.Lock()
	reason := "starting: opening the store"
	if st.total > 0 {
		reason = fmt.Sprintf("recovering %d of %d queues in vhost '%s' (%d messages so far)", st.done, st.total, st.vhost, st.messages)
	}
	rec := map[string]any{"vhost": st.vhost, "queues_done": st.done, "queues": st.total, "messages": st.messages, "vhosts_done": st.vhostsDone}
	st.mu.Unlock()
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	writeJSONBody(w, map[string]any{"error": "recovering", "reason": reason, "recovery": rec})
}
