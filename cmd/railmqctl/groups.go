package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

// rabbitmqadmin v2's group-first commands (queues list, exchanges
// declare, definitions export, show overview, health_check local_alarms,
// ...), on the same handlers as the verb-first ones.

// groupKinds are the groups whose objects are declared and deleted:
// group name, the kind it declares.
var groupKinds = []struct{ group, kind string }{
	{"exchanges", "exchange"}, {"bindings", "binding"}, {"users", "user"}, {"vhosts", "vhost"}, {"policies", "policy"},
}

// kindGroup is a group's list, declare and delete.
func kindGroup(c *client, group, kind string) []*cobra.Command {
	list := &cobra.Command{Use: "list [COLUMN...]", Short: "list " + group, RunE: func(_ *cobra.Command, a []string) error { return c.listKind(group, a) }}
	var df objFlags
	declare := &cobra.Command{Use: "declare", Short: "declare a " + kind, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.declareKind(cmd, kind, &df, nil) }}
	df.define(declare, kind)
	var xf objFlags
	del := &cobra.Command{Use: "delete", Short: "delete a " + kind, Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error { return c.deleteKind(kind, xf.name, &xf) }}
	if kind == "binding" {
		xf.define(del, "binding")
	} else {
		del.Flags().StringVar(&xf.name, "name", "", "the "+kind+"'s name")
	}
	del.Flags().BoolVar(&xf.idempotent, "idempotently", false, "a missing "+kind+" is not an error")
	return []*cobra.Command{list, declare, del}
}

// addQueueV2 adds list, declare, delete, purge and show to the queues
// group (which holds rabbitmq-queues' membership commands too).
func addQueueV2(c *client, queues *cobra.Command) {
	cmds := kindGroup(c, "queues", "queue")
	var name string
	purge := &cobra.Command{Use: "purge --name QUEUE", Short: "drop a queue's ready messages", Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error { return c.purgeQueue(name) }}
	purge.Flags().StringVar(&name, "name", "", "the queue")
	var sname string
	show := &cobra.Command{Use: "show --name QUEUE", Short: "one queue's figures", Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			raw, err := c.do("GET", "/api/queues/"+c.vh()+"/"+url.PathEscape(sname), nil)
			if err != nil {
				return c.notFound(err, "queue", sname, true)
			}
			return c.showKeys(raw, []key{{"name", "name"}, {"vhost", "vhost"}, {"type", "type"}, {"durable", "durable"}, {"auto_delete", "auto_delete"},
				{"state", "state"}, {"arguments", "arguments"}, {"policy", "policy"}, {"consumers", "consumers"}, {"messages", "messages"},
				{"messages_ready", "messages_ready"}, {"messages_unacknowledged", "messages_unacknowledged"}, {"message_bytes", "message_bytes"},
				{"memory", "memory"}, {"publish rate", "message_stats.publish_details.rate"}, {"deliver rate", "message_stats.deliver_get_details.rate"},
				{"ack rate", "message_stats.ack_details.rate"}})
		}}
	show.Flags().StringVar(&sname, "name", "", "the queue")
	queues.AddCommand(append(cmds, purge, show)...)
}

// newGroupCmds are the groups other than queues, show and health_check.
func newGroupCmds(c *client) []*cobra.Command {
	var out []*cobra.Command
	for _, g := range groupKinds {
		gc := &cobra.Command{Use: g.group, Short: g.group + ": list, declare, delete"}
		gc.AddCommand(kindGroup(c, g.group, g.kind)...)
		out = append(out, gc)
	}
	for _, g := range []string{"channels", "consumers", "nodes"} { // permissions: shovelfed.go
		gc := &cobra.Command{Use: g, Short: g + ": list"}
		gc.AddCommand(&cobra.Command{Use: "list [COLUMN...]", Short: "list " + g, RunE: func(_ *cobra.Command, a []string) error { return c.listKind(g, a) }})
		out = append(out, gc)
	}
	conns := &cobra.Command{Use: "connections", Short: "connections: list, close"}
	var cname string
	closeConn := &cobra.Command{Use: "close --name NAME", Short: "close a connection (320)", Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error { return c.closeConnection(cname) }}
	closeConn.Flags().StringVar(&cname, "name", "", "the connection's name (connections list shows them)")
	conns.AddCommand(&cobra.Command{Use: "list [COLUMN...]", Short: "list connections", RunE: func(_ *cobra.Command, a []string) error { return c.listKind("connections", a) }}, closeConn)
	defs := &cobra.Command{Use: "definitions", Short: "definitions: export, import"}
	defs.AddCommand(defsExport(c, "export"), defsImport(c, "import"))
	show := &cobra.Command{Use: "show", Short: "show overview"}
	show.AddCommand(&cobra.Command{Use: "overview", Short: "the node's product, version, totals and rates", Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			raw, err := c.do("GET", "/api/overview", nil)
			if err != nil {
				return err
			}
			return c.showKeys(raw, []key{{"Product name", "product_name"}, {"Product version", "product_version"}, {"RabbitMQ version (API)", "rabbitmq_version"},
				{"Node", "node"}, {"Connections (total)", "object_totals.connections"}, {"AMQP 0-9-1 channels (total)", "object_totals.channels"},
				{"Queues and streams (total)", "object_totals.queues"}, {"Consumers (total)", "object_totals.consumers"},
				{"Messages (total)", "queue_totals.messages"}, {"Messages ready for delivery (total)", "queue_totals.messages_ready"},
				{"Messages delivered but unacknowledged by consumers (total)", "queue_totals.messages_unacknowledged"},
				{"Publishing (ingress) rate (global)", "message_stats.publish_details.rate"},
				{"Consumer delivery (egress) rate (global)", "message_stats.deliver_get_details.rate"},
				{"Consumer acknowledgement rate (global)", "message_stats.ack_details.rate"}, {"Memory used", "memory_used"}})
		}})
	return append(out, conns, defs, show, newHealthCmd(c))
}

func (c *client) closeConnection(name string) error {
	if name == "" {
		return fmt.Errorf("close connection: --name is required")
	}
	if _, err := c.do("DELETE", "/api/connections/"+url.PathEscape(name), nil); err != nil {
		return c.notFound(err, "connection", name, false)
	}
	fmt.Fprintf(c.out, "closed connection '%s'\n", name)
	return nil
}

// newHealthCmd is health_check: the management API's health checks,
// exiting non-zero with the check's reason when one fails.
func newHealthCmd(c *client) *cobra.Command {
	hc := &cobra.Command{Use: "health_check", Short: "health checks: local_alarms, cluster_wide_alarms, port_listener, protocol_listener"}
	check := func(use, short, path string) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs, RunE: func(_ *cobra.Command, _ []string) error {
			if _, err := c.do("GET", path, nil); err != nil {
				return err
			}
			fmt.Fprintln(c.out, "passed")
			return nil
		}}
	}
	var port, proto string
	pl := &cobra.Command{Use: "port_listener --port PORT", Short: "fails unless the node listens on PORT", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return check("", "", "/api/health/checks/port-listener/"+url.PathEscape(port)).RunE(cmd, nil)
		}}
	pl.Flags().StringVar(&port, "port", "5672", "the port")
	pr := &cobra.Command{Use: "protocol_listener --protocol PROTOCOL", Short: "fails unless the node listens for PROTOCOL (amqp)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return check("", "", "/api/health/checks/protocol-listener/"+url.PathEscape(proto)).RunE(cmd, nil)
		}}
	pr.Flags().StringVar(&proto, "protocol", "amqp", "the protocol")
	hc.AddCommand(check("local_alarms", "fails when the node has an alarm in effect", "/api/health/checks/local-alarms"),
		check("cluster_wide_alarms", "fails when a node of the cluster has an alarm in effect", "/api/health/checks/alarms"), pl, pr)
	return hc
}

// key is one line of a key/value table: its label and the JSON path.
type key struct{ label, path string }

// showKeys prints one JSON object as a key/value table (or the JSON).
func (c *client) showKeys(raw []byte, keys []key) error {
	if c.format == "json" {
		_, err := c.out.Write(append(raw, '\n'))
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	rows := make([]map[string]any, len(keys))
	for i, k := range keys {
		var v any = m
		for _, p := range strings.Split(k.path, ".") {
			mm, _ := v.(map[string]any)
			v = mm[p]
		}
		rows[i] = map[string]any{"key": k.label, "value": v, "path": k.path}
	}
	return c.table(rows, []string{"key", "value"}, func(row map[string]any, col string) string {
		if col == "key" {
			return row["key"].(string)
		}
		return c.cell(row["path"].(string), row["value"])
	})
}
