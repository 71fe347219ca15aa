package mgmt

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// The management API's exchanges, queues and bindings: RabbitMQ's paths,
// JSON fields and status codes. Declares and deletes go through the
// registry with the API user's grant, as RabbitMQ checks the API user's
// permissions.

// objectVHost finds the path's vhost for a user allowed in it, answering
// 404 (missing) or 401 (no access) as RabbitMQ.
func (a *API) objectVHost(w http.ResponseWriter, r *http.Request) (*broker.VHostInfo, bool) {
	name := r.PathValue("vhost")
	if !a.vhostAccess(apiUser(r), name) {
		notAuthorised(w, reasonVHost)
		return nil, false
	}
	st := a.srv.LookupVHost(name)
	if st == nil {
		notFound(w)
		return nil, false
	}
	return st, true
}

// amqpToHTTP answers a registry error as RabbitMQ's management API does:
// 404 for a missing object, 400 with the reason otherwise (the AMQP text
// after its code name).
func amqpToHTTP(w http.ResponseWriter, err error) {
	var e *amqp.Error
	if !errors.As(err, &e) {
		internalError(w, err)
		return
	}
	reason := e.Text
	if i := strings.Index(reason, " - "); i >= 0 {
		reason = reason[i+3:]
	}
	switch e.Code {
	case amqp.NotFound:
		apiError(w, http.StatusNotFound, "not_found", reason)
	case amqp.AccessRefused:
		apiError(w, http.StatusUnauthorized, "not_authorised", "Access refused.") // RabbitMQ's words
	default:
		badRequest(w, reason)
	}
}

// intArg reads a whole number given as a JSON number or a string of
// digits (as rabbitmqadmin sends them).
func intArg(v any) (int, bool) {
	switch x := v.(type) {
	case float64:
		return int(x), x == float64(int(x))
	case string:
		n, err := strconv.Atoi(x)
		return n, err == nil
	}
	return 0, false
}

// boolArg reads a boolean given as JSON or as "true"/"false" (as
// rabbitmqadmin sends them).
func boolArg(m map[string]any, k string, def bool) bool {
	switch x := m[k].(type) {
	case bool:
		return x
	case string:
		if b, err := strconv.ParseBool(x); err == nil {
			return b
		}
	}
	return def
}

// tableArg converts JSON arguments to an AMQP table: numbers become
// long longs when whole (RabbitMQ reads JSON integers so), floats
// otherwise.
func tableArg(m map[string]any) amqp.Table {
	args, _ := m["arguments"].(map[string]any)
	if len(args) == 0 {
		return nil
	}
	t := amqp.Table{}
	for k, v := range args {
		t[k] = jsonToAMQP(v)
	}
	return t
}

func jsonToAMQP(v any) any {
	switch x := v.(type) {
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
		return x
	case map[string]any:
		t := amqp.Table{}
		for k, e := range x {
			t[k] = jsonToAMQP(e)
		}
		return t
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonToAMQP(e)
		}
		return out
	}
	return v
}

// jsonTable renders an AMQP table for the API ({} when empty).
func jsonTable(t amqp.Table) map[string]any {
	out := map[string]any{}
	for k, v := range t {
		out[k] = jsonValue(v)
	}
	return out
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		return jsonTable(x)
	case []byte:
		return string(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case time.Time:
		return x.Unix()
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil // JSON has no NaN or infinity
		}
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil
		}
	}
	return v
}

// --- exchanges -----------------------------------------------------------

func exchangeJSON(vh string, x *exchange.Exchange) map[string]any {
	m := map[string]any{"name": x.Name, "vhost": vh, "type": x.Type(), "durable": x.Durable,
		"auto_delete": x.AutoDelete, "internal": x.Internal, "arguments": jsonTable(x.Args),
		"incoming": []any{}, "outgoing": []any{}}
	if x.Delayed {
		// The plugin's exchange type info (rabbit_exchange_type_delayed_message:info/1).
		m["messages_delayed"] = x.MessagesDelayed()
	}
	if x.Dedup != nil {
		m["messages_deduplicated"] = x.Dedup.Dropped.Load() // railmq's own (dedup.go)
	}
	return m
}

// defaultExchangeJSON is the default exchange as RabbitMQ lists it.
func defaultExchangeJSON(vh string) map[string]any {
	return map[string]any{"name": "", "vhost": vh, "type": "direct", "durable": true,
		"auto_delete": false, "internal": false, "arguments": map[string]any{}, "incoming": []any{}, "outgoing": []any{}}
}

func (a *API) vhostsFor(w http.ResponseWriter, r *http.Request) ([]*broker.VHostInfo, bool) {
	if r.PathValue("vhost") == "" {
		var out []*broker.VHostInfo
		for _, st := range a.srv.VHosts() {
			if a.vhostAccess(apiUser(r), st.Name()) {
				out = append(out, st)
			}
		}
		return out, true
	}
	st, ok := a.objectVHost(w, r)
	if !ok {
		return nil, false
	}
	return []*broker.VHostInfo{st}, true
}

func (a *API) apiExchanges(w http.ResponseWriter, r *http.Request) {
	sts, ok := a.vhostsFor(w, r)
	if !ok {
		return
	}
	out := []map[string]any{}
	for _, st := range sts {
		xs := st.Exchanges()
		sort.Slice(xs, func(i, j int) bool { return xs[i].Name < xs[j].Name })
		out = append(out, defaultExchangeJSON(st.Name()))
		for _, x := range xs {
			out = append(out, exchangeJSON(st.Name(), x))
		}
	}
	writeList(w, r, out)
}

func (a *API) apiExchange(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	name := r.PathValue("exchange")
	if name == "amq.default" {
		writeJSON(w, defaultExchangeJSON(st.Name()))
		return
	}
	x := st.Exchange(name)
	if x == nil {
		notFound(w)
		return
	}
	writeJSON(w, exchangeJSON(st.Name(), x))
}

func (a *API) apiPutExchange(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	name := r.PathValue("exchange")
	kind, _ := str(body, "type")
	if kind == "" {
		kind = "direct" // RabbitMQ's default
	}
	if _, known := exchange.ParseKind(kind); !known && kind != exchange.DelayedType {
		badRequest(w, "invalid exchange type '"+kind+"'")
		return
	}
	existed := st.Exchange(name) != nil
	err := st.DeclareExchange(vhost.ExchangeDecl{Name: name, Type: kind, Durable: boolArg(body, "durable", true),
		AutoDelete: boolArg(body, "auto_delete", false), Internal: boolArg(body, "internal", false),
		Args: tableArg(body), Grant: a.srv.Access().Grant(st.Name(), apiUser(r).Name)})
	if err != nil {
		amqpToHTTP(w, err)
		return
	}
	answerPut(w, !existed)
}

func (a *API) apiDeleteExchange(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	name := r.PathValue("exchange")
	if st.Exchange(name) == nil {
		notFound(w)
		return
	}
	if err := a.srv.Access().Grant(st.Name(), apiUser(r).Name).Check(auth.Configure, "exchange", name); err != nil {
		amqpToHTTP(w, err)
		return
	}
	if err := st.DeleteExchange(name, r.URL.Query().Get("if-unused") == "true"); err != nil {
		amqpToHTTP(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// --- queues --------------------------------------------------------------

// queueJSON is q as the API shows it; with members, also each quorum
// queue member's progress, asked of the members (a single queue's GET).
func (a *API) queueJSON(vh string, q *queue.Queue, members bool) map[string]any {
	c := q.Config()
	ready, unacked, held := q.Ready(), q.Unacked(), q.Held()
	// messages_held (railmq's own): held back for a retry delay
	// (x-retry-delay), in the queue's messages but neither ready nor
	// unacknowledged.
	m := map[string]any{"name": c.Name, "vhost": vh, "durable": c.Durable, "auto_delete": c.AutoDelete,
		"exclusive": c.Exclusive, "arguments": jsonTable(c.Args), "node": a.srv.NodeName(), "type": "classic",
		"state": "running", "messages": ready + unacked + held, "messages_ready": ready, "messages_unacknowledged": unacked,
		"messages_held": held,
		"consumers":     q.Consumers(), "exclusive_consumer_tag": nil,
		"messages_details": rate0, "messages_ready_details": rate0, "messages_unacknowledged_details": rate0,
		"message_stats": a.messageStats(q)}
	m["consumer_utilisation"] = a.ConsumerUtilisation(q)
	if n, ok := dedupShown(q); ok {
		m["messages_deduplicated"] = n
	}
	rb, ub := q.Bytes()
	m["message_bytes"], m["message_bytes_ready"], m["message_bytes_unacknowledged"] = rb+ub, rb, ub
	ap := a.vhostPolicy(vh, q)
	m["policy"], m["operator_policy"], m["effective_policy_definition"] = nullIfEmpty(ap.Policy), nullIfEmpty(ap.OperatorPolicy), ap.Effective
	if ap.Effective == nil {
		m["effective_policy_definition"] = map[string]any{}
	}
	if at := q.HeadEnqueuedAt(); at != 0 {
		m["head_message_timestamp"] = at / int64(time.Second)
		m["head_message_timestamp_age_seconds"] = queue.Since(at).Seconds()
	}
	a.srv.DescribeQueue(q, m, members)
	describeStream(m, q, a.srv.NodeName())
	return m
}

var rate0 = map[string]float64{"rate": 0}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (a *API) vhostPolicy(vh string, q *queue.Queue) vhost.AppliedPolicy {
	if st := a.srv.LookupVHost(vh); st != nil {
		return st.AppliedPolicy(q)
	}
	return vhost.AppliedPolicy{}
}

func (a *API) apiVHostQueues(w http.ResponseWriter, r *http.Request) {
	sts, ok := a.vhostsFor(w, r)
	if !ok {
		return
	}
	// Each queue's object is built only if shown, or written without
	// being built (mgmtlist.go, queuejson.go).
	var rows []row
	list := &queueList{a: a, node: a.srv.NodeName()}
	list.age, list.incr, list.samples = historyParams(r)
	for _, st := range sts {
		qs := st.Queues()
		sort.Slice(qs, func(i, j int) bool { return qs[i].Name() < qs[j].Name() })
		rows = slices.Grow(rows, len(qs))
		srcs := make([]queueRow, len(qs))
		for i, q := range qs {
			srcs[i] = queueRow{l: list, st: st, q: q}
			rows = append(rows, row{name: q.Name(), vhost: st.Name(), src: &srcs[i]})
		}
	}
	writeRows(w, r, rows)
}

func (a *API) findQueue(w http.ResponseWriter, r *http.Request) (*broker.VHostInfo, *queue.Queue, bool) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return nil, nil, false
	}
	// A queue just declared through another node is here once this node
	// has applied what the cluster committed before (SyncMiss): RabbitMQ's
	// declares are visible on every node when declare-ok comes.
	for range 2 {
		for _, q := range st.Queues() {
			if q.Name() == r.PathValue("queue") {
				return st, q, true
			}
		}
		if !st.SyncMiss() {
			break
		}
	}
	notFound(w)
	return nil, nil, false
}

func (a *API) apiQueue(w http.ResponseWriter, r *http.Request) {
	st, q, ok := a.findQueue(w, r)
	if !ok {
		return
	}
	m := a.queueJSON(st.Name(), q, true /* members */)
	m["consumer_details"] = a.consumersOf(r, st.Name(), q.Name())
	if age, incr, ok := historyParams(r); ok {
		addSamples(m, a.queueHistory(q, age, incr))
	}
	writeJSON(w, m)
}

func (a *API) apiPutQueue(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	name := r.PathValue("queue")
	existed := false
	for _, q := range st.Queues() {
		existed = existed || q.Name() == name
	}
	_, _, _, err := st.DeclareQueue(vhost.QueueDecl{Name: name, Durable: boolArg(body, "durable", true),
		AutoDelete: boolArg(body, "auto_delete", false), Args: tableArg(body),
		Grant: a.srv.Access().Grant(st.Name(), apiUser(r).Name)}, queue.Config{})
	if err != nil {
		amqpToHTTP(w, err)
		return
	}
	answerPut(w, !existed)
}

func (a *API) apiDeleteQueue(w http.ResponseWriter, r *http.Request) {
	st, q, ok := a.findQueue(w, r)
	if !ok {
		return
	}
	if err := a.srv.Access().Grant(st.Name(), apiUser(r).Name).Check(auth.Configure, "queue", q.Name()); err != nil {
		amqpToHTTP(w, err)
		return
	}
	qs := r.URL.Query()
	// Owner 0: another connection's exclusive queue is refused (400, as
	// RabbitMQ 3.10.8 answers), as every queue the API names.
	if _, err := st.DeleteQueue(0, q.Name(), qs.Get("if-unused") == "true", qs.Get("if-empty") == "true"); err != nil {
		amqpToHTTP(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) apiPurgeQueue(w http.ResponseWriter, r *http.Request) {
	st, q, ok := a.findQueue(w, r)
	if !ok {
		return
	}
	if err := a.srv.Access().Grant(st.Name(), apiUser(r).Name).Check(auth.Read, "queue", q.Name()); err != nil {
		amqpToHTTP(w, err)
		return
	}
	if exclusiveRefused(w, st, q, false) {
		return
	}
	if _, err := q.Purge(); err != nil {
		notFound(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// --- bindings ------------------------------------------------------------

// propsKey is RabbitMQ's properties key of a binding: its routing key
// escaped (~ as %7E), "~" alone for an empty key without arguments, and
// "~" and a digest of the arguments when it has some. Clients treat it
// as opaque (Terraform reads it back from the Location header).
func propsKey(key string, args amqp.Table) string {
	q := strings.ReplaceAll(url.PathEscape(key), "~", "%7E")
	if len(args) == 0 {
		if key == "" {
			return "~"
		}
		return q
	}
	b, _ := json.Marshal(jsonTable(args)) // map keys sorted: stable
	h := sha256.Sum256(b)
	return q + "~" + base64.RawURLEncoding.EncodeToString(h[:6])
}

func bindingJSON(vh, source string, b exchange.Binding) map[string]any {
	dt := "queue"
	if b.Dest.Exchange {
		dt = "exchange"
	}
	return map[string]any{"source": source, "vhost": vh, "destination": b.Dest.Name, "destination_type": dt,
		"routing_key": b.Key, "arguments": jsonTable(b.Args), "properties_key": propsKey(b.Key, b.Args)}
}

// allBindings lists a vhost's bindings as RabbitMQ does: the default
// exchange's implicit one to each queue first, then by source.
func allBindings(st *broker.VHostInfo) []map[string]any {
	out := []map[string]any{}
	qs := st.Queues()
	sort.Slice(qs, func(i, j int) bool { return qs[i].Name() < qs[j].Name() })
	for _, q := range qs {
		out = append(out, bindingJSON(st.Name(), "", exchange.Binding{Dest: exchange.Dest{Name: q.Name()}, Key: q.Name()}))
	}
	xs := st.Exchanges()
	sort.Slice(xs, func(i, j int) bool { return xs[i].Name < xs[j].Name })
	for _, x := range xs {
		for _, b := range x.Bindings() {
			out = append(out, bindingJSON(st.Name(), x.Name, b))
		}
	}
	return out
}

func (a *API) apiBindings(w http.ResponseWriter, r *http.Request) {
	sts, ok := a.vhostsFor(w, r)
	if !ok {
		return
	}
	out := []map[string]any{}
	for _, st := range sts {
		out = append(out, allBindings(st)...)
	}
	writeList(w, r, out)
}

// bindingEnds reads the path's source and destination ({exchange},
// {dest}, and whether the destination is an exchange: the "e" or "q"
// before it).
func bindingEnds(r *http.Request) (source, dest string, toExchange bool) {
	return r.PathValue("exchange"), r.PathValue("dest"), r.PathValue("dtype") == "e"
}

func (a *API) apiBindingsBetween(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	source, dest, toX := bindingEnds(r)
	out := []map[string]any{}
	for _, b := range allBindings(st) {
		if b["source"] == source && b["destination"] == dest && (b["destination_type"] == "exchange") == toX {
			if p := r.PathValue("props"); p == "" || b["properties_key"] == p {
				out = append(out, b)
			}
		}
	}
	if p := r.PathValue("props"); p != "" {
		if len(out) == 0 {
			notFound(w)
			return
		}
		writeJSON(w, out[0])
		return
	}
	writeJSON(w, out)
}

func (a *API) apiPostBinding(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	source, dest, toX := bindingEnds(r)
	key, _ := str(body, "routing_key")
	args := tableArg(body)
	if err := bindingAllowed(st, a.srv.Access().Grant(st.Name(), apiUser(r).Name), source, dest, toX, key); err != nil {
		amqpToHTTP(w, err)
		return
	}
	if err := st.Bind(0, dest, toX, source, key, args); err != nil {
		amqpToHTTP(w, err)
		return
	}
	// RabbitMQ escapes the key once more in the header.
	w.Header().Set("Location", url.PathEscape(dest)+"/"+url.PathEscape(propsKey(key, args)))
	w.WriteHeader(http.StatusCreated)
}

// apiDeleteBinding is DELETE /api/bindings/{vh}/e/{x}/{q|e}/{dest}/{props}:
// checked as an unbind on a channel of the user's (bindingAllowed), as
// RabbitMQ 3.10.8 does (401 "Access refused." without write on the
// destination, read on the source or the key's topic permission).
func (a *API) apiDeleteBinding(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	source, dest, toX := bindingEnds(r)
	x := st.Exchange(source)
	if x == nil {
		notFound(w)
		return
	}
	for _, b := range x.Bindings() {
		if b.Dest.Name == dest && b.Dest.Exchange == toX && propsKey(b.Key, b.Args) == r.PathValue("props") {
			if err := bindingAllowed(st, a.srv.Access().Grant(st.Name(), apiUser(r).Name), source, dest, toX, b.Key); err != nil {
				amqpToHTTP(w, err)
				return
			}
			if err := st.Unbind(0, dest, toX, source, b.Key, b.Args); err != nil {
				amqpToHTTP(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	notFound(w)
}

// bindingAllowed checks a bind or unbind by the API user's grant g in
// RabbitMQ's order (rabbit_channel binding_action): write on the
// destination, read on the source exchange, and read of the routing key
// when a topic permission covers the source.
func bindingAllowed(st *broker.VHostInfo, g *auth.Grant, source, dest string, toX bool, key string) error {
	kind := "queue"
	if toX {
		kind = "exchange"
	}
	if err := g.Check(auth.Write, kind, dest); err != nil {
		return err
	}
	if err := g.Check(auth.Read, "exchange", source); err != nil {
		return err
	}
	return topicAllowed(st, g, auth.Read, source, key)
}

// topicAllowed checks op (Write to publish, Read to bind) of a routing key
// on a topic exchange that a topic permission of g names; other exchanges
// are not checked (RabbitMQ's rule, as channel.allowTopic).
func topicAllowed(st *broker.VHostInfo, g *auth.Grant, op auth.Op, ex, key string) error {
	if !g.TopicChecked(ex) {
		return nil
	}
	if kind, ok := st.ExchangeKind(ex); !ok || kind != exchange.Topic {
		return nil
	}
	return g.CheckTopic(op, ex, key)
}

// withCode answers err as RabbitMQ's publish and get do: 400 with the
// AMQP code and text ("406 PRECONDITION_FAILED - ...").
func withCode(w http.ResponseWriter, err error) {
	var e *amqp.Error
	if errors.As(err, &e) {
		badRequest(w, fmt.Sprintf("%d %s", e.Code, e.Text))
		return
	}
	amqpToHTTP(w, err)
}

// exclusiveRefused answers 400 for another connection's exclusive queue
// (every HTTP request is one: RabbitMQ's API works on a channel of its
// own), with the AMQP text RabbitMQ 3.10.8 answers, the code too when
// code is set (get), and reports whether it did.
func exclusiveRefused(w http.ResponseWriter, st *broker.VHostInfo, q *queue.Queue, code bool) bool {
	if !q.Config().Exclusive {
		return false
	}
	_, err := st.Queue(0, q.Name())
	if err == nil {
		return false
	}
	if code {
		withCode(w, err)
	} else {
		amqpToHTTP(w, err)
	}
	return true
}

// --- publish and get -----------------------------------------------------

// waitConf counts a published message's confirms down.
type waitConf struct {
	mu   sync.Mutex
	n    int
	err  error
	done chan struct{}
}

func (c *waitConf) Done(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil && c.err == nil {
		c.err = err
	}
	if c.n--; c.n == 0 {
		close(c.done)
	}
}

// apiConnection is GET /api/connections/{name}: monitoring users and
// administrators see any, others their own; another user's is a 401, as
// RabbitMQ 3.10.8 answers.
func (a *API) apiConnection(w http.ResponseWriter, r *http.Request) {
	u := apiUser(r)
	for _, c := range a.srv.Connections() {
		if c.Name != r.PathValue("name") {
			continue
		}
		if !seesAll(u) && c.User != u.Name {
			notAuthorised(w, reasonObject)
			return
		}
		writeJSON(w, a.connView(c))
		return
	}
	notFound(w)
}

// apiQueueBindings is GET /api/queues/{vh}/{q}/bindings: the bindings to
// the queue, the default exchange's first.
func (a *API) apiQueueBindings(w http.ResponseWriter, r *http.Request) {
	st, q, ok := a.findQueue(w, r)
	if !ok {
		return
	}
	out := []map[string]any{}
	for _, b := range allBindings(st) {
		if b["destination"] == q.Name() && b["destination_type"] == "queue" {
			out = append(out, b)
		}
	}
	writeList(w, r, out)
}

// apiExchangeBindings is GET /api/exchanges/{vh}/{x}/bindings/source (the
// exchange's own bindings) or .../destination (those to it).
func (a *API) apiExchangeBindings(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	x := r.PathValue("exchange")
	if st.Exchange(x) == nil {
		notFound(w)
		return
	}
	out := []map[string]any{}
	for _, b := range allBindings(st) {
		if r.PathValue("side") == "source" && b["source"] == x ||
			r.PathValue("side") == "destination" && b["destination"] == x && b["destination_type"] == "exchange" {
			out = append(out, b)
		}
	}
	writeList(w, r, out)
}
