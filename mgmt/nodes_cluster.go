package mgmt

import (
	"net/http"
	"strconv"

	"github.com/railmq/railmq/broker"
)

// /api/nodes and /api/nodes/{node}: every node of the cluster with its
// own figures, as one node of a RabbitMQ cluster lists them all
// (rabbit_mgmt_wm_nodes.erl, augmented from each node's stats); the
// other nodes' figures are asked over the cluster's links
// (broker.Server.ClusterFigures). A member that does not answer is listed
// as RabbitMQ lists a node not running: its name, type and running
// false, without figures; one that answers the question with an error (a
// node that does not know it) as running, without figures.

// nodeEntry is a node's entry, under RabbitMQ 3.10.8's names.
func (a *API) nodeEntry(f broker.NodeFigures) map[string]any {
	m := map[string]any{"name": f.Name, "type": "disc", "running": f.Running, "cluster_links": []any{}}
	if f.ClusterAddr != "" {
		m["railmq_cluster_address"], m["railmq_voter"] = f.ClusterAddr, f.Voter
	}
	if !f.Running || f.Unmeasured {
		return m
	}
	add := map[string]any{
		"os_pid":   strconv.Itoa(f.OSPid),
		"mem_used": f.MemoryUsed, "mem_used_details": rate0, "mem_limit": f.Watermark, "mem_alarm": f.MemoryAlarm,
		"mem_calculation_strategy": "rss",
		"disk_free":                f.DiskFree, "disk_free_details": rate0, "disk_free_limit": f.DiskLimit, "disk_free_alarm": f.DiskAlarm,
		"fd_used": f.FDUsed, "fd_used_details": rate0, "fd_total": f.FDTotal,
		"sockets_used": f.Sockets, "sockets_used_details": rate0, "sockets_total": f.FDTotal * 9 / 10,
		"proc_used": f.Procs, "proc_used_details": rate0, "proc_total": 1048576,
		"uptime": f.UptimeMS, "run_queue": 0, "processors": f.Processors,
		"rates_mode": "basic", "exchange_types": exchangeTypes, "auth_mechanisms": []map[string]any{
			{"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": true},
			{"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": true},
		},
		"partitions": []any{}, "contexts": []any{},
		"enabled_plugins": []string{"rabbitmq_management"},
		"applications":    []map[string]string{{"name": "rabbit", "description": "RabbitMQ (railmq " + f.Version + ")", "version": broker.CompatVersion}},
		"net_ticktime":    60, "db_dir": f.DataDir,
		// RabbitMQ's lists; railmq logs to its standard error only.
		"config_files": append([]string{}, f.ConfigFiles...), "log_files": []string{"<stderr>"},
	}
	for k, v := range add {
		m[k] = v
	}
	return m
}

// nodeJSON is this node's entry.
func (a *API) nodeJSON() map[string]any {
	return a.nodeEntry(a.srv.LocalFigures())
}

func (a *API) apiNodes(w http.ResponseWriter, r *http.Request) {
	var out []map[string]any
	for _, f := range a.srv.ClusterFigures() {
		out = append(out, a.nodeEntry(f))
	}
	writeList(w, r, out)
}

// apiNode is one node's entry, another node's as it answered (or not
// running); 404 for a name that is no member.
func (a *API) apiNode(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("node")
	if name == a.srv.NodeName() {
		writeJSON(w, a.nodeJSON())
		return
	}
	for _, f := range a.srv.ClusterFigures() {
		if f.Name == name {
			writeJSON(w, a.nodeEntry(f))
			return
		}
	}
	notFound(w)
}

// clusterAlarms are the resource alarms in effect on any node that
// answers, as RabbitMQ's GET /api/health/checks/alarms lists them
// (rabbit_alarm:format_as_maps/1 in 3.10.8: node and resource, "memory"
// or "disk space").
func (a *API) clusterAlarms() []map[string]string {
	var out []map[string]string
	for _, f := range a.srv.ClusterFigures() {
		out = append(out, alarmsOf(f)...)
	}
	return out
}

func alarmsOf(f broker.NodeFigures) []map[string]string {
	var out []map[string]string
	if f.MemoryAlarm {
		out = append(out, map[string]string{"node": f.Name, "resource": "memory"})
	}
	if f.DiskAlarm {
		out = append(out, map[string]string{"node": f.Name, "resource": "disk space"})
	}
	return out
}
