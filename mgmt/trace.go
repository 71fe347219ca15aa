package mgmt

import "fmt"

// tracingOf is a PUT /api/vhosts/{vhost} body's "tracing": nil without
// the key (tracing stays as it is, as in RabbitMQ 3.10.8: a PUT of
// {"description":"x"} to a traced vhost left "tracing": true), else true
// or false, or their strings, as rabbit_mgmt_util:parse_bool takes them.
// broker.Server.SetTracing applies it.
func tracingOf(body map[string]any) (*bool, error) {
	v, ok := body["tracing"]
	if !ok || v == nil {
		return nil, nil
	}
	var on bool
	switch v := v.(type) {
	case bool:
		on = v
	case string:
		if v != "true" && v != "false" {
			return nil, fmt.Errorf("tracing: %q is not a boolean", v)
		}
		on = v == "true"
	default:
		return nil, fmt.Errorf("tracing: %v is not a boolean", v)
	}
	return &on, nil
}
