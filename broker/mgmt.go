package broker

import (
	"encoding/json"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
)

// connInfo is what the management API shows of an open connection; set
// once the handshake is done.
type connInfo struct {
	Name             string     `json:"name"`
	User             string     `json:"user"`
	VHost            string     `json:"vhost"`
	PeerHost         string     `json:"peer_host"`
	PeerPort         int        `json:"peer_port"`
	ConnectedAt      int64      `json:"connected_at"`
	ClientProperties amqp.Table `json:"-"` // the decoded table itself: converted when shown (connJSON)
	State            string     `json:"state"`
	Node             string     `json:"node"`
	Protocol         string     `json:"protocol"`
	Type             string     `json:"type"`
}

// connJSON is a connection as the API shows it: client_properties made
// JSON-safe (jsonTable) when shown, not held twice per connection.
type connJSON struct {
	connInfo
	ClientProperties map[string]any `json:"client_properties"`
}

func (ci connInfo) view() connJSON { return connJSON{ci, jsonTable(ci.ClientProperties)} }

// connectionName is RabbitMQ's name for a connection: "peer -> local".
func connectionName(nc net.Conn) string {
	return nc.RemoteAddr().String() + " -> " + nc.LocalAddr().String()
}

// ManagementHandler serves the subset of RabbitMQ's management HTTP API
// that clients, their test suites and operators' tools use (the routes:
// accessRouter), and the web console at / (console.go). API requests
// authenticate with HTTP basic auth against the broker's users.
func (s *Server) ManagementHandler() http.Handler {
	return withConsole(s.withUser(s.accessRouter(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { notFound(w) }))))
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

func (s *Server) openConns() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		if c.info.Load() != nil {
			cs = append(cs, c)
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].id < cs[j].id })
	return cs
}

func (s *Server) apiConnections(w http.ResponseWriter, r *http.Request) {
	out := []connJSON{}
	u := apiUser(r)
	for _, c := range s.openConns() {
		ci := *c.info.Load()
		if !seesAll(u) && ci.User != u.Name {
			continue // RabbitMQ: others' connections are not shown
		}
		ci.State = s.connState(c)
		out = append(out, ci.view())
	}
	writeList(w, r, asMaps(out))
}

// connState is a connection's state as RabbitMQ's management API shows
// it: "blocked" while an alarm keeps it from being read (it published
// during the alarm), "blocking" while an alarm is on and it has not
// published since (it will be blocked if it does), "flow" within a second
// of flow control holding it back (waitFlow), else "running".
func (s *Server) connState(c *conn) string {
	switch {
	case c.blocked.Load():
		return "blocked"
	case s.alarms.Load() != 0:
		return "blocking"
	case c.inFlow(time.Now()):
		return "flow"
	}
	return "running"
}

func (s *Server) apiCloseConnection(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name") // unescaped by the router
	reason := r.Header.Get("X-Reason")
	if reason == "" {
		reason = "Closed via management plugin"
	}
	u := apiUser(r)
	for _, c := range s.openConns() {
		if ci := c.info.Load(); ci.Name == name && (u.HasTag("administrator") || ci.User == u.Name) {
			s.log.Info("closing connection via management API", zap.String("connection", name))
			c.closeWith(&amqp.Error{Code: amqp.ConnectionForced, Text: "CONNECTION_FORCED - " + reason}, "closed via management API")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	http.Error(w, `{"error":"Object Not Found","reason":"Not Found"}`, http.StatusNotFound)
}

// peer splits a connection's remote address.
func peer(nc net.Conn) (string, int) {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String(), a.Port
	}
	return strings.Split(nc.RemoteAddr().String(), ":")[0], 0
}
