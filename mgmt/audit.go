package mgmt

// The audit lines: one info line for every management request that may
// change something (any method but GET, HEAD and OPTIONS), after its
// handler returned, saying who (the user), from where (the remote
// address), what (method, path, the kind of object and the action) and
// how it ended (the status); and one warning for every failed HTTP login,
// worded as RabbitMQ's rabbit_web_dispatch_access_control words it:
//
//	HTTP access denied: user 'guest' - invalid credentials
//
// RabbitMQ has no audit line of its own (its event exchange plugin is the
// nearest); the fields are railmq's, snake_case as every other line's.

import (
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"
)

// auditMsg is the message of every audit line.
const auditMsg = "management change"

// withAudit logs each changing request h answers. It sits inside
// withUser, so the user is known.
func (a *API) withAudit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			h.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		object, action := auditObject(r.Method, r.URL.EscapedPath())
		user := ""
		if u := apiUser(r); u != nil {
			user = u.Name
		}
		a.log.Info(auditMsg, zap.String("user", user), zap.String("remote", r.RemoteAddr),
			zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("object", object),
			zap.String("action", action), zap.Int("status", sw.status))
	})
}

// auditObject names what a request acts on (users, permissions, vhosts,
// policies, queues, shovels...) and how (set, delete, purge, import,
// close, or the POST's own verb: publish, get, redrive...), from its
// method and its escaped path.
func auditObject(method, escaped string) (object, action string) {
	segs := strings.Split(strings.Trim(escaped, "/"), "/")
	for i, s := range segs {
		if u, err := url.PathUnescape(s); err == nil {
			segs[i] = u
		}
	}
	if len(segs) < 2 || segs[0] != "api" {
		return "", strings.ToLower(method)
	}
	object = segs[1]
	switch method {
	case http.MethodPut:
		action = "set"
	case http.MethodDelete:
		action = "delete"
	default:
		action = strings.ToLower(method)
	}
	last := segs[len(segs)-1]
	switch {
	case object == "parameters" && len(segs) > 2:
		object = segs[2] // shovel, federation-upstream...
		if object == "shovel" {
			object = "shovels"
		}
	case object == "queues" && method == http.MethodDelete && last == "contents":
		action = "purge"
	case object == "definitions" && method == http.MethodPost:
		action = "import"
	case object == "connections" && method == http.MethodDelete:
		action = "close"
	case method == http.MethodPost && len(segs) > 3:
		action = last // publish, get, redrive, peek, grow...
	}
	return object, action
}

// auditLoginFailed is the warning for a refused HTTP login.
func (a *API) auditLoginFailed(r *http.Request, user, why string) {
	a.log.Warn("HTTP access denied: user '"+user+"' - "+why, zap.String("user", user),
		zap.String("remote", r.RemoteAddr), zap.String("method", r.Method), zap.String("path", r.URL.Path))
}

// statusWriter records the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes a streaming handler's flushes on (progress lines).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
