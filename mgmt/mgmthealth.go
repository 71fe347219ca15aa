package mgmt

import (
	"net/http"
	"strconv"
	"time"

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

func (a *API) alarmList() []map[string]string {
	var out []map[string]string
	st := a.srv.Status()
	node := a.srv.NodeName()
	if st.MemoryAlarm {
		out = append(out, map[string]string{"node": node, "resource": "memory"})
	}
	if st.DiskAlarm {
		out = append(out, map[string]string{"node": node, "resource": "disk"})
	}
	return out
}

func (a *API) apiHealthAlarms(w http.ResponseWriter, r *http.Request) {
	if al := a.alarmList(); len(al) > 0 {
		healthFailed(w, map[string]any{"reason": "There are alarms in effect in the cluster", "alarms": al})
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}

func (a *API) apiHealthLocalAlarms(w http.ResponseWriter, r *http.Request) {
	if al := a.alarmList(); len(al) > 0 {
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

// apiAliveness is RabbitMQ's aliveness test: declare the queue
// aliveness-test in the vhost, publish a message to it and get it back.
func (a *API) apiAliveness(w http.ResponseWriter, r *http.Request) {
	st, ok := a.objectVHost(w, r)
	if !ok {
		return
	}
	q, _, _, err := st.DeclareQueue(vhost.QueueDecl{Name: "aliveness-test"}, queue.Config{})
	if err != nil {
		healthFailed(w, map[string]any{"reason": err.Error()})
		return
	}
	body := []byte("test_message")
	q.Publish(&queue.Message{RoutingKey: "aliveness-test", Body: body, Props: []byte{0, 0}, Enqueued: queue.Now()})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		d, ok, _, err := q.Get(true)
		if err != nil {
			break
		}
		if ok && string(d.Msg.Body) == string(body) {
			writeJSON(w, map[string]string{"status": "ok"})
			return
		}
		if !ok {
			time.Sleep(10 * time.Millisecond)
		}
	}
	healthFailed(w, map[string]any{"reason": "aliveness test failed"})
}
