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
	"time"

	"github.com/spf13/cobra"
)

type client struct {
	base, user, pass, vhost, format string
	out                             io.Writer // what the commands print
	errOut                          io.Writer // progress of long work
	// timeout bounds a request (0: none). Long work (redrive, import)
	// runs with none: see longwork.go.
	timeout        time.Duration
	timeoutGiven   bool // --timeout: it bounds long work too
	nonInteractive bool
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
	resp, err := (&http.Client{Timeout: c.timeout}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		e := &statusError{Code: resp.StatusCode, Status: resp.Status, Body: out}
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
	Body           []byte // the answer as it came
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
	return c.table(items, cols, func(it map[string]any, col string) string {
		var v any = it
		for _, p := range strings.Split(col, ".") {
			m, _ := v.(map[string]any)
			v = m[p]
		}
		return c.cell(col, v)
	})
}

var listColumns = map[string][]string{
	"queues":      {"vhost", "name", "type", "messages", "messages_ready", "messages_unacknowledged", "message_bytes", "consumers", "policy"},
	"exchanges":   {"vhost", "name", "type", "durable", "auto_delete", "internal"},
	"bindings":    {"vhost", "source", "destination", "destination_type", "routing_key", "properties_key"},
	"connections": {"name", "user", "vhost", "state"},
	"channels":    {"name", "user", "vhost"},
	"consumers":   {"queue.name", "consumer_tag", "prefetch_count", "ack_required"},
	"users":       {"name", "tags"},
	"vhosts":      {"name", "description", "messages"},
	"nodes":       {"name", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit", "disk_free_alarm", "uptime"},
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
	root := &cobra.Command{Use: "railmqctl", Short: "Manage a railmq broker through its management HTTP API", SilenceUsage: true,
		Version: version}
	root.SetVersionTemplate("railmqctl {{.Version}}\n")
	addGlobalFlags(root, c)

	var cmds []*cobra.Command
	cmds = append(cmds, newObjectCmds(c)...)
	cmds = append(cmds, newMessageCmds(c)...)
	cmds = append(cmds, newCloseCmd(c))
	cmds = append(cmds, newAccessCmds(c)...)
	cmds = append(cmds, newPolicyCmds(c)...)
	cmds = append(cmds, newDefinitionsCmds(c)...)
	cmds = append(cmds, newStatusCmd(c), newClusterCmd(c), newQueuesCmd(c), newMoveCmd(c))
	cmds = append(cmds, newGroupCmds(c)...)
	cmds = append(cmds, newMoreGroupCmds(c)...)
	root.AddCommand(cmds...)
	return root
}

// newMessageCmds are purge, get, peek, publish and redrive.
func newMessageCmds(c *client) []*cobra.Command {
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
	var interval time.Duration
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
			return c.redrive(a[0], body, interval)
		}}
	redrive.Flags().Float64Var(&rate, "rate", 0, "messages per second at most (0: no limit)")
	redrive.Flags().DurationVar(&interval, "interval", defaultInterval, "how often to print progress (on stderr)")
	redrive.Flags().IntVar(&max, "max", 0, "messages at most")
	redrive.Flags().StringVar(&tx, "target-exchange", "", "republish here instead of each message's x-first-death-exchange")
	redrive.Flags().StringVar(&tk, "target-routing-key", "", "with --target-exchange")
	return []*cobra.Command{newPurgeCmd(c), get, peek, publish, redrive}
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

func main() {
	os.Exit(run(filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr))
}

// run is railmqctl called as name (rabbitmqctl or rabbitmq-diagnostics:
// the shim) with args; it returns the exit code. Commands print to
// stdout and errors go to stderr; cobra's help and usage go where cobra
// sends them, the process's stdout or stderr.
func run(name string, args []string, stdout, stderr io.Writer) int {
	if name == "rabbitmqctl" || name == "rabbitmq-diagnostics" {
		return runShim(name, args, stdout, stderr)
	}
	c := &client{out: stdout, errOut: stderr, timeout: requestTimeout}
	root := newRoot(c)
	root.SetArgs(argsRewritten(args))
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		return exitCode(err)
	}
	return 0
}
