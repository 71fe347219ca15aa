package broker

import (
	"net"
	"net/http"
	"sort"
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

func (s *Server) alarmList() []map[string]string {
	var out []map[string]string
	bits := s.alarms.Load()
	node := s.nodeName()
	if bits&alarmMemory != 0 {
		out = append(out, map[string]string{"node": node, "resource": "memory"})
	}
	if bits&alarmDisk != 0 {
		out = append(out, map[string]string{"node": node, "resource": "disk"})
	}
	return out
}

func (s *Server) apiHealthAlarms(w http.ResponseWriter, r *http.Request) {
	if a := s.alarmList(); len(a) > 0 {
		healthFailed(w, map[string]any{"reason": "There are alarms in effect in the cluster", "alarms": a})
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}

func (s *Server) apiHealthLocalAlarms(w http.ResponseWriter, r *http.Request) {
	if a := s.alarmList(); len(a) > 0 {
		healthFailed(w, map[string]any{"reason": "There are alarms in effect on the node", "alarms": a})
		return
	}
	writeJSON(w, map[string]string{"status": "ok"})
}

// listenerPorts are the ports the AMQP listeners (plain and TLS) serve.
func (s *Server) listenerPorts() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ports []int
	for _, ln := range s.lns {
		if _, p, err := net.SplitHostPort(ln.Addr().String()); err == nil {
			if n, err := strconv.Atoi(p); err == nil {
				ports = append(ports, n)
			}
		}
	}
	sort.Ints(ports)
	return ports
}

func (s *Server) apiHealthPortListener(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		badRequest(w, "Invalid port: "+r.PathValue("port"))
		return
	}
	ports := s.listenerPorts()
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

func (s *Server) apiHealthProtocolListener(w http.ResponseWriter, r *http.Request) {
	proto := r.PathValue("protocol")
	switch proto {
	case "amqp", "amqp091", "amqp0-9-1":
		if len(s.listenerPorts()) > 0 {
			writeJSON(w, map[string]any{"status": "ok", "protocol": proto})
			return
		}
	}
	healthFailed(w, map[string]any{"reason": "No active listener", "missing": proto, "protocols": []string{"amqp"}})
}

// apiHealthVirtualHosts: every vhost is up while the broker runs (a vhost
// has no processes of its own to fail).
func (s *Server) apiHealthVirtualHosts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]string{"status": "ok"})
}

// apiAliveness is RabbitMQ's aliveness test: declare the queue
// aliveness-test in the vhost, publish a message to it and get it back.
func (s *Server) apiAliveness(w http.ResponseWriter, r *http.Request) {
	st, ok := s.objectVHost(w, r)
	if !ok {
		return
	}
	q, _, _, err := st.v.DeclareQueue(vhost.QueueDecl{Name: "aliveness-test"}, queue.Config{})
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
