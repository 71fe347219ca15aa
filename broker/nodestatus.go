package broker

import (
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/railmq/railmq/cluster"
)

// The figures of every node of a cluster, from any node: /api/nodes on
// one node of a RabbitMQ cluster lists each member's memory, disk, file
// descriptors and alarms (rabbit_mgmt_wm_nodes.erl all_nodes/1 augmented
// from each node's stats), and /api/health/checks/alarms fails on an
// alarm of any node (rabbit_alarm:get_alarms/1). A node asks the others
// over the cluster's RPC links (cluster.Node.QueryAll, as
// clusterstatus.go asks for shovels); a member that does not answer
// within nodeQueryTimeout is listed as not running, so a node down or
// stuck costs the list that long at most, never more.

const (
	queryNodeFigures = "node-figures"
	nodeQueryTimeout = 2 * time.Second
)

// NodeFigures is one node's entry in /api/nodes: what it measures of
// itself, sent as JSON between nodes.
type NodeFigures struct {
	Name        string   `json:"name"`
	Running     bool     `json:"running"` // answered (this node: always)
	Unmeasured  bool     `json:"-"`       // answered without its figures
	ClusterAddr string   `json:"cluster_address,omitempty"`
	Voter       bool     `json:"voter,omitempty"`
	OSPid       int      `json:"os_pid,omitempty"`
	UptimeMS    int64    `json:"uptime_ms,omitempty"`
	DataDir     string   `json:"data_dir,omitempty"`
	ConfigFiles []string `json:"config_files,omitempty"`
	Version     string   `json:"version,omitempty"`
	MemoryUsed  int64    `json:"mem_used,omitempty"` // the process's resident memory
	MemoryHeld  int64    `json:"mem_held,omitempty"` // what the memory alarm compares
	Watermark   int64    `json:"mem_limit,omitempty"`
	MemoryAlarm bool     `json:"mem_alarm,omitempty"`
	DiskFree    uint64   `json:"disk_free,omitempty"`
	DiskLimit   int64    `json:"disk_free_limit,omitempty"`
	DiskAlarm   bool     `json:"disk_free_alarm,omitempty"`
	FDUsed      int      `json:"fd_used,omitempty"`
	FDTotal     int      `json:"fd_total,omitempty"`
	Sockets     int      `json:"sockets_used,omitempty"` // client connections
	Procs       int      `json:"proc_used,omitempty"`    // goroutines
	Processors  int      `json:"processors,omitempty"`
	Listeners   []int    `json:"listeners,omitempty"`
}

// LocalFigures measures this node.
func (s *Server) LocalFigures() NodeFigures {
	ns := s.Status()
	return NodeFigures{Name: s.nodeName(), Running: true, OSPid: os.Getpid(), UptimeMS: time.Since(ns.Started).Milliseconds(),
		DataDir: ns.DataDir, ConfigFiles: ns.ConfigFiles, Version: s.opts.Version, MemoryUsed: ns.RSS, MemoryHeld: ns.MemoryHeld, Watermark: ns.Watermark,
		MemoryAlarm: ns.MemoryAlarm, DiskFree: ns.DiskFree, DiskLimit: ns.DiskLimit, DiskAlarm: ns.DiskAlarm,
		FDUsed: ns.FDUsed, FDTotal: ns.FDTotal, Sockets: len(s.openConns()), Procs: runtime.NumGoroutine(),
		Processors: runtime.NumCPU(), Listeners: ns.Listeners}
}

// answerFigures answers another node's question for this node's figures.
func (s *Server) answerFigures() ([]byte, error) {
	return json.Marshal(s.LocalFigures())
}

// ClusterFigures lists every node of the cluster by name, this one
// measured here, the others as they answered within nodeQueryTimeout (a
// member that did not is Running false with its name and address only,
// one that answered with an error Running and Unmeasured).
// A standalone node lists itself.
func (s *Server) ClusterFigures() []NodeFigures {
	self := s.LocalFigures()
	node := s.node
	if node == nil {
		return []NodeFigures{self}
	}
	answers, errs := node.QueryAll(queryNodeFigures, mustJSON([]string{self.Name}), nodeQueryTimeout)
	var out []NodeFigures
	for _, m := range node.Status().Members {
		f := NodeFigures{Name: m.Name}
		var refused *cluster.RefusedError
		switch p, ok := answers[m.Name]; {
		case m.Name == self.Name:
			f = self
		case ok && json.Unmarshal(p, &f) == nil && f.Name == m.Name:
			f.Running = true
		case errors.As(errs[m.Name], &refused):
			// It runs and answered, without figures (a node that does
			// not know the question).
			f = NodeFigures{Name: m.Name, Running: true, Unmeasured: true}
		default:
			f = NodeFigures{Name: m.Name}
		}
		f.ClusterAddr, f.Voter = m.Addr, m.Voter
		out = append(out, f)
	}
	if len(out) == 0 { // the raft configuration is not readable yet
		out = append(out, self)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func mustJSON(v []string) []byte {
	p, _ := json.Marshal(v) // a []string always encodes
	return p
}
