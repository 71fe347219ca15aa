package mgmt

import (
	"encoding/json"
	"fmt"

	"github.com/railmq/railmq/broker"
)

// A vhost's definitions (GET /api/definitions/{vhost}) as RabbitMQ
// 3.10.8 exports them: rabbit_version, parameters, policies, queues,
// exchanges and bindings, no other key (no users, vhosts, permissions,
// global parameters, product); parameters and policies keep their vhost,
// queues, exchanges and bindings have none (asked of a 3.10.8 node:
// [{'name': 'probe-nack', 'durable': True, 'auto_delete': False,
// 'arguments': {...}}]). And the global parameters of the whole export
// and import (globalparams.go).

type vhostDefs struct {
	RabbitVersion string          `json:"rabbit_version"`
	Parameters    []defsParameter `json:"parameters"`
	Policies      []defsPolicy    `json:"policies"`
	Queues        []vhostQueue    `json:"queues"`
	Exchanges     []vhostExchange `json:"exchanges"`
	Bindings      []vhostBinding  `json:"bindings"`
}

type vhostQueue struct {
	Name       string         `json:"name"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

type vhostExchange struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

type vhostBinding struct {
	Source          string         `json:"source"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

// vhostDefinitions is d, one vhost's export, in RabbitMQ's per-vhost
// shape.
func vhostDefinitions(d defsFile) vhostDefs {
	out := vhostDefs{RabbitVersion: d.RabbitVersion, Parameters: d.Parameters, Policies: d.Policies,
		Queues: []vhostQueue{}, Exchanges: []vhostExchange{}, Bindings: []vhostBinding{}}
	for _, q := range d.Queues {
		out.Queues = append(out.Queues, vhostQueue{q.Name, q.Durable, q.AutoDelete, q.Arguments})
	}
	for _, x := range d.Exchanges {
		out.Exchanges = append(out.Exchanges, vhostExchange{x.Name, x.Type, x.Durable, x.AutoDelete, x.Internal, x.Arguments})
	}
	for _, b := range d.Bindings {
		out.Bindings = append(out.Bindings, vhostBinding{b.Source, b.Destination, b.DestinationType, b.RoutingKey, b.Arguments})
	}
	return out
}

// exportGlobals are the global parameters as the export lists them:
// [{"name", "value"}] by name.
func exportGlobals(srv *broker.Server) []any {
	out := []any{}
	for _, p := range srv.Parameters(globalComponent, "") {
		if p.VHost == "" {
			out = append(out, globalParamJSON(p))
		}
	}
	return out
}

// checkGlobals reads the file's global parameters: each an object with
// a string name and a value.
func (im *importer) checkGlobals() error {
	for i, g := range im.d.GlobalParameters {
		m, ok := g.(map[string]any)
		name, named := m["name"].(string)
		if !ok || !named || name == "" {
			return fmt.Errorf("global_parameters[%d]: not an object with a name", i)
		}
		if _, ok := m["value"]; !ok {
			return fmt.Errorf("global parameter %q: no value", name)
		}
		if _, err := json.Marshal(m["value"]); err != nil {
			return fmt.Errorf("global parameter %q: %w", name, err)
		}
	}
	return nil
}

// applyGlobals stores the file's global parameters (checked).
func (im *importer) applyGlobals() error {
	for _, g := range im.d.GlobalParameters {
		m := g.(map[string]any)
		v, _ := json.Marshal(m["value"])
		if _, err := im.srv.PutParameter(broker.Parameter{Component: globalComponent, Name: m["name"].(string), Value: v}); err != nil {
			return err
		}
	}
	return nil
}
