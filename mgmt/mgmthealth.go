package mgmt

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// RabbitMQ's health checks (/api/health/checks/...), which Docker and
// Kubernetes probes call: 200 {"status":"ok"}, or 503 with
// {"status":"failed","reason":...} and what failed.

func healthFailed(w http.ResponseWriter, body map[string]any) {
	body["status"] = "failed"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	writeJSONBody(w, body)
}

func (a *API) apiHealthAlarms(w http.ResponseWriter, r *http.Request) {
	if al := a.clusterAlarms(); len(al) > 0 {
		healthFailed(w, map[string]any{"reason": "There are alarms in effect in the cluster", "alarms": al})
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}

func (a *API) apiHealthLocalAlarms(w http.ResponseWriter, r *http.Request) {
	if al := alarmsOf(a.srv.LocalFigures()); len(al) > 0 {
		healthFailed(w, map[string]any{"reason": "There are alarms in effect on the node", "alarms": al})
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}

func (a *API) apiHealthPortListener(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		badRequest(w, "Invalid port: "+r.PathValue("port"))
		return
	}
	ports := a.srv.Status().Listeners
	for _, p := range ports {
		if p == port {
			writeJSON(w, map[string]any{"status": "ok", "port": port})
			return
		}
	}
	if ports == nil {
		ports = []int{}
	}
	healthFailed(w, map[string]any{"reason": "No active listener", "missing": port, "ports": ports})
}

func (a *API) apiHealthProtocolListener(w http.ResponseWriter, r *http.Request) {
	proto := r.PathValue("protocol")
	switch proto {
	case "amqp", "amqp091", "amqp0-9-1":
		if len(a.srv.Status().Listeners) > 0 {
			writeJSON(w, map[string]any{"status": "ok", "protocol": proto})
			return
		}
	}
	healthFailed(w, map[string]any{"reason": "No active listener", "missing": proto, "protocols": []string{"amqp"}})
}

// apiHealthVirtualHosts: every vhost is up while the broker runs (a vhost
// has no processes of its own to fail).
func (a *API) apiHealthVirtualHosts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]string{"status": "ok"})
}

// alivenessQueue is the queue RabbitMQ's aliveness test declares.
const alivenessQueue = "aliveness-test"

// alivenessHold bounds the messages the aliveness test holds, unacked,
// while it looks for its own behind others' (they go back as they were).
const alivenessHold = 1000

// apiAliveness is RabbitMQ's aliveness test, as RabbitMQ 3.10.8 makes it
// on a channel of the API user's: the user needs permissions in the vhost
// (others get 401 "User not authorised to access virtual host", and an
// administrator without permissions there 401 "Access refused.", as
// RabbitMQ answers), configure on the queue aliveness-test, write on the
// default exchange and read on the queue. It declares the queue, publishes
// a message to it and gets the message back. RabbitMQ's basic.get takes
// whatever is at the head, without ack, and so drops a message someone
// else put in a queue of that name; this one takes its own message only
// (marked with a message id of its own) and puts any other back as it
// was.
func (a *API) apiAliveness(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	g := a.srv.Access().Grant(st.Name(), apiUser(r).Name)
	for _, c := range []struct {
		op         auth.Op
		kind, name string
	}{{auth.Configure, "queue", alivenessQueue}, {auth.Write, "exchange", ""}, {auth.Read, "queue", alivenessQueue}} {
		if err := g.Check(c.op, c.kind, c.name); err != nil {
			amqpToHTTP(w, err)
			return
		}
	}
	q, _, _, err := st.DeclareQueue(vhost.QueueDecl{Name: alivenessQueue, Grant: g}, queue.Config{})
	if err != nil {
		healthFailed(w, map[string]any{"reason": err.Error()})
		return
	}
	if n := q.Ready(); n >= alivenessHold {
		healthFailed(w, map[string]any{"reason": fmt.Sprintf("aliveness-test queue holds %d messages of others", n)})
		return
	}
	var id [12]byte
	_, _ = rand.Read(id[:])
	props := amqp.Properties{Flags: amqp.FlagMessageID, MessageID: "railmq-aliveness-" + hex.EncodeToString(id[:])}
	body := []byte("test_message")
	mine := props.Append(nil)
	q.Publish(&queue.Message{RoutingKey: alivenessQueue, Body: body, Props: mine, Enqueued: queue.Now()})
	var held []queue.Delivery
	defer func() { q.Return(held) }() // others' messages go back as they were
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(held) < alivenessHold && r.Context().Err() == nil {
		d, got, _, err := q.Get(false)
		if err != nil {
			break
		}
		if !got {
			time.Sleep(10 * time.Millisecond) // the publish may not have landed yet
			continue
		}
		if bytes.Equal(d.Msg.Props, mine) && bytes.Equal(d.Msg.Body, body) {
			q.Ack([]queue.Delivery{d}, nil)
			writeJSON(w, map[string]string{"status": "ok"})
			return
		}
		held = append(held, d)
	}
	healthFailed(w, map[string]any{"reason": "aliveness-test queue is empty"}) // RabbitMQ's reason when its get finds nothing
}
