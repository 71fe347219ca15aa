package mgmt

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/broker"
)

// Options configure the management API.
type Options struct {
	// StatsInterval is how often queues' message counts are sampled into
	// the rates (RabbitMQ's collect_statistics_interval; 0: 5 s).
	StatsInterval time.Duration
	// FailedLoginDelay is how long a failed login's 401 is held and
	// counted against its source (loginlimit.go; 0: 3 s, as AMQP;
	// negative: off).
	FailedLoginDelay time.Duration
	// MaxBodySize caps a request's body, in bytes (RabbitMQ's
	// management.http_max_body_size; 0: DefaultMaxBodySize).
	MaxBodySize int64
}

// API is the management API of one broker: its handler, and the rates
// sampler that runs from New until Close.
type API struct {
	srv  *broker.Server
	log  *zap.Logger
	opts Options
	h    http.Handler

	logins  loginLimiter  // failed logins (loginlimit.go)
	qstats  queueStats    // message rates (mgmtstats.go)
	stop    chan struct{} // closed by Close: stops the sampler
	sampled chan struct{} // closed when the sampler has exited
	once    sync.Once
}

// New makes srv's management API and starts its rates sampler, which
// runs until Close (or until srv shuts down).
func New(srv *broker.Server, opts Options) *API {
	if opts.StatsInterval <= 0 {
		opts.StatsInterval = defaultStatsInterval
	}
	if opts.FailedLoginDelay == 0 {
		opts.FailedLoginDelay = defaultFailedLoginDelay
	}
	if opts.MaxBodySize <= 0 {
		opts.MaxBodySize = DefaultMaxBodySize
	}
	a := &API{srv: srv, log: srv.Logger(), opts: opts, stop: make(chan struct{}), sampled: make(chan struct{})}
	a.logins.delay = opts.FailedLoginDelay
	routes := a.accessRouter(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { notFound(w) }))
	a.h = withConsole(sameOrigin(a.withUser(a.withAudit(jsonBodies(opts.MaxBodySize, routes))))) // guard.go, audit.go
	go a.sampler()
	return a
}

// Handler serves the subset of RabbitMQ's management HTTP API that
// clients, their test suites and operators' tools use (the routes:
// accessRouter), and the web console at / (console.go). API requests
// authenticate with HTTP basic auth against the broker's users.
func (a *API) Handler() http.Handler { return a.h }

// Close stops the rates sampler and waits for it. The handler still
// answers, with the rates of the last sample.
func (a *API) Close() {
	a.once.Do(func() { close(a.stop) })
	<-a.sampled
}

// writeJSON answers v as JSON; a value that cannot be encoded is a 500
// with the reason, never a 200 with an empty body.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// writeJSONBody writes v after the status line was written (the encoding
// cannot fail: v is made of strings, numbers and lists).
func writeJSONBody(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	_, _ = w.Write(append(b, '\n'))
}

// visibleConns are the open connections u may see: all for monitoring
// users and administrators, else u's own (RabbitMQ: others' connections
// are not shown).
func (a *API) visibleConns(r *http.Request) []broker.Connection {
	u := apiUser(r)
	var out []broker.Connection
	for _, c := range a.srv.Connections() {
		if seesAll(u) || c.User == u.Name {
			out = append(out, c)
		}
	}
	return out
}

func (a *API) apiConnections(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, c := range a.visibleConns(r) {
		out = append(out, a.connView(c))
	}
	writeList(w, r, out)
}

func (a *API) apiCloseConnection(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name") // unescaped by the router
	reason := r.Header.Get("X-Reason")
	if reason == "" {
		reason = "Closed via management plugin"
	}
	u := apiUser(r)
	for _, c := range a.srv.Connections() {
		if c.Name == name && !u.HasTag("administrator") && c.User != u.Name {
			notAuthorised(w, reasonObject) // RabbitMQ 3.10.8's answer, to monitoring users too
			return
		}
		if c.Name == name {
			a.log.Info("closing connection via management API", zap.String("connection", name))
			a.srv.CloseConnection(c.ID, reason)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	http.Error(w, `{"error":"Object Not Found","reason":"Not Found"}`, http.StatusNotFound)
}
