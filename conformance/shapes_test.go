package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	neturl "net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// The JSON shapes two real tools read from the management API: every
// field they need, with its JSON type, is in the tables below, written
// from the tools' sources (named at each table). Both tests pass against
// RabbitMQ 3.10.8 (RAILMQ_TEST_URL, RAILMQ_TEST_MGMT_URL).

// need says when a field must be in an answer.
type need int

const (
	// required: the tool fails without it (Go: a number KEDA computes
	// with; serde: neither an Option nor #[serde(default)]).
	required need = iota
	// optional: an Option or #[serde(default)] field, checked only where
	// it is there (a wrong type or a null fails serde all the same).
	optional
	// inFilled: required where the object holding it is not empty
	// (rabbitmq-http-client's deserialize_object_that_may_be_empty: {}
	// and null are None, anything else must be the whole struct).
	inFilled
	// rmqOmits: required by the tool, but RabbitMQ 3.10.8 does not send
	// it (the tool was written for later versions): checked only where
	// it is there.
	rmqOmits
)

// shapeField is one field: path is "/"-separated from the document's
// root, "[]" stands for every element of a list and "[name=x]" for the
// elements whose name is x (at least one must be there: the object the
// test made; x is path-escaped: %2F for "/"); types is "|"-separated: string, bool, object, array, null,
// number, int (an integer), uint (a non-negative integer); oneOf lists
// the values a string may take ("" any).
type shapeField struct {
	path  string
	types string
	need  need
	oneOf string
}

// shapeEndpoint is one GET and the fields the tool reads from it.
type shapeEndpoint struct {
	path   string
	fields []shapeField
	// extra checks values (nil: none); it returns the problems.
	extra func(doc any) []string
}

// under prefixes every field's path with p.
func under(p string, fs []shapeField) []shapeField {
	if p == "" {
		return fs
	}
	out := make([]shapeField, len(fs))
	for i, f := range fs {
		f.path = p + "/" + f.path
		out[i] = f
	}
	return out
}

// paged is a RabbitMQ paginated answer (page=, page_size=) of items with
// fields fs: rabbitmq-http-client-rs src/responses.rs, PaginatedResponse
// (every field required).
func paged(fs []shapeField) []shapeField {
	return append([]shapeField{
		{"filtered_count", "uint", required, ""},
		{"item_count", "uint", required, ""},
		{"items", "array", required, ""},
		{"page", "uint", required, ""},
		{"page_count", "uint", required, ""},
		{"page_size", "uint", required, ""},
		{"total_count", "uint", required, ""},
	}, under("items", fs)...)
}

// kedaQueue is what KEDA's RabbitMQ scaler decodes from a queue
// (github.com/kedacore/keda, pkg/scalers/rabbitmq_scaler.go: queueInfo,
// messageStat, publishDetail, deliverGetDetail; encoding/json into int
// and float64 fields). message_stats and its rates are only there once
// the queue has had traffic: they are required of the queue the test
// publishes to and consumes from (shapes-q), optional elsewhere.
func kedaQueue(p string, busy bool) []shapeField {
	stats := optional
	if busy {
		stats = required
	}
	return under(p, []shapeField{
		{"name", "string", required, ""},
		{"messages", "int", required, ""},
		{"messages_ready", "int", required, ""},
		{"messages_unacknowledged", "int", required, ""},
		{"message_stats", "object", stats, ""},
		{"message_stats/publish_details", "object", stats, ""},
		{"message_stats/publish_details/rate", "number", stats, ""},
		{"message_stats/deliver_get_details", "object", stats, ""},
		{"message_stats/deliver_get_details/rate", "number", stats, ""},
	})
}

// The KEDA scaler's HTTP mode (protocol http, or an http(s) host): GET
// /api/queues/{vhost}/{queue}, or with useRegex GET
// /api/queues/{vhost}?page=1&use_regex=true&pagination=false&name={regex}&page_size={pageSize}
// (pageSize defaults to 100) whose items it sums, averages or maxes (it
// refuses a page_count over 1). vhost "/" is sent as %2F.
func TestKEDAShapes(t *testing.T) {
	a := setupShapes(t)
	checkShapes(t, a, []shapeEndpoint{
		{path: "/api/queues/%2F/shapes-q", fields: kedaQueue("", true), extra: func(doc any) []string {
			if m, _ := doc.(map[string]any); m != nil && (fmt.Sprint(m["messages"]) != "3" || fmt.Sprint(m["messages_unacknowledged"]) != "3") {
				return []string{fmt.Sprintf("messages %v, messages_unacknowledged %v: want 3 and 3", m["messages"], m["messages_unacknowledged"])}
			}
			return nil
		}},
		{path: "/api/queues/%2F?page=1&use_regex=true&pagination=false&name=%5Eshapes-q&page_size=100", fields: append(
			append(paged(nil), kedaQueue("items/[]", false)...), kedaQueue("items/[name=shapes-q]", true)...),
			extra: func(doc any) []string {
				var bad []string
				m, _ := doc.(map[string]any)
				if m == nil {
					return nil
				}
				if fmt.Sprint(m["page_count"]) != "1" {
					bad = append(bad, fmt.Sprintf("page_count %v, want 1 (KEDA refuses more)", m["page_count"]))
				}
				items, _ := m["items"].([]any)
				var names []string
				for _, it := range items {
					if q, _ := it.(map[string]any); q != nil {
						names = append(names, fmt.Sprint(q["name"]))
					}
				}
				sort.Strings(names)
				if strings.Join(names, ",") != "shapes-q,shapes-q2" {
					bad = append(bad, fmt.Sprintf("items %v: want the queues that match ^shapes-q, [shapes-q shapes-q2]", names))
				}
				return bad
			}},
	})
}

// The rest are the response structs of rabbitmq-http-client-rs, the
// client rabbitmqadmin-ng is built on (github.com/rabbitmq/rabbitmqadmin-ng
// 2.35.0, Cargo.toml: rabbitmq_http_client 0.91; read at
// github.com/rabbitmq/rabbitmq-http-client-rs, formerly
// michaelklishin/rabbitmq-http-api-rs, 0.90.0-dev, src/responses/*.rs;
// the paths it GETs: src/blocking_api/*.rs).

// queueInfo: src/responses/queues_and_streams.rs, QueueInfo.
func queueInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"name", "string", required, ""},
		{"vhost", "string", required, ""},
		{"type", "string", required, ""},
		{"durable", "bool", required, ""},
		{"auto_delete", "bool", required, ""},
		{"exclusive", "bool", required, ""},
		{"arguments", "object", required, ""}, // XArguments: a map, not a list
		{"node", "string", optional, ""},
		{"state", "string", optional, ""},
		{"leader", "string|null", optional, ""},
		{"members", "array|null", optional, ""},
		{"online", "array|null", optional, ""},
		{"memory", "uint", optional, ""},
		{"consumers", "uint", optional, ""},
		{"consumer_utilisation", "number", optional, ""}, // f32 with default: null fails
		{"exclusive_consumer_tag", "string|null", optional, ""},
		{"policy", "string|null", optional, ""},
		{"operator_policy", "string|null", optional, ""},
		{"effective_policy_definition", "object|null", optional, ""},
		{"message_bytes", "uint", optional, ""},
		{"message_bytes_persistent", "uint", optional, ""},
		{"message_bytes_ram", "uint", optional, ""},
		{"message_bytes_ready", "uint", optional, ""},
		{"message_bytes_unacknowledged", "uint", optional, ""},
		{"messages", "uint", optional, ""},
		{"messages_persistent", "uint", optional, ""},
		{"messages_ram", "uint", optional, ""},
		{"messages_unacknowledged", "uint", optional, ""},
	})
}

// exchangeInfo: src/responses/definitions.rs, ExchangeInfo (also the
// definitions' exchanges).
func exchangeInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"name", "string", required, ""},
		{"vhost", "string", required, ""},
		{"type", "string", required, ""},
		{"durable", "bool", required, ""},
		{"auto_delete", "bool", required, ""},
		{"arguments", "object", required, ""},
	})
}

// bindingInfo: src/responses/definitions.rs, BindingInfo
// (destination_type: BindingDestinationType, lowercase).
func bindingInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"vhost", "string", required, ""},
		{"source", "string", required, ""},
		{"destination", "string", required, ""},
		{"destination_type", "string", required, "queue exchange"},
		{"routing_key", "string", required, ""},
		{"arguments", "object", required, ""},
		{"properties_key", "string|null", optional, ""},
	})
}

// connectionInfo: src/responses/connections.rs, Connection,
// ClientProperties, ClientCapabilities.
func connectionInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"name", "string", required, ""},
		{"node", "string", required, ""},
		{"protocol", "string", required, ""},
		{"user", "string", required, ""},
		{"connected_at", "uint", required, ""},
		{"client_properties", "object", required, ""},
		{"state", "string|null", optional, ""},
		{"host", "string|null", optional, ""},
		{"port", "uint|null", optional, ""},
		{"peer_host", "string|null", optional, ""},
		{"peer_port", "uint|null", optional, ""},
		{"channel_max", "uint|null", optional, ""},
		{"channels", "uint", optional, ""},
		{"client_properties/connection_name", "string", optional, ""},
		{"client_properties/platform", "string", optional, ""},
		{"client_properties/product", "string", optional, ""},
		{"client_properties/version", "string", optional, ""},
		{"client_properties/capabilities", "object|null", optional, ""},
		{"client_properties/capabilities/authentication_failure_close", "bool", optional, ""},
		{"client_properties/capabilities/basic.nack", "bool", optional, ""},
		{"client_properties/capabilities/connection.blocked", "bool", optional, ""},
		{"client_properties/capabilities/consumer_cancel_notify", "bool", optional, ""},
		{"client_properties/capabilities/exchange_exchange_bindings", "bool", optional, ""},
		{"client_properties/capabilities/publisher_confirms", "bool", optional, ""},
	})
}

// channelInfo: src/responses/channels.rs, Channel (state: ChannelState,
// any string), and connections.rs, ConnectionDetails.
func channelInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"number", "uint", required, ""},
		{"name", "string", required, ""},
		{"connection_details", "object", required, ""},
		{"connection_details/name", "string", required, ""},
		{"connection_details/peer_host", "string", required, ""},
		{"connection_details/peer_port", "uint", required, ""},
		{"vhost", "string", required, ""},
		{"state", "string", required, ""},
		{"consumer_count", "uint", required, ""},
		{"confirm", "bool", required, ""},
		{"prefetch_count", "uint", required, ""},
		{"messages_unacknowledged", "uint", required, ""},
		{"messages_unconfirmed", "uint", required, ""},
	})
}

// policyInfo: src/responses/policies.rs, Policy (apply-to: PolicyTarget,
// snake_case; definition: PolicyDefinition, a map or null, required: a
// newtype). Without vhost for a vhost's definitions
// (PolicyWithoutVirtualHost).
func policyInfo(p string, vhost bool) []shapeField {
	fs := []shapeField{
		{"name", "string", required, ""},
		{"pattern", "string", required, ""},
		{"apply-to", "string", required, "queues classic_queues quorum_queues streams exchanges all"},
		{"priority", "int", required, ""},
		{"definition", "object|null", required, ""},
	}
	if vhost {
		fs = append(fs, shapeField{"vhost", "string", required, ""})
	}
	return under(p, fs)
}

// vhostInfo: src/responses/vhosts.rs, VirtualHost, VirtualHostMetadata.
func vhostInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"name", "string", required, ""},
		{"tags", "array|null", optional, ""},
		{"tags/[]", "string", required, ""},
		{"description", "string|null", optional, ""},
		{"default_queue_type", "string|null", optional, ""},
		{"metadata", "object|null", optional, ""},
		{"metadata/tags", "array|null", optional, ""},
		{"metadata/description", "string|null", optional, ""},
		{"metadata/default_queue_type", "string|null", optional, ""},
	})
}

// userInfo: src/responses/users.rs, User (tags: TagList, a list).
func userInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"name", "string", required, ""},
		{"tags", "array", required, ""},
		{"tags/[]", "string", required, ""},
		{"password_hash", "string", required, ""},
	})
}

// permissionInfo: src/responses/permissions.rs, Permissions.
func permissionInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"user", "string", required, ""},
		{"vhost", "string", required, ""},
		{"configure", "string", required, ""},
		{"read", "string", required, ""},
		{"write", "string", required, ""},
	})
}

// rate: src/responses/cluster.rs, Rate (#[serde(default)]).
func rate(p string) []shapeField {
	return []shapeField{{p, "object", optional, ""}, {p + "/rate", "number", optional, ""}}
}

// overviewFields: src/responses/cluster.rs, Overview: #[serde(default)]
// on the struct, so no field is required, but one that is there must
// have its type (null fails a String); ChurnRates, QueueTotals,
// ObjectTotals, Rate likewise; MessageStats' rates are Option<Rate>;
// Listener's fields are required.
func overviewFields() []shapeField {
	fs := []shapeField{
		{"cluster_name", "string", optional, ""},
		{"node", "string", optional, ""},
		{"erlang_full_version", "string", optional, ""},
		{"erlang_version", "string", optional, ""},
		{"rabbitmq_version", "string", optional, ""},
		{"crypto_lib_version", "string|null", optional, ""},
		{"product_name", "string", optional, ""},
		{"product_version", "string", optional, ""},
		{"cluster_tags", "object|null", optional, ""},
		{"node_tags", "object|null", optional, ""},
		{"statistics_db_event_queue", "uint", optional, ""},
		{"churn_rates", "object", optional, ""},
		{"queue_totals", "object", optional, ""},
		{"queue_totals/messages", "uint", optional, ""},
		{"queue_totals/messages_ready", "uint", optional, ""},
		{"queue_totals/messages_unacknowledged", "uint", optional, ""},
		{"object_totals", "object", optional, ""},
		{"message_stats", "object|array", optional, ""}, // serde takes [] for a struct whose fields all default
		{"listeners", "array", optional, ""},
		{"listeners/[]/node", "string", required, ""},
		{"listeners/[]/protocol", "string", required, ""},
		{"listeners/[]/port", "uint", required, ""},
		{"listeners/[]/ip_address", "string", required, ""},
	}
	for _, k := range []string{"connection_created", "connection_closed", "queue_declared", "queue_created", "queue_deleted", "channel_created", "channel_closed"} {
		fs = append(fs, shapeField{"churn_rates/" + k, "uint", optional, ""})
	}
	for _, k := range []string{"connections", "channels", "queues", "exchanges", "consumers"} {
		fs = append(fs, shapeField{"object_totals/" + k, "uint", optional, ""})
	}
	for _, k := range []string{"messages_details", "messages_ready_details", "messages_unacknowledged_details"} {
		fs = append(fs, rate("queue_totals/"+k)...)
	}
	for _, k := range []string{"deliver_get_details", "publish_details", "deliver_no_ack_details", "redeliver_details", "confirm_details", "ack_details", "drop_unroutable_details", "return_unroutable_details"} {
		fs = append(fs, shapeField{"message_stats/" + k, "object|null", optional, ""}, shapeField{"message_stats/" + k + "/rate", "number", optional, ""})
	}
	return fs
}

// nodeInfo: src/responses/cluster.rs, ClusterNode (os_pid:
// deserialize_number_from_string, a number or a string of one),
// OtpApplication.
func nodeInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"name", "string", required, ""},
		{"uptime", "uint", required, ""},
		{"run_queue", "uint", required, ""},
		{"processors", "uint", required, ""},
		{"os_pid", "uint|string", required, ""},
		{"fd_total", "uint", required, ""},
		{"proc_total", "uint", required, ""},
		{"mem_limit", "uint", required, ""},
		{"mem_alarm", "bool", required, ""},
		{"disk_free_limit", "uint", required, ""},
		{"disk_free_alarm", "bool", required, ""},
		{"rates_mode", "string", required, ""},
		{"enabled_plugins", "array", required, ""},
		{"enabled_plugins/[]", "string", required, ""},
		{"being_drained", "bool", rmqOmits, ""}, // RabbitMQ 3.10.8 has no such field
		{"applications", "array", optional, ""},
		{"applications/[]/name", "string", required, ""},
		{"applications/[]/description", "string", required, ""},
		{"applications/[]/version", "string", required, ""},
		{"rabbitmq_version", "string|null", optional, ""},
		{"erlang_version", "string|null", optional, ""},
		{"erlang_full_version", "string|null", optional, ""},
		{"crypto_lib_version", "string|null", optional, ""},
	})
}

// consumerInfo: src/responses/consumers.rs, Consumer (channel_details:
// deserialize_object_that_may_be_empty, so it must be there: an object,
// {} or null), queues_and_streams.rs NameAndVirtualHost, channels.rs
// ChannelDetails.
func consumerInfo(p string) []shapeField {
	return under(p, []shapeField{
		{"consumer_tag", "string", required, ""},
		{"active", "bool", required, ""},
		{"ack_required", "bool", required, ""},
		{"prefetch_count", "uint", required, ""},
		{"exclusive", "bool", required, ""},
		{"arguments", "object", required, ""},
		{"consumer_timeout", "uint", rmqOmits, ""}, // RabbitMQ 3.10.8 has no such field
		{"queue", "object", required, ""},
		{"queue/name", "string", required, ""},
		{"queue/vhost", "string", required, ""},
		{"channel_details", "object|null", required, ""},
		{"channel_details/number", "uint", inFilled, ""},
		{"channel_details/name", "string", inFilled, ""},
		{"channel_details/connection_name", "string", inFilled, ""},
		{"channel_details/node", "string", inFilled, ""},
		{"channel_details/peer_host", "string", inFilled, ""},
		{"channel_details/peer_port", "uint", inFilled, ""},
		{"channel_details/user", "string", inFilled, ""},
	})
}

// definitions: src/responses/definitions.rs, ClusterDefinitionSet (every
// list required), QueueDefinition, ExchangeInfo, BindingInfo; users.rs
// User; vhosts.rs VirtualHost; permissions.rs Permissions; policies.rs
// Policy; parameters.rs RuntimeParameter (value: a map, or a list taken
// as empty).
func definitionsFields() []shapeField {
	fs := []shapeField{{"rabbitmq_version", "string|null", optional, ""}}
	for _, k := range []string{"users", "vhosts", "permissions", "parameters", "policies", "queues", "exchanges", "bindings"} {
		fs = append(fs, shapeField{k, "array", required, ""})
	}
	fs = append(fs, userInfo("users/[]")...)
	fs = append(fs, userInfo("users/[name=shapes-user]")[:1]...)
	fs = append(fs, vhostInfo("vhosts/[]")...)
	fs = append(fs, permissionInfo("permissions/[]")...)
	fs = append(fs, under("parameters/[]", []shapeField{
		{"name", "string", required, ""},
		{"vhost", "string", required, ""},
		{"component", "string", required, ""},
		{"value", "object|array", required, ""},
	})...)
	fs = append(fs, policyInfo("policies/[]", true)...)
	fs = append(fs, policyInfo("policies/[name=shapes-pol]", true)[:1]...)
	fs = append(fs, definitionQueue("queues/[]", true)...)
	fs = append(fs, definitionQueue("queues/[name=shapes-q]", true)[:1]...)
	fs = append(fs, exchangeInfo("exchanges/[]")...)
	fs = append(fs, exchangeInfo("exchanges/[name=shapes-x]")[:1]...)
	fs = append(fs, bindingInfo("bindings/[]")...)
	return fs
}

// vhostDefinitionsFields: src/responses/definitions.rs,
// VirtualHostDefinitionSet and the *WithoutVirtualHost structs.
func vhostDefinitionsFields() []shapeField {
	fs := []shapeField{
		{"rabbitmq_version", "string|null", optional, ""},
		{"metadata", "object|null", optional, ""},
	}
	for _, k := range []string{"parameters", "policies", "queues", "exchanges", "bindings"} {
		fs = append(fs, shapeField{k, "array", required, ""})
	}
	fs = append(fs, under("parameters/[]", []shapeField{
		{"name", "string", required, ""},
		{"component", "string", required, ""},
		{"value", "object|array", required, ""},
	})...)
	fs = append(fs, policyInfo("policies/[]", false)...)
	fs = append(fs, definitionQueue("queues/[]", false)...)
	fs = append(fs, definitionQueue("queues/[name=shapes-q]", false)[:1]...)
	fs = append(fs, under("exchanges/[]", []shapeField{
		{"name", "string", required, ""},
		{"type", "string", required, ""},
		{"durable", "bool", required, ""},
		{"auto_delete", "bool", required, ""},
		{"arguments", "object", required, ""},
	})...)
	fs = append(fs, under("bindings/[]", []shapeField{
		{"source", "string", required, ""},
		{"destination", "string", required, ""},
		{"destination_type", "string", required, "queue exchange"},
		{"routing_key", "string", required, ""},
		{"arguments", "object", required, ""},
		{"properties_key", "string|null", optional, ""},
	})...)
	return fs
}

// definitionQueue: src/responses/definitions.rs, QueueDefinition (and
// QueueDefinitionWithoutVirtualHost).
func definitionQueue(p string, vhost bool) []shapeField {
	fs := []shapeField{
		{"name", "string", required, ""},
		{"durable", "bool", required, ""},
		{"auto_delete", "bool", required, ""},
		{"arguments", "object", required, ""},
	}
	if vhost {
		fs = append(fs, shapeField{"vhost", "string", required, ""})
	}
	return under(p, fs)
}

// The GETs behind rabbitmqadmin-ng's show overview, list nodes / vhosts /
// users / permissions / queues / exchanges / bindings / connections /
// channels / consumers / policies, and definitions export (src/commands.rs:
// client.overview, list_nodes, list_vhosts, list_users(_paged),
// list_permissions, list_queues_in(_paged), list_exchanges_in(_paged),
// list_bindings, list_connections(_paged), list_channels(_paged),
// list_consumers, list_policies, get_queue_info,
// export_cluster_wide_definitions_as_data, export_vhost_definitions_as_data).
// list_users_paged (GET /api/users?page=1&page_size=...) is left out:
// RabbitMQ 3.10.8 answers it with a plain list, not a page, so the tool
// cannot read it there either.
func TestRabbitmqadminNGShapes(t *testing.T) {
	a := setupShapes(t)
	const pg = "?page=1&page_size=100"
	checkShapes(t, a, []shapeEndpoint{
		{path: "/api/overview", fields: overviewFields()},
		{path: "/api/nodes", fields: nodeInfo("[]")},
		{path: "/api/vhosts", fields: append(vhostInfo("[]"), vhostInfo("[name=%2F]")[:1]...)},
		{path: "/api/users", fields: append(userInfo("[]"), userInfo("[name=shapes-user]")[:1]...)},
		{path: "/api/permissions", fields: append(permissionInfo("[]"), permissionInfo("[user=shapes-user]")[:1]...)},
		{path: "/api/queues/%2F", fields: append(queueInfo("[]"), queueInfo("[name=shapes-q]")[:1]...)},
		{path: "/api/queues/%2F" + pg, fields: paged(append(queueInfo("[]"), queueInfo("[name=shapes-q]")[:1]...))},
		{path: "/api/queues/%2F/shapes-q", fields: queueInfo("")},
		{path: "/api/exchanges/%2F", fields: append(exchangeInfo("[]"), exchangeInfo("[name=shapes-x]")[:1]...)},
		{path: "/api/exchanges/%2F" + pg, fields: paged(append(exchangeInfo("[]"), exchangeInfo("[name=shapes-x]")[:1]...))},
		{path: "/api/bindings", fields: append(bindingInfo("[]"), bindingInfo("[source=shapes-x]")[:1]...)},
		{path: "/api/connections", fields: append(connectionInfo("[]"), connectionInfo("[user=guest]")[:1]...)},
		{path: "/api/connections" + pg, fields: paged(append(connectionInfo("[]"), connectionInfo("[user=guest]")[:1]...))},
		{path: "/api/channels", fields: append(channelInfo("[]"), channelInfo("[vhost=%2F]")[:1]...)},
		{path: "/api/channels" + pg, fields: paged(append(channelInfo("[]"), channelInfo("[vhost=%2F]")[:1]...))},
		{path: "/api/consumers", fields: append(consumerInfo("[]"), consumerInfo("[consumer_tag=shapes-consumer]")[:1]...)},
		{path: "/api/policies", fields: append(policyInfo("[]", true), policyInfo("[name=shapes-pol]", true)[:1]...)},
		{path: "/api/definitions", fields: definitionsFields()},
		{path: "/api/definitions/%2F", fields: vhostDefinitionsFields()},
	})
}

// setupShapes makes, in "/", two queues (shapes-q and shapes-q2), a topic
// exchange shapes-x bound to shapes-q, a user shapes-user with
// permissions, a policy shapes-pol, and a connection whose confirm-mode
// channel has a consumer (shapes-consumer, manual acks, prefetch 10) on
// shapes-q holding the 3 messages it published unacknowledged. All of it
// goes at cleanup.
func setupShapes(t *testing.T) *api {
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	t.Cleanup(func() {
		for _, p := range []string{"/api/queues/%2F/shapes-q", "/api/queues/%2F/shapes-q2", "/api/exchanges/%2F/shapes-x",
			"/api/policies/%2F/shapes-pol", "/api/users/shapes-user"} {
			a.call("DELETE", p, "guest", "guest", nil, nil)
		}
	})
	a.admin("PUT", "/api/queues/%2F/shapes-q", map[string]any{"durable": true, "auto_delete": false, "arguments": map[string]any{}}, 201)
	a.admin("PUT", "/api/queues/%2F/shapes-q2", map[string]any{"durable": false}, 201)
	a.admin("PUT", "/api/exchanges/%2F/shapes-x", map[string]any{"type": "topic", "durable": true}, 201)
	a.admin("POST", "/api/bindings/%2F/e/shapes-x/q/shapes-q", map[string]any{"routing_key": "k", "arguments": map[string]any{}}, 201)
	a.admin("PUT", "/api/users/shapes-user", map[string]any{"password": "pw", "tags": "monitoring"}, 201)
	a.admin("PUT", "/api/permissions/%2F/shapes-user", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
	a.admin("PUT", "/api/policies/%2F/shapes-pol", map[string]any{"pattern": "^shapes-", "definition": map[string]any{"max-length": 1000},
		"apply-to": "queues", "priority": 1}, 201)

	c := dial(t, b.URL) // closed at cleanup, before the objects go
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	must(t, ch.Qos(10, 0, false))
	ds, err := ch.Consume("shapes-q", "shapes-consumer", false, false, false, false, nil)
	must(t, err)
	for i := 0; i < 3; i++ {
		dc, err := ch.PublishWithDeferredConfirm("shapes-x", "k", false, false, rmq.Publishing{Body: []byte("shape")})
		must(t, err)
		if !dc.Wait() {
			t.Fatal("publish nacked")
		}
	}
	for i := 0; i < 3; i++ {
		select {
		case <-ds:
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %d did not come", i+1)
		}
	}
	return a
}

// checkShapes GETs every endpoint until all its fields are there with
// their types: RabbitMQ fills statistics (message_stats, the lists of
// connections, channels and consumers) a few seconds late, so it polls
// for up to 15 s, then fails with every problem of the last round.
func checkShapes(t *testing.T, a *api, eps []shapeEndpoint) {
	t.Helper()
	rep := &shapeReport{}
	var last time.Time
	testutil.Eventually(t, 15*time.Second, func() bool {
		if time.Since(last) < 500*time.Millisecond {
			return false
		}
		last = time.Now()
		rep.problems = rep.problems[:0]
		for _, ep := range eps {
			for _, p := range shapeProblems(a, ep) {
				rep.problems = append(rep.problems, ep.path+": "+p)
			}
		}
		return len(rep.problems) == 0
	}, "the tools' fields%v", rep)
}

// shapeReport prints the problems of the last round when the test fails.
type shapeReport struct{ problems []string }

func (r *shapeReport) String() string { return "\n\t" + strings.Join(r.problems, "\n\t") }

// shapeProblems GETs ep.path and checks its fields.
func shapeProblems(a *api, ep shapeEndpoint) []string {
	var raw json.RawMessage
	if code := a.call("GET", ep.path, "guest", "guest", nil, &raw); code != 200 {
		return []string{fmt.Sprintf("status %d: %s", code, raw)}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return []string{err.Error()}
	}
	var bad []string
	for _, f := range ep.fields {
		var segs []string
		if f.path != "" {
			segs = strings.Split(f.path, "/")
		}
		checkField(doc, segs, "", f, &bad)
	}
	if ep.extra != nil {
		bad = append(bad, ep.extra(doc)...)
	}
	return dedupe(bad)
}

var selector = regexp.MustCompile(`^\[([^=\]]+)=([^\]]*)\]$`)

// checkField walks segs from v (at is where v is, for the messages) and
// checks the value at the end. A missing or null object on the way is
// not f's problem: the entry for that object reports it if it must be
// there.
func checkField(v any, segs []string, at string, f shapeField, bad *[]string) {
	if len(segs) == 0 {
		if !hasType(v, f.types) {
			*bad = append(*bad, fmt.Sprintf("%s is %s, want %s", where(at), kind(v), f.types))
		} else if s, ok := v.(string); ok && f.oneOf != "" && !slices.Contains(strings.Fields(f.oneOf), s) {
			*bad = append(*bad, fmt.Sprintf("%s is %q, want one of %s", where(at), s, f.oneOf))
		}
		return
	}
	seg := segs[0]
	if seg == "[]" || selector.MatchString(seg) {
		arr, ok := v.([]any)
		if !ok {
			if at == "" { // the answer itself: no entry of its own
				*bad = append(*bad, fmt.Sprintf("the answer is %s, want array", kind(v)))
			}
			return
		}
		m := selector.FindStringSubmatch(seg)
		if m != nil {
			m[2], _ = neturl.PathUnescape(m[2])
		}
		found := false
		for i, el := range arr {
			if m != nil {
				o, _ := el.(map[string]any)
				if s, _ := o[m[1]].(string); o == nil || s != m[2] {
					continue
				}
			}
			found = true
			checkField(el, segs[1:], fmt.Sprintf("%s[%d]", at, i), f, bad)
		}
		if m != nil && !found {
			*bad = append(*bad, fmt.Sprintf("%s: no element with %s %q", where(at), m[1], m[2]))
		}
		return
	}
	o, ok := v.(map[string]any)
	if !ok {
		return
	}
	child, present := o[seg]
	if len(segs) > 1 {
		if present {
			checkField(child, segs[1:], at+"/"+seg, f, bad)
		}
		return
	}
	switch {
	case present:
		checkField(child, nil, at+"/"+seg, f, bad)
	case f.need == required || (f.need == inFilled && len(o) > 0):
		*bad = append(*bad, fmt.Sprintf("%s: missing (%s)", where(at+"/"+seg), f.types))
	}
}

func where(at string) string {
	if at == "" {
		return "the answer"
	}
	return strings.TrimPrefix(at, "/")
}

func hasType(v any, types string) bool {
	for _, t := range strings.Split(types, "|") {
		k := kind(v)
		switch {
		case t == k:
			return true
		case k == "number" && (t == "int" || t == "uint"):
			s := string(v.(json.Number))
			if !strings.ContainsAny(s, ".eE") && (t == "int" || !strings.HasPrefix(s, "-")) {
				return true
			}
		}
	}
	return false
}

// kind is v's JSON type (a decoded number is a json.Number: UseNumber).
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number:
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

var index = regexp.MustCompile(`\[\d+\]`)

// dedupe keeps the first of identical problems (a field missing from
// every element of a list is said once per element otherwise).
func dedupe(ps []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range ps {
		k := index.ReplaceAllString(p, "[]")
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
