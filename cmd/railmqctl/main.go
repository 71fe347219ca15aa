// Command railmqctl manages a railmq (or RabbitMQ) broker through its
// management HTTP API: list, declare and delete objects, purge, get,
// publish, peek and redrive, move messages (a shovel), users,
// permissions and policies, export and import definitions, close
// connections, status. It is also installed as rabbitmqctl: called by
// that name it takes RabbitMQ's commands for what client test suites and
// health checks call (list_queues, list_connections, close_connection,
// set_vm_memory_high_watermark, status, ping).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

type client struct {
	base, user, pass, vhost, format string
	out                             io.Writer // what the commands print
}

func (c *client) do(method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case []byte:
			rd = bytes.NewReader(b)
		default:
			j, err := json.Marshal(b)
			if err != nil {
				return nil, err
			}
			rd = bytes.NewReader(j)
		}
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(c.base, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(c.user, c.pass)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		e := &statusError{Code: resp.StatusCode, Status: resp.Status}
		var b struct{ Error, Reason string }
		if json.Unmarshal(out, &b) == nil {
			e.Reason = strings.TrimSpace(b.Reason)
		}
		return nil, e
	}
	return out, nil
}

// statusError is the API's answer to a call that failed: the HTTP status
// and RabbitMQ's reason.
type statusError struct {
	Code           int
	Status, Reason string
}

func (e *statusError) Error() string {
	if e.Reason != "" {
		return e.Status + ": " + e.Reason
	}
	return e.Status
}

func (c *client) vh() string { return url.PathEscape(c.vhost) }

// show prints a JSON list as a table of columns (or as JSON).
func (c *client) show(raw []byte, cols []string) error {
	if c.format == "json" {
		_, err := c.out.Write(append(raw, '\n'))
		return err
	}
	var items []map[string]any
	if err := json.Unmarshal(raw, &items); err != nil {
		var one map[string]any
		if json.Unmarshal(raw, &one) != nil {
			return err
		}
		items = []map[string]any{one}
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, it := range items {
		vals := make([]string, len(cols))
		for i, col := range cols {
			var v any = it
			for _, p := range strings.Split(col, ".") {
				m, _ := v.(map[string]any)
				v = m[p]
			}
			switch x := v.(type) {
			case nil:
				vals[i] = ""
			case float64:
				vals[i] = strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", x), "0"), ".")
			case string:
				vals[i] = x
			default:
				b, _ := json.Marshal(x)
				vals[i] = string(b)
			}
		}
		fmt.Fprintln(tw, strings.Join(vals, "\t"))
	}
	return tw.Flush()
}

var listColumns = map[string][]string{
	"queues":      {"vhost", "name", "messages", "messages_ready", "messages_unacknowledged", "consumers", "policy"},
	"exchanges":   {"vhost", "name", "type", "durable", "auto_delete", "internal"},
	"bindings":    {"vhost", "source", "destination", "destination_type", "routing_key", "properties_key"},
	"connections": {"name", "user", "vhost", "state"},
	"channels":    {"name", "user", "vhost"},
	"consumers":   {"queue.name", "consumer_tag", "prefetch_count", "ack_required"},
	"users":       {"name", "tags"},
	"vhosts":      {"name", "description", "messages"},
	"policies":    {"vhost", "name", "pattern", "apply-to", "priority", "definition"},
	"permissions": {"vhost", "user", "configure", "write", "read"},
}

// kv reads key=value arguments into a JSON-ready map (numbers and
// booleans as such).
func kv(args []string) map[string]any {
	m := map[string]any{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		var j any
		if json.Unmarshal([]byte(v), &j) == nil {
			m[k] = j
		} else {
			m[k] = v
		}
	}
	return m
}

// newRoot is railmqctl's command tree; its flags set c.
func newRoot(c *client) *cobra.Command {
	root := &cobra.Command{Use: "railmqctl", Short: "Manage a railmq broker through its management HTTP API", SilenceUsage: true}
	env := func(k, d string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return d
	}
	root.PersistentFlags().StringVar(&c.base, "url", env("RAILMQ_MANAGEMENT_URL", "http://127.0.0.1:15672"), "the management API's address (RAILMQ_MANAGEMENT_URL)")
	root.PersistentFlags().StringVarP(&c.user, "user", "u", env("RAILMQ_USER", "guest"), "user (RAILMQ_USER)")
	root.PersistentFlags().StringVarP(&c.pass, "password", "p", env("RAILMQ_PASSWORD", "guest"), "password (RAILMQ_PASSWORD)")
	root.PersistentFlags().StringVarP(&c.vhost, "vhost", "V", "/", "virtual host")
	root.PersistentFlags().StringVarP(&c.format, "format", "f", "table", "table or json")

	var cmds []*cobra.Command
	cmds = append(cmds, newObjectCmds(c)...)
	cmds = append(cmds, newMessageCmds(c)...)
	cmds = append(cmds, newCloseCmd(c))
	cmds = append(cmds, newAccessCmds(c)...)
	cmds = append(cmds, newPolicyCmds(c)...)
	cmds = append(cmds, newDefinitionsCmds(c)...)
	cmds = append(cmds, newStatusCmd(c), newClusterCmd(c), newQueuesCmd(c), newMoveCmd(c))
	root.AddCommand(cmds...)
	return root
}

// newObjectCmds are list, declare and delete.
func newObjectCmds(c *client) []*cobra.Command {
	list := &cobra.Command{Use: "list KIND [COLUMN...]", Short: "list queues, exchanges, bindings, connections, channels, consumers, users, vhosts, policies, permissions",
		Args: cobra.MinimumNArgs(1), RunE: func(_ *cobra.Command, a []string) error {
			kind := a[0]
			cols, ok := listColumns[kind]
			if !ok {
				return fmt.Errorf("unknown kind %q", kind)
			}
			if len(a) > 1 {
				cols = a[1:]
			}
			path := "/api/" + kind
			switch kind {
			case "queues", "exchanges", "bindings", "policies", "consumers":
				path += "/" + c.vh()
			}
			raw, err := c.do("GET", path, nil)
			if err != nil {
				return err
			}
			return c.show(raw, cols)
		}}
	declare := &cobra.Command{Use: "declare queue|exchange|binding KEY=VALUE...", Short: "declare an object (name=..., durable=true, type=topic, source=, destination=, routing_key=, arguments={...})",
		Args: cobra.MinimumNArgs(2), RunE: func(_ *cobra.Command, a []string) error {
			m := kv(a[1:])
			name, _ := m["name"].(string)
			switch a[0] {
			case "queue":
				_, err := c.do("PUT", "/api/queues/"+c.vh()+"/"+url.PathEscape(name), m)
				return err
			case "exchange":
				_, err := c.do("PUT", "/api/exchanges/"+c.vh()+"/"+url.PathEscape(name), m)
				return err
			case "binding":
				src, _ := m["source"].(string)
				dst, _ := m["destination"].(string)
				dt := "q"
				if m["destination_type"] == "exchange" {
					dt = "e"
				}
				_, err := c.do("POST", "/api/bindings/"+c.vh()+"/e/"+url.PathEscape(src)+"/"+dt+"/"+url.PathEscape(dst), m)
				return err
			}
			return fmt.Errorf("cannot declare %q", a[0])
		}}
	del := &cobra.Command{Use: "delete queue|exchange|user|vhost|policy NAME", Short: "delete an object",
		Args: cobra.ExactArgs(2), RunE: func(_ *cobra.Command, a []string) error {
			paths := map[string]string{"queue": "/api/queues/" + c.vh() + "/", "exchange": "/api/exchanges/" + c.vh() + "/",
				"user": "/api/users/", "vhost": "/api/vhosts/", "policy": "/api/policies/" + c.vh() + "/"}
			p, ok := paths[a[0]]
			if !ok {
				return fmt.Errorf("cannot delete %q", a[0])
			}
			_, err := c.do("DELETE", p+url.PathEscape(a[1]), nil)
			return err
		}}
	return []*cobra.Command{list, declare, del}
}

// newMessageCmds are purge, get, peek, publish and redrive.
func newMessageCmds(c *client) []*cobra.Command {
	purge := &cobra.Command{Use: "purge QUEUE", Args: cobra.ExactArgs(1), Short: "drop a queue's ready messages",
		RunE: func(_ *cobra.Command, a []string) error {
			_, err := c.do("DELETE", "/api/queues/"+c.vh()+"/"+url.PathEscape(a[0])+"/contents", nil)
			return err
		}}
	var count int
	var ackmode string
	get := &cobra.Command{Use: "get QUEUE", Args: cobra.ExactArgs(1), Short: "get messages (--ackmode ack_requeue_true by default: they stay)",
		RunE: func(_ *cobra.Command, a []string) error {
			raw, err := c.do("POST", "/api/queues/"+c.vh()+"/"+url.PathEscape(a[0])+"/get",
				map[string]any{"count": count, "ackmode": ackmode, "encoding": "auto"})
			if err != nil {
				return err
			}
			return c.show(raw, []string{"routing_key", "exchange", "redelivered", "payload_bytes", "payload"})
		}}
	get.Flags().IntVar(&count, "count", 1, "messages")
	get.Flags().StringVar(&ackmode, "ackmode", "ack_requeue_true", "ack_requeue_true, ack_requeue_false, reject_requeue_true, reject_requeue_false")
	peek := &cobra.Command{Use: "peek QUEUE", Args: cobra.ExactArgs(1), Short: "show the first messages, leaving them as they were",
		RunE: func(_ *cobra.Command, a []string) error {
			raw, err := c.do("POST", "/api/queues/"+c.vh()+"/"+url.PathEscape(a[0])+"/peek", map[string]any{"count": count})
			if err != nil {
				return err
			}
			return c.show(raw, []string{"routing_key", "exchange", "payload_bytes", "payload"})
		}}
	peek.Flags().IntVar(&count, "count", 1, "messages")
	var exch, key, payload string
	publish := &cobra.Command{Use: "publish", Short: "publish a message (--exchange, --routing-key, --payload)",
		RunE: func(_ *cobra.Command, _ []string) error {
			x := exch
			if x == "" {
				x = "amq.default"
			}
			raw, err := c.do("POST", "/api/exchanges/"+c.vh()+"/"+url.PathEscape(x)+"/publish",
				map[string]any{"properties": map[string]any{}, "routing_key": key, "payload": payload, "payload_encoding": "string"})
			if err != nil {
				return err
			}
			var r struct{ Routed bool }
			_ = json.Unmarshal(raw, &r)
			if !r.Routed {
				fmt.Fprintln(c.out, "published, not routed")
			}
			return nil
		}}
	publish.Flags().StringVar(&exch, "exchange", "", "exchange (the default one when empty)")
	publish.Flags().StringVar(&key, "routing-key", "", "routing key")
	publish.Flags().StringVar(&payload, "payload", "", "body")
	var rate float64
	var max int
	var tx, tk string
	redrive := &cobra.Command{Use: "redrive DLQ", Args: cobra.ExactArgs(1), Short: "move dead-lettered messages back where they died",
		RunE: func(cmd *cobra.Command, a []string) error {
			body := map[string]any{}
			if rate > 0 {
				body["rate"] = rate
			}
			if cmd.Flags().Changed("max") {
				body["max"] = max
			}
			if tx != "" || cmd.Flags().Changed("target-exchange") {
				body["target_exchange"], body["target_routing_key"] = tx, tk
			}
			raw, err := c.do("POST", "/api/queues/"+c.vh()+"/"+url.PathEscape(a[0])+"/redrive", body)
			if err != nil {
				return err
			}
			return c.show(raw, []string{"moved", "unroutable", "remaining"})
		}}
	redrive.Flags().Float64Var(&rate, "rate", 0, "messages per second at most (0: no limit)")
	redrive.Flags().IntVar(&max, "max", 0, "messages at most")
	redrive.Flags().StringVar(&tx, "target-exchange", "", "republish here instead of each message's x-first-death-exchange")
	redrive.Flags().StringVar(&tk, "target-routing-key", "", "with --target-exchange")
	return []*cobra.Command{purge, get, peek, publish, redrive}
}

// newCloseCmd is close connection.
func newCloseCmd(c *client) *cobra.Command {
	closeConn := &cobra.Command{Use: "close connection NAME", Args: cobra.ExactArgs(2), Short: "close a connection (320)",
		RunE: func(_ *cobra.Command, a []string) error {
			_, err := c.do("DELETE", "/api/connections/"+url.PathEscape(a[1]), nil)
			return err
		}}
	return closeConn
}

// newAccessCmds are add_user, set_user_tags, set_permissions and add_vhost.
func newAccessCmds(c *client) []*cobra.Command {
	var tags string
	addUser := &cobra.Command{Use: "add_user NAME PASSWORD", Args: cobra.ExactArgs(2), Short: "add a user (--tags)",
		RunE: func(_ *cobra.Command, a []string) error {
			_, err := c.do("PUT", "/api/users/"+url.PathEscape(a[0]), map[string]any{"password": a[1], "tags": tags})
			return err
		}}
	addUser.Flags().StringVar(&tags, "tags", "", "comma-separated tags")
	setTags := &cobra.Command{Use: "set_user_tags NAME [TAG...]", Args: cobra.MinimumNArgs(1), Short: "replace a user's tags",
		RunE: func(_ *cobra.Command, a []string) error {
			raw, err := c.do("GET", "/api/users/"+url.PathEscape(a[0]), nil)
			if err != nil {
				return err
			}
			var u map[string]any
			_ = json.Unmarshal(raw, &u)
			body := map[string]any{"tags": strings.Join(a[1:], ","), "password_hash": u["password_hash"], "hashing_algorithm": u["hashing_algorithm"]}
			_, err = c.do("PUT", "/api/users/"+url.PathEscape(a[0]), body)
			return err
		}}
	setPerms := &cobra.Command{Use: "set_permissions USER CONFIGURE WRITE READ", Args: cobra.ExactArgs(4), Short: "set a user's permissions in --vhost",
		RunE: func(_ *cobra.Command, a []string) error {
			_, err := c.do("PUT", "/api/permissions/"+c.vh()+"/"+url.PathEscape(a[0]), map[string]any{"configure": a[1], "write": a[2], "read": a[3]})
			return err
		}}
	return []*cobra.Command{addUser, setTags, setPerms, newAddVHostCmd(c)}
}

// newAddVHostCmd is add_vhost, rabbitmqctl's: --description, --tags and
// --default-queue-type, checked as RabbitMQ's CLI checks it
// (rabbitmq_cli's core/virtual_hosts.ex, v4.3.5).
// Only the flags given are sent: a vhost that exists keeps the rest.
func newAddVHostCmd(c *client) *cobra.Command {
	var desc, tags, dqt string
	cmd := &cobra.Command{Use: "add_vhost NAME", Args: cobra.ExactArgs(1), Short: "add a vhost, or change one (--description, --tags, --default-queue-type)",
		RunE: func(cmd *cobra.Command, a []string) error {
			body := map[string]any{}
			if cmd.Flags().Changed("description") {
				body["description"] = desc
			}
			if cmd.Flags().Changed("tags") {
				body["tags"] = tags
			}
			if cmd.Flags().Changed("default-queue-type") {
				switch dqt {
				case "":
					//lint:ignore ST1005 rabbitmqctl's text, printed after "Error: "
					return fmt.Errorf("Default queue type must not be an empty string")
				case "quorum", "stream", "classic":
				default:
					//lint:ignore ST1005 rabbitmqctl's text, printed after "Error: "
					return fmt.Errorf("Default queue type must be one of: quorum, stream, classic. Provided: %s", dqt)
				}
				body["default_queue_type"] = dqt
			}
			_, err := c.do("PUT", "/api/vhosts/"+url.PathEscape(a[0]), body)
			return err
		}}
	cmd.Flags().StringVar(&desc, "description", "", "description")
	cmd.Flags().StringVar(&tags, "tags", "", "comma-separated tags")
	cmd.Flags().StringVar(&dqt, "default-queue-type", "", "the type of the queues declared naming none: quorum, stream or classic")
	return cmd
}

// newPolicyCmds are set_policy and clear_policy.
func newPolicyCmds(c *client) []*cobra.Command {
	var prio int
	var applyTo string
	setPolicy := &cobra.Command{Use: "set_policy NAME PATTERN DEFINITION", Args: cobra.ExactArgs(3), Short: "set a policy (DEFINITION is JSON)",
		RunE: func(_ *cobra.Command, a []string) error {
			var def map[string]any
			if err := json.Unmarshal([]byte(a[2]), &def); err != nil {
				return fmt.Errorf("definition: %w", err)
			}
			_, err := c.do("PUT", "/api/policies/"+c.vh()+"/"+url.PathEscape(a[0]),
				map[string]any{"pattern": a[1], "definition": def, "priority": prio, "apply-to": applyTo})
			return err
		}}
	setPolicy.Flags().IntVar(&prio, "priority", 0, "priority")
	setPolicy.Flags().StringVar(&applyTo, "apply-to", "all", "queues, exchanges or all")
	clearPolicy := &cobra.Command{Use: "clear_policy NAME", Args: cobra.ExactArgs(1), Short: "remove a policy",
		RunE: func(_ *cobra.Command, a []string) error {
			_, err := c.do("DELETE", "/api/policies/"+c.vh()+"/"+url.PathEscape(a[0]), nil)
			return err
		}}
	return []*cobra.Command{setPolicy, clearPolicy}
}

// newDefinitionsCmds are export and import.
func newDefinitionsCmds(c *client) []*cobra.Command {
	export := &cobra.Command{Use: "export FILE", Args: cobra.ExactArgs(1), Short: "write the definitions to FILE",
		RunE: func(_ *cobra.Command, a []string) error {
			raw, err := c.do("GET", "/api/definitions", nil)
			if err != nil {
				return err
			}
			return os.WriteFile(a[0], raw, 0o644)
		}}
	imp := &cobra.Command{Use: "import FILE", Args: cobra.ExactArgs(1), Short: "import definitions from FILE (all or nothing)",
		RunE: func(_ *cobra.Command, a []string) error {
			b, err := os.ReadFile(a[0])
			if err != nil {
				return err
			}
			_, err = c.do("POST", "/api/definitions", b)
			return err
		}}
	return []*cobra.Command{export, imp}
}

// newStatusCmd is status.
func newStatusCmd(c *client) *cobra.Command {
	status := &cobra.Command{Use: "status", Short: "the node's versions, memory, disk and alarms",
		RunE: func(_ *cobra.Command, _ []string) error {
			raw, err := c.do("GET", "/api/nodes", nil)
			if err != nil {
				return err
			}
			return c.show(raw, []string{"name", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit", "disk_free_alarm", "uptime"})
		}}
	return status
}

// newClusterCmd is cluster status, join and leave.
func newClusterCmd(c *client) *cobra.Command {
	clusterCmd := &cobra.Command{Use: "cluster status|join|leave", Short: "the cluster: its members and leader; add or remove a node (on the leader's API)"}
	clusterCmd.AddCommand(
		&cobra.Command{Use: "status", Short: "this node's view of the cluster: state, leader, members", Args: cobra.NoArgs,
			RunE: func(_ *cobra.Command, _ []string) error {
				raw, err := c.do("GET", "/api/cluster", nil)
				if err != nil {
					return err
				}
				var st struct {
					Name, State, Leader string
					Term                uint64
					Members             []map[string]any
				}
				if err := json.Unmarshal(raw, &st); err != nil {
					return err
				}
				fmt.Fprintf(c.out, "node %s: %s, term %d, leader %s\n", st.Name, st.State, st.Term, st.Leader)
				b, _ := json.Marshal(st.Members)
				return c.show(b, []string{"name", "address", "voter", "leader"})
			}},
		&cobra.Command{Use: "join NAME ADDRESS", Short: "add a node started with --cluster-join (its name and --cluster-listen address)", Args: cobra.ExactArgs(2),
			RunE: func(_ *cobra.Command, a []string) error {
				_, err := c.do("PUT", "/api/cluster/members/"+url.PathEscape(a[0]), map[string]any{"address": a[1]})
				return err
			}},
		&cobra.Command{Use: "leave NAME", Short: "remove a node from the cluster", Args: cobra.ExactArgs(1),
			RunE: func(_ *cobra.Command, a []string) error {
				_, err := c.do("DELETE", "/api/cluster/members/"+url.PathEscape(a[0]), nil)
				return err
			}})
	return clusterCmd
}

// rabbitmqctl is the shim: RabbitMQ's commands that client test suites
// and health checks call, mapped onto the API.
func rabbitmqctl(c *client, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: rabbitmqctl COMMAND")
	}
	switch args[0] {
	case "ping", "await_startup", "node_health_check":
		_, err := c.do("GET", "/api/health/checks/alarms", nil)
		if err == nil {
			fmt.Fprintln(c.out, "Ping succeeded")
		}
		return err
	case "status":
		raw, err := c.do("GET", "/api/nodes", nil)
		if err != nil {
			return err
		}
		return c.show(raw, []string{"name", "running", "mem_used", "mem_limit", "disk_free"})
	case "set_vm_memory_high_watermark":
		if len(args) < 2 {
			return fmt.Errorf("usage: rabbitmqctl set_vm_memory_high_watermark FRACTION | absolute SIZE")
		}
		v := args[1]
		if v == "absolute" && len(args) > 2 {
			v = args[2]
		}
		_, err := c.do("PUT", "/api/vm-memory-high-watermark", map[string]any{"value": v})
		return err
	case "list_queues":
		cols := args[1:]
		if len(cols) == 0 {
			cols = []string{"name", "messages"}
		}
		raw, err := c.do("GET", "/api/queues/"+c.vh(), nil)
		if err != nil {
			return err
		}
		return c.show(raw, cols)
	case "list_connections":
		cols := args[1:]
		if len(cols) == 0 {
			cols = []string{"user", "peer_host", "peer_port", "state"}
		}
		raw, err := c.do("GET", "/api/connections", nil)
		if err != nil {
			return err
		}
		return c.show(raw, cols)
	case "close_connection":
		if len(args) < 2 {
			return fmt.Errorf("usage: rabbitmqctl close_connection NAME [REASON]")
		}
		_, err := c.do("DELETE", "/api/connections/"+url.PathEscape(args[1]), nil)
		return err
	}
	return fmt.Errorf("rabbitmqctl %s: not one of the commands railmq's shim takes (ping, status, list_queues, list_connections, close_connection, set_vm_memory_high_watermark)", args[0])
}

func main() {
	os.Exit(run(filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr))
}

// run is railmqctl called as name (rabbitmqctl or rabbitmq-diagnostics:
// the shim) with args; it returns the exit code. Commands print to
// stdout and errors go to stderr; cobra's help and usage go where cobra
// sends them, the process's stdout or stderr.
func run(name string, args []string, stdout, stderr io.Writer) int {
	c := &client{out: stdout}
	if name == "rabbitmqctl" || name == "rabbitmq-diagnostics" {
		root := newRoot(c) // for the flags and their environment defaults
		_ = root.ParseFlags(nil)
		// RabbitMQ's -p VHOST before the command.
		if len(args) > 1 && args[0] == "-p" {
			c.vhost, args = args[1], args[2:]
		}
		if err := rabbitmqctl(c, args); err != nil {
			fmt.Fprintln(stderr, "Error:", err)
			return 1
		}
		return 0
	}
	root := newRoot(c)
	root.SetArgs(args)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		return 1
	}
	return 0
}
