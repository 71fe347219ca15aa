package broker

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"
)

// The shovels and federation links of a cluster, from any node: they run
// on one node (the metadata leader), and the management API of every
// node lists them all and restarts them wherever they run, as RabbitMQ's
// asks every node (rabbit_shovel_mgmt_util:status/2,
// rabbit_federation_mgmt.erl status/4). A node asks the others over the
// cluster's RPC links (cluster.Node.QueryAll) and answers their questions
// with what it runs itself (answerQuery).

const (
	queryShovels        = "shovels"
	queryLinks          = "federation-links"
	queryRestartShovel  = "restart-shovel"
	queryRestartLink    = "restart-federation-link"
	clusterQueryTimeout = 3 * time.Second
)

// answerQuery answers another node's question (cluster.QueryHandler).
func (s *Server) answerQuery(name string, req []byte) ([]byte, error) {
	var args []string
	if err := json.Unmarshal(req, &args); err != nil || len(args) == 0 {
		return nil, fmt.Errorf("question %s: bad arguments", name)
	}
	switch {
	case name == queryShovels:
		return json.Marshal(s.localShovels(args[0]))
	case name == queryLinks:
		return json.Marshal(s.localFederationLinks(args[0]))
	case name == queryNodeFigures:
		return s.answerFigures()
	case name == queryRestartShovel && len(args) == 2:
		return json.Marshal(s.restartShovelLocal(args[0], args[1]))
	case name == queryRestartLink && len(args) == 2:
		return json.Marshal(s.restartFederationLinkLocal(args[0], args[1]))
	}
	return nil, fmt.Errorf("unknown question %s", name)
}

// askOthers asks every other node of the cluster; the answers by node
// (none on a standalone node; a node that did not answer is left out).
func (s *Server) askOthers(name string, args ...string) map[string][]byte {
	if s.node == nil {
		return nil
	}
	req, _ := json.Marshal(args)
	out, errs := s.node.QueryAll(name, req, clusterQueryTimeout)
	for node, err := range errs {
		s.log.Debug("a node did not answer", zap.String("question", name), zap.String("node", node), zap.Error(err))
	}
	return out
}

// Shovels reports the shovels of vhost vh (all when "") the cluster runs,
// sorted by vhost and name.
func (s *Server) Shovels(vh string) []ShovelStatus {
	out := s.localShovels(vh)
	for node, p := range s.askOthers(queryShovels, vh) {
		var l []ShovelStatus
		if json.Unmarshal(p, &l) == nil {
			for i := range l {
				l[i].Node = node
			}
			out = append(out, l...)
		}
	}
	sortShovels(out)
	return out
}

// sortShovels sorts by vhost and name.
func sortShovels(out []ShovelStatus) {
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].VHost != out[j].VHost {
			return out[i].VHost < out[j].VHost
		}
		return out[i].Name < out[j].Name
	})
}

// RestartShovel restarts a shovel wherever it runs (DELETE
// /api/shovels/vhost/{vhost}/{name}/restart); false if none runs.
func (s *Server) RestartShovel(vh, name string) bool {
	if s.restartShovelLocal(vh, name) {
		return true
	}
	return anyTrue(s.askOthers(queryRestartShovel, vh, name))
}

// FederationLinks lists the links of vhost vh ("": all) the cluster runs,
// by vhost, type, name and upstream.
func (s *Server) FederationLinks(vh string) []FederationLink {
	out := s.localFederationLinks(vh)
	for node, p := range s.askOthers(queryLinks, vh) {
		var l []FederationLink
		if json.Unmarshal(p, &l) == nil {
			for i := range l {
				l[i].Node = node
			}
			out = append(out, l...)
		}
	}
	sortLinks(out)
	return out
}

// sortLinks sorts by vhost, type, name and upstream.
func sortLinks(out []FederationLink) {
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Vhost != b.Vhost {
			return a.Vhost < b.Vhost
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Upstream < b.Upstream
	})
}

// RestartFederationLink restarts the link of vhost vh with id that node
// runs; false if it runs none.
func (s *Server) RestartFederationLink(vh, id, node string) bool {
	if node == s.nodeName() {
		return s.restartFederationLinkLocal(vh, id)
	}
	if s.node == nil {
		return false
	}
	ans := s.askOthers(queryRestartLink, vh, id)
	return anyTrue(map[string][]byte{node: ans[node]})
}

func anyTrue(answers map[string][]byte) bool {
	for _, p := range answers {
		var ok bool
		if json.Unmarshal(p, &ok) == nil && ok {
			return true
		}
	}
	return false
}
