package mgmt

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// Messages through the API: POST /api/exchanges/{vhost}/{name}/publish
// and POST /api/queues/{vhost}/{name}/get.

// propsFromJSON builds a message's properties from the API's
// "properties" object (RabbitMQ's names).
func propsFromJSON(m map[string]any) amqp.Properties {
	var p amqp.Properties
	sv := func(k string, flag uint16, dst *string) {
		if s, ok := m[k].(string); ok {
			*dst = s
			p.Flags |= flag
		}
	}
	sv("content_type", amqp.FlagContentType, &p.ContentType)
	sv("content_encoding", amqp.FlagContentEncoding, &p.ContentEncoding)
	sv("correlation_id", amqp.FlagCorrelationID, &p.CorrelationID)
	sv("reply_to", amqp.FlagReplyTo, &p.ReplyTo)
	sv("expiration", amqp.FlagExpiration, &p.Expiration)
	sv("message_id", amqp.FlagMessageID, &p.MessageID)
	sv("type", amqp.FlagType, &p.Type)
	sv("user_id", amqp.FlagUserID, &p.UserID)
	sv("app_id", amqp.FlagAppID, &p.AppID)
	if h, ok := m["headers"].(map[string]any); ok && len(h) > 0 {
		p.Headers = tableArg(map[string]any{"arguments": h})
		p.Flags |= amqp.FlagHeaders
	}
	if d, ok := m["delivery_mode"].(float64); ok {
		p.DeliveryMode = uint8(d)
		p.Flags |= amqp.FlagDeliveryMode
	}
	if d, ok := m["priority"].(float64); ok {
		p.Priority = uint8(d)
		p.Flags |= amqp.FlagPriority
	}
	if d, ok := m["timestamp"].(float64); ok {
		p.Timestamp = time.Unix(int64(d), 0)
		p.Flags |= amqp.FlagTimestamp
	}
	return p
}

// propsJSON is a message's properties as the API shows them: the present
// ones only.
func propsJSON(raw []byte) map[string]any {
	out := map[string]any{}
	p, err := amqp.DecodeProperties(raw)
	if err != nil {
		return out
	}
	set := func(flag uint16, k string, v any) {
		if p.Flags&flag != 0 {
			out[k] = v
		}
	}
	set(amqp.FlagContentType, "content_type", p.ContentType)
	set(amqp.FlagContentEncoding, "content_encoding", p.ContentEncoding)
	set(amqp.FlagHeaders, "headers", jsonTable(p.Headers))
	set(amqp.FlagDeliveryMode, "delivery_mode", p.DeliveryMode)
	set(amqp.FlagPriority, "priority", p.Priority)
	set(amqp.FlagCorrelationID, "correlation_id", p.CorrelationID)
	set(amqp.FlagReplyTo, "reply_to", p.ReplyTo)
	set(amqp.FlagExpiration, "expiration", p.Expiration)
	set(amqp.FlagMessageID, "message_id", p.MessageID)
	set(amqp.FlagTimestamp, "timestamp", p.Timestamp.Unix())
	set(amqp.FlagType, "type", p.Type)
	set(amqp.FlagUserID, "user_id", p.UserID)
	set(amqp.FlagAppID, "app_id", p.AppID)
	return out
}

// apiPublish is POST /api/exchanges/{vh}/{x}/publish: it routes the
// message, waits until it is confirmed where it is to be stored, and
// answers whether it was routed. "amq.default" is the default exchange.
func (a *API) apiPublish(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "routing_key", "properties", "payload", "payload_encoding") {
		return
	}
	x := r.PathValue("exchange")
	if x == "amq.default" {
		x = ""
	}
	g := a.srv.Access().Grant(st.Name(), apiUser(r).Name)
	if err := g.Check(auth.Write, "exchange", x); err != nil {
		amqpToHTTP(w, err)
		return
	}
	key, _ := str(body, "routing_key")
	// As a channel's publish (RabbitMQ 3.10.8 answers both so over HTTP):
	// the routing key's topic permission, then the user_id property.
	if err := topicAllowed(st, g, auth.Write, x, key); err != nil {
		withCode(w, err)
		return
	}
	payload, _ := str(body, "payload")
	data := []byte(payload)
	if enc, _ := str(body, "payload_encoding"); enc == "base64" {
		b, err := base64.StdEncoding.DecodeString(payload)
		if err != nil {
			badRequest(w, "payload is not base64")
			return
		}
		data = b
	}
	pm, _ := body["properties"].(map[string]any)
	props := propsFromJSON(pm)
	if u := apiUser(r); props.Flags&amqp.FlagUserID != 0 && props.UserID != u.Name && !u.HasTag("impersonator") {
		withCode(w, amqp.Errorf(amqp.PreconditionFailed, "user_id property set to '%s' but authenticated user was '%s'", props.UserID, u.Name))
		return
	}
	msg := &queue.Message{Exchange: x, RoutingKey: key, Props: props.Append(nil), Body: data,
		Persistent: props.DeliveryMode == 2, Priority: props.Priority, Enqueued: queue.Now()}
	if props.Flags&amqp.FlagExpiration != 0 {
		if ms, err := strconv.ParseInt(props.Expiration, 10, 64); err == nil && ms >= 0 {
			msg.Expires = msg.Enqueued + ms*int64(time.Millisecond)
		}
	}
	sc := vhost.Scratch{Props: msg.Props}
	if pv, err := amqp.ScanProperties(msg.Props); err == nil {
		sc.RawHeaders = pv.Headers
	}
	qs, err := st.Route(x, key, &sc)
	if err != nil {
		withCode(w, err) // RabbitMQ answers 400 with the AMQP error, code and all
		return
	}
	// A delayed exchange on the way holds the message back (its x-delay
	// header), as a channel's publish: answered once it is stored when
	// that must be durable, and not routed now, as the plugin's route.
	nd := 0
	for _, dx := range sc.Delayed {
		if st.DelayWaits(dx, msg) {
			nd++
		}
	}
	held := *msg // copied before FanOut marks msg for the queues' writes
	var conf *waitConf
	routed, waited := vhost.FanOut(st.Store(), msg, qs, false, func(n int) queue.Confirmer {
		conf = &waitConf{n: n + nd, done: make(chan struct{})}
		return conf
	}, nil)
	if nd > 0 && !waited {
		conf, waited = &waitConf{n: nd, done: make(chan struct{})}, true
	}
	for _, dx := range sc.Delayed {
		var c queue.Confirmer
		if conf != nil {
			c = conf
		}
		st.Delay(dx, &held, nil, sc.Delay, c)
	}
	if waited {
		select {
		case <-conf.done:
		case <-r.Context().Done():
			return
		}
		if conf.err != nil {
			apiError(w, http.StatusInternalServerError, "internal_error", conf.err.Error())
			return
		}
	}
	writeJSON(w, map[string]bool{"routed": routed})
}

// messageJSON is a got message as the API shows it: its payload
// (truncated to truncate bytes unless negative) as a string, or base64
// when enc asks or it is not UTF-8.
func messageJSON(d queue.Delivery, remaining int, enc string, truncate int) map[string]any {
	payload := d.Msg.Body
	if truncate >= 0 && len(payload) > truncate {
		payload = payload[:truncate]
	}
	var props any = propsJSON(d.Msg.Props)
	if len(props.(map[string]any)) == 0 {
		props = []any{} // RabbitMQ's empty property list
	}
	m := map[string]any{"payload_bytes": len(d.Msg.Body), "redelivered": d.Redelivered, "exchange": d.Msg.Exchange,
		"routing_key": d.Msg.RoutingKey, "message_count": remaining, "properties": props}
	if enc == "base64" || !utf8.Valid(payload) {
		m["payload"], m["payload_encoding"] = base64.StdEncoding.EncodeToString(payload), "base64"
	} else {
		m["payload"], m["payload_encoding"] = string(payload), "string"
	}
	return m
}

// apiGet is POST /api/queues/{vh}/{q}/get: up to count messages, then
// acked, requeued or rejected as ackmode says.
func (a *API) apiGet(w http.ResponseWriter, r *http.Request) {
	if st := a.srv.LookupVHost(r.PathValue("vhost")); st != nil && a.vhostAccess(apiUser(r), st.Name()) {
		if _, err := st.Queue(0, r.PathValue("queue")); err != nil {
			var e *amqp.Error
			if errors.As(err, &e) && e.Code == amqp.NotFound {
				apiError(w, http.StatusNotFound, "not_found", e.Text) // as RabbitMQ: the AMQP text
				return
			}
		}
	}
	st, q, ok := a.findQueue(w, r)
	if !ok {
		return
	}
	body, ok := readBody(w, r)
	if !ok || keysMissing(w, body, "count", "ackmode", "encoding") {
		return
	}
	if err := a.srv.Access().Grant(st.Name(), apiUser(r).Name).Check(auth.Read, "queue", q.Name()); err != nil {
		amqpToHTTP(w, err)
		return
	}
	if exclusiveRefused(w, st, q, true /* code */) {
		return
	}
	mode, _ := str(body, "ackmode")
	switch mode {
	case "ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false":
	default:
		badRequest(w, "Unknown ackmode: "+mode)
		return
	}
	count, _ := intArg(body["count"]) // rabbitmqadmin sends "1"
	enc, _ := str(body, "encoding")
	truncate := -1
	if t, ok := intArg(body["truncate"]); ok {
		truncate = t
	}
	out := []map[string]any{}
	var ds []queue.Delivery
	for i := 0; i < count; i++ {
		d, ok, remaining, err := q.Get(false)
		if err != nil || !ok {
			break
		}
		ds = append(ds, d)
		out = append(out, messageJSON(d, remaining, enc, truncate))
	}
	if len(ds) > 0 {
		switch mode {
		case "ack_requeue_false":
			q.Ack(ds, nil)
		case "reject_requeue_false":
			q.Discard(ds, nil)
		default:
			q.Requeue(ds, nil)
		}
	}
	writeJSON(w, out)
}
