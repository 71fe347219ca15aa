package mgmt

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/vhost"
)

// What a definitions file carries beyond RabbitMQ 3.10's: vhost metadata
// with a default queue type (3.12+), operator policies as parameters.

// vhostDef is a vhost as railmq exports it: in RabbitMQ 3.13's and 4.0's
// shape (name, description, tags, default_queue_type, metadata), which
// every RabbitMQ from 3.10 imports; default_queue_type only if the vhost
// has one, as 3.13 leaves out what is undefined
// (rabbit_mgmt_wm_definitions.erl v3.13.7, retain_whitelisted).
func vhostDef(name string, r broker.VHostRecord) defsVHost {
	tags := tagList(r.Tags)
	d := defsVHost{Name: name, Description: r.Description, Tags: tags, DefaultQueueType: r.DefaultQueueType,
		Metadata: &defsVHostMeta{Description: r.Description, Tags: tags}}
	if r.DefaultQueueType != "" {
		d.Metadata.DefaultQueueType = r.DefaultQueueType
	}
	return d
}

// checkDefaultQueueType reads the default queue type of the file's vhost
// v (st: the broker's, nil if the file makes it) into im.dqt, refusing an
// invalid one with RabbitMQ's text (rabbit_definitions.erl add_vhost,
// v4.3.5: "... is not a valid queue type"). Like RabbitMQ, only the
// metadata's is read; a vhost the file names without one keeps its own.
func (im *importer) checkDefaultQueueType(v defsVHost, st *broker.VHostInfo) error {
	if v.Metadata != nil && v.Metadata.DefaultQueueType != nil {
		t, err := vhost.ParseDefaultQueueType(v.Metadata.DefaultQueueType)
		if err != nil {
			return fmt.Errorf("vhost %q: %w", v.Name, err)
		}
		im.dqt[v.Name] = t
		return nil
	}
	if st != nil {
		im.dqt[v.Name] = st.Rec.DefaultQueueType
	}
	return nil
}

// existing says whether a file's queue exists already: RabbitMQ leaves it
// as it is, whatever the file says of it (rabbit_definitions.erl
// add_queue_int, v3.10.8 to v4.3.5; definition_import_SUITE import_case13a:
// "importing an existing queue ... with different arguments and different
// properties is a no-op").
func (im *importer) existing(q defsQueue) bool {
	st := im.srv.LookupVHost(q.VHost)
	if st == nil {
		return false
	}
	_, err := st.Queue(0, q.Name)
	return err == nil
}

// opPolicy is an operator policy of a definitions file, which RabbitMQ
// exports as a parameter of component operator_policy.
type opPolicy struct {
	vhost string
	def   *vhost.PolicyDef
}

func operatorPolicyParam(vh string, p *vhost.PolicyDef) defsParameter {
	return defsParameter{VHost: vh, Component: "operator_policy", Name: p.Name,
		Value: map[string]any{"pattern": p.Pattern, "apply-to": p.ApplyTo, "priority": p.Priority, "definition": p.Definition}}
}

// checkParameters checks the parameters: vhost limits and operator
// policies. Other components (shovel, federation-upstream, ...) belong to
// plugins railmq does not have; RabbitMQ without the plugin refuses them
// too ("component ~ts not found", rabbit_runtime_parameters.erl).
func (im *importer) checkParameters() error {
	im.limits = map[string]map[string]int64{}
	for _, p := range im.d.Parameters {
		if im.vhostFor(p.VHost) == nil {
			return fmt.Errorf("%s parameter %q: no vhost %q", p.Component, p.Name, p.VHost)
		}
		switch p.Component {
		case "vhost-limits":
			m, err := vhostLimits(p)
			if err != nil {
				return err
			}
			im.limits[p.VHost] = m
		case "operator_policy":
			pd, err := operatorPolicy(p)
			if err != nil {
				return err
			}
			im.opPols = append(im.opPols, opPolicy{p.VHost, pd})
		default:
			if !paramComponents[p.Component] {
				return fmt.Errorf("parameter %q of component %q in %q: only vhost-limits, operator_policy, shovel and federation parameters are supported", p.Name, p.Component, p.VHost)
			}
			raw, _ := json.Marshal(p.Value)
			val, err := (&API{srv: im.srv}).validateParameter(p.Component, p.Name, raw, nil) // only its srv is used
			if err != nil {
				// RabbitMQ: the validation text, then " (vhost/component/name)".
				return &parameterError{fmt.Sprintf("%s (%s/%s/%s)", err.Error(), p.VHost, p.Component, p.Name)}
			}
			im.params = append(im.params, broker.Parameter{VHost: p.VHost, Component: p.Component, Name: p.Name, Value: val})
		}
	}
	return nil
}

// vhostLimits reads a vhost-limits parameter's value: an object of whole
// numbers, or [] (none: how RabbitMQ 3.x exports limits once cleared).
func vhostLimits(p defsParameter) (map[string]int64, error) {
	m := map[string]int64{}
	var val map[string]any
	switch v := p.Value.(type) {
	case map[string]any:
		val = v
	case []any:
		if len(v) > 0 {
			return nil, fmt.Errorf("vhost-limits of %q: %v is not an object", p.VHost, v)
		}
	default:
		return nil, fmt.Errorf("vhost-limits of %q: %v is not an object", p.VHost, v)
	}
	for k, v := range val {
		f, ok := v.(float64)
		known := k == "max-connections" || k == "max-queues"
		if !ok || !known || f != float64(int64(f)) {
			return nil, fmt.Errorf("vhost-limits of %q: %s = %v is not a known limit with a whole number", p.VHost, k, v)
		}
		m[k] = int64(f)
	}
	return m, nil
}

// operatorPolicy reads an operator_policy parameter's value: pattern,
// definition, priority and apply-to, as a policy's.
func operatorPolicy(p defsParameter) (*vhost.PolicyDef, error) {
	v, ok := p.Value.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("operator policy %q in %q: %v is not an object", p.Name, p.VHost, p.Value)
	}
	pattern, _ := v["pattern"].(string)
	applyTo, _ := v["apply-to"].(string)
	if applyTo == "" {
		applyTo = "all"
	}
	prio, _ := v["priority"].(float64)
	def, _ := v["definition"].(map[string]any)
	pd, err := vhost.NewPolicyDef(p.Name, pattern, applyTo, int(prio), def, true)
	var pe *vhost.PolicyError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("operator policy %q in %q: %s", p.Name, p.VHost, pe.Detail)
	}
	if err != nil {
		return nil, fmt.Errorf("operator policy %q in %q: %w", p.Name, p.VHost, err)
	}
	return pd, nil
}
