package main

import (
	"fmt"
	"net/url"
	"slices"

	"github.com/spf13/cobra"
)

// rabbitmqadmin v2's permissions, streams, shovels and federation groups
// (rabbitmqadmin-ng src/cli/mod.rs), on RabbitMQ's management API.

// newPermissionsCmd is permissions list|declare|delete; declare is
// rabbitmqctl's set_permissions.
func newPermissionsCmd(c *client) *cobra.Command {
	g := &cobra.Command{Use: "permissions", Short: "user permissions: list, declare, delete"}
	var user, conf, write, read string
	declare := &cobra.Command{Use: "declare --username U --configure RE --write RE --read RE", Short: "grant a user permissions in --vhost", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "target-user", "configure", "write", "read"); err != nil {
				return err
			}
			return c.change("PUT", "/api/permissions/"+c.vh()+"/"+url.PathEscape(user), map[string]any{"configure": conf, "write": write, "read": read},
				fmt.Sprintf("set permissions of user '%s' in vhost '%s': configure '%s', write '%s', read '%s'", user, c.vhost, conf, write, read),
				fmt.Sprintf("user '%s' or vhost '%s'", user, c.vhost), false)
		}}
	declare.Flags().StringVar(&user, "target-user", "", "the user (--username or --user after the command)")
	declare.Flags().StringVar(&conf, "configure", "", "name pattern for configuration access")
	declare.Flags().StringVar(&write, "write", "", "name pattern for write access")
	declare.Flags().StringVar(&read, "read", "", "name pattern for read access")
	var duser string
	var idem bool
	del := &cobra.Command{Use: "delete --username U", Short: "revoke a user's permissions in --vhost", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "target-user"); err != nil {
				return err
			}
			what := fmt.Sprintf("permissions of user '%s' in vhost '%s'", duser, c.vhost)
			return c.change("DELETE", "/api/permissions/"+c.vh()+"/"+url.PathEscape(duser), nil, "deleted "+what, what, idem)
		}}
	del.Flags().StringVar(&duser, "target-user", "", "the user (--username or --user after the command)")
	del.Flags().BoolVar(&idem, "idempotently", false, "missing permissions are not an error")
	g.AddCommand(listCmd("list [COLUMN...]", "list permissions", func() error { return c.listKind("permissions", nil) }), declare, del)
	return g
}

// queuesOfType keeps the queues of type t.
func queuesOfType(t string) func([]map[string]any) []map[string]any {
	return func(in []map[string]any) []map[string]any {
		var out []map[string]any
		for _, q := range in {
			if q["type"] == t {
				out = append(out, q)
			}
		}
		return out
	}
}

// newStreamsCmd is streams list|declare|delete: queues of type stream.
func newStreamsCmd(c *client) *cobra.Command {
	g := &cobra.Command{Use: "streams", Short: "streams: list, declare, delete"}
	var name, expiration, args string
	var maxBytes, segBytes int64
	declare := &cobra.Command{Use: "declare --name S --expiration 7D [--max-length-bytes N] [--stream-max-segment-size-bytes N]", Short: "declare a stream", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name", "expiration"); err != nil {
				return err
			}
			a, err := jsonFlag("arguments", args)
			if err != nil {
				return err
			}
			a["x-queue-type"] = "stream"
			a["x-max-age"] = expiration
			if cmd.Flags().Changed("max-length-bytes") {
				a["x-max-length-bytes"] = maxBytes
			}
			if cmd.Flags().Changed("stream-max-segment-size-bytes") {
				a["x-stream-max-segment-size-bytes"] = segBytes
			}
			return c.change("PUT", "/api/queues/"+c.vh()+"/"+url.PathEscape(name), map[string]any{"durable": true, "auto_delete": false, "arguments": a},
				fmt.Sprintf("declared stream '%s' in vhost '%s'", name, c.vhost), fmt.Sprintf("vhost '%s'", c.vhost), false)
		}}
	declare.Flags().StringVar(&name, "name", "", "name")
	declare.Flags().StringVar(&expiration, "expiration", "", "how long messages are kept (x-max-age): 12h, 7D, 1M, ...")
	declare.Flags().Int64Var(&maxBytes, "max-length-bytes", 0, "maximum stream length in bytes")
	declare.Flags().Int64Var(&segBytes, "stream-max-segment-size-bytes", 0, "maximum segment file length in bytes")
	declare.Flags().StringVar(&args, "arguments", "", "additional stream arguments (JSON)")
	var dname string
	var idem bool
	del := &cobra.Command{Use: "delete --name S", Short: "delete a stream", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name"); err != nil {
				return err
			}
			what := fmt.Sprintf("stream '%s' in vhost '%s'", dname, c.vhost)
			return c.change("DELETE", "/api/queues/"+c.vh()+"/"+url.PathEscape(dname), nil, "deleted "+what, what, idem)
		}}
	del.Flags().StringVar(&dname, "name", "", "stream name")
	del.Flags().BoolVar(&idem, "idempotently", false, "a missing stream is not an error")
	g.AddCommand(listCmd("list", "the streams in --vhost", func() error {
		return c.listRows("/api/queues/"+c.vh(), []string{"vhost", "name", "type", "messages", "consumers", "arguments"}, queuesOfType("stream"))
	}), declare, del)
	return g
}

// shovelFlags are shovels declare_amqp091's.
type shovelFlags struct {
	name, srcURI, dstURI, ackMode, srcQ, srcX, srcKey, dstQ, dstX, dstKey, props string
	srcPre, dstPre                                                               bool
	delay                                                                        int
}

// value is the shovel's runtime parameter value (RabbitMQ's dynamic
// shovel keys, as mgmt/parameters.go validates them).
func (f *shovelFlags) value(cmd *cobra.Command) (map[string]any, error) {
	if (f.srcQ == "") == (f.srcX == "") {
		return nil, fmt.Errorf("shovels declare_amqp091: one of --source-queue and --source-exchange is required")
	}
	if (f.dstQ == "") == (f.dstX == "") {
		return nil, fmt.Errorf("shovels declare_amqp091: one of --destination-queue and --destination-exchange is required")
	}
	switch f.ackMode {
	case "on-confirm", "on-publish", "no-ack":
	default:
		return nil, fmt.Errorf("--ack-mode %q: on-confirm, on-publish or no-ack", f.ackMode)
	}
	v := map[string]any{"src-protocol": "amqp091", "src-uri": f.srcURI, "dest-protocol": "amqp091", "dest-uri": f.dstURI,
		"ack-mode": f.ackMode, "reconnect-delay": f.delay}
	if f.srcQ != "" {
		v["src-queue"] = f.srcQ
	} else {
		v["src-exchange"] = f.srcX
		if cmd.Flags().Changed("source-exchange-routing-key") {
			v["src-exchange-key"] = f.srcKey
		}
	}
	if f.dstQ != "" {
		v["dest-queue"] = f.dstQ
	} else {
		v["dest-exchange"] = f.dstX
		if cmd.Flags().Changed("destination-exchange-routing-key") {
			v["dest-exchange-key"] = f.dstKey
		}
	}
	if f.srcPre {
		v["src-predeclared"] = true
	}
	if f.dstPre {
		v["dest-predeclared"] = true
	}
	if props, err := jsonFlag("publish-properties", f.props); err != nil {
		return nil, err
	} else if len(props) > 0 {
		v["dest-publish-properties"] = props
	}
	return v, nil
}

// newShovelsCmd is shovels list|list_all|declare_amqp091|delete: dynamic
// shovels, runtime parameters of the shovel component.
func newShovelsCmd(c *client) *cobra.Command {
	g := &cobra.Command{Use: "shovels", Short: "dynamic shovels: list, list_all, declare_amqp091, delete"}
	cols := []string{"name", "vhost", "type", "state", "src_uri", "src_queue", "src_exchange", "dest_uri", "dest_queue", "dest_exchange"}
	var f shovelFlags
	declare := &cobra.Command{Use: "declare_amqp091 --name N --source-uri URI --destination-uri URI (--source-queue Q | --source-exchange X) (--destination-queue Q | --destination-exchange X)",
		Short: "declare a dynamic shovel (AMQP 0-9-1 both sides)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name", "source-uri", "destination-uri"); err != nil {
				return err
			}
			v, err := f.value(cmd)
			if err != nil {
				return err
			}
			return c.change("PUT", "/api/parameters/shovel/"+c.vh()+"/"+url.PathEscape(f.name),
				map[string]any{"vhost": c.vhost, "component": "shovel", "name": f.name, "value": v},
				fmt.Sprintf("declared shovel '%s' in vhost '%s'", f.name, c.vhost), fmt.Sprintf("vhost '%s'", c.vhost), false)
		}}
	fl := declare.Flags()
	fl.StringVarP(&f.name, "name", "n", "", "the shovel's name")
	fl.StringVar(&f.srcURI, "source-uri", "", "where it consumes (amqp://...)")
	fl.StringVar(&f.dstURI, "destination-uri", "", "where it publishes (amqp://...)")
	fl.StringVar(&f.ackMode, "ack-mode", "on-confirm", "on-confirm, on-publish or no-ack")
	fl.StringVar(&f.srcQ, "source-queue", "", "the queue it consumes from")
	fl.StringVar(&f.srcX, "source-exchange", "", "the exchange it consumes from (through a queue of its own)")
	fl.StringVar(&f.srcKey, "source-exchange-routing-key", "", "with --source-exchange")
	fl.StringVar(&f.dstQ, "destination-queue", "", "the queue it publishes to")
	fl.StringVar(&f.dstX, "destination-exchange", "", "the exchange it publishes to")
	fl.StringVar(&f.dstKey, "destination-exchange-routing-key", "", "with --destination-exchange")
	fl.BoolVar(&f.srcPre, "predeclared-source", false, "the source topology is declared already (the shovel declares nothing)")
	fl.BoolVar(&f.dstPre, "predeclared-destination", false, "the destination topology is declared already")
	fl.IntVar(&f.delay, "reconnect-delay", 5, "seconds between reconnection attempts")
	fl.StringVar(&f.props, "publish-properties", "", "message properties the shovel sets (JSON)")
	var dname string
	var idem bool
	del := &cobra.Command{Use: "delete --name N", Short: "delete a dynamic shovel", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name"); err != nil {
				return err
			}
			what := fmt.Sprintf("shovel '%s' in vhost '%s'", dname, c.vhost)
			return c.change("DELETE", "/api/parameters/shovel/"+c.vh()+"/"+url.PathEscape(dname), nil, "deleted "+what, what, idem)
		}}
	del.Flags().StringVar(&dname, "name", "", "shovel name (identifier)")
	del.Flags().BoolVar(&idem, "idempotently", false, "a missing shovel is not an error")
	g.AddCommand(listCmd("list", "the shovels in --vhost and their state", func() error { return c.listRows("/api/shovels/"+c.vh(), cols, nil) }),
		listCmd("list_all", "the shovels of every vhost", func() error { return c.listRows("/api/shovels", cols, nil) }), declare, del)
	return g
}

// newFederationCmd is federation list_all_upstreams|declare_upstream|
// delete_upstream|list_all_links (list_upstreams and list_links too).
func newFederationCmd(c *client) *cobra.Command {
	g := &cobra.Command{Use: "federation", Short: "federation upstreams and links: list_all_upstreams, declare_upstream, delete_upstream, list_all_links"}
	var name, uri, ackMode, queue, ctag, exch, qtype, cleanup, chanMode string
	var delay, prefetch, maxHops, ttl, msgTTL int64
	var trust, nowait bool
	declare := &cobra.Command{Use: "declare_upstream --name N --uri URI [flags]", Short: "declare a federation upstream in --vhost", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name", "uri"); err != nil {
				return err
			}
			switch ackMode {
			case "on-confirm", "on-publish", "no-ack":
			default:
				return fmt.Errorf("--ack-mode %q: on-confirm, on-publish or no-ack", ackMode)
			}
			v := map[string]any{"uri": uri, "reconnect-delay": delay, "trust-user-id": trust, "prefetch-count": prefetch, "ack-mode": ackMode}
			ch := cmd.Flags().Changed
			for flag, kv := range map[string]struct {
				key string
				val any
			}{"queue-name": {"queue", queue}, "consumer-tag": {"consumer-tag", ctag}, "exchange-name": {"exchange", exch}, "queue-type": {"queue-type", qtype},
				"max-hops": {"max-hops", maxHops}, "bind-using-nowait": {"bind-nowait", nowait}, "resource-cleanup-mode": {"resource-cleanup-mode", cleanup},
				"channel-use-mode": {"channel-use-mode", chanMode}, "ttl": {"expires", ttl}, "message-ttl": {"message-ttl", msgTTL}} {
				if ch(flag) {
					v[kv.key] = kv.val
				}
			}
			return c.change("PUT", "/api/parameters/federation-upstream/"+c.vh()+"/"+url.PathEscape(name),
				map[string]any{"vhost": c.vhost, "component": "federation-upstream", "name": name, "value": v},
				fmt.Sprintf("declared federation upstream '%s' in vhost '%s'", name, c.vhost), fmt.Sprintf("vhost '%s'", c.vhost), false)
		}}
	fl := declare.Flags()
	fl.StringVar(&name, "name", "", "upstream name (identifier)")
	fl.StringVar(&uri, "uri", "", "the URI to connect to this upstream with")
	fl.Int64Var(&delay, "reconnect-delay", 5, "reconnection delay in seconds")
	fl.Var(boolArg{&trust}, "trust-user-id", "true or false: pass through validated user-ids from the upstream (default true)")
	trust = true
	fl.Int64Var(&prefetch, "prefetch-count", 1000, "the prefetch of the internal consumers")
	fl.StringVar(&ackMode, "ack-mode", "on-confirm", "on-confirm, on-publish or no-ack")
	fl.StringVar(&queue, "queue-name", "", "queue federation: the queue's name on the upstream")
	fl.StringVar(&ctag, "consumer-tag", "", "queue federation: the internal consumer's tag")
	fl.StringVar(&exch, "exchange-name", "", "exchange federation: the exchange's name on the upstream")
	fl.StringVar(&qtype, "queue-type", "", "exchange federation: the internal queue's type (classic, quorum)")
	fl.Int64Var(&maxHops, "max-hops", 1, "exchange federation: hops a message may take")
	fl.Var(boolArg{&nowait}, "bind-using-nowait", "true or false: exchange federation binds without waiting")
	fl.StringVar(&cleanup, "resource-cleanup-mode", "default", "default or never")
	fl.StringVar(&chanMode, "channel-use-mode", "multiple", "multiple or single")
	fl.Int64Var(&ttl, "ttl", 0, "exchange federation: the internal queue's expiry (ms)")
	fl.Int64Var(&msgTTL, "message-ttl", 0, "exchange federation: the internal queue's message TTL (ms)")
	var dname string
	var idem bool
	del := &cobra.Command{Use: "delete_upstream --name N", Short: "delete a federation upstream in --vhost", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name"); err != nil {
				return err
			}
			what := fmt.Sprintf("federation upstream '%s' in vhost '%s'", dname, c.vhost)
			return c.change("DELETE", "/api/parameters/federation-upstream/"+c.vh()+"/"+url.PathEscape(dname), nil, "deleted "+what, what, idem)
		}}
	del.Flags().StringVar(&dname, "name", "", "upstream name (identifier)")
	del.Flags().BoolVar(&idem, "idempotently", false, "a missing upstream is not an error")
	upstreams := listCmd("list_all_upstreams", "the federation upstreams of every vhost", func() error {
		return c.listRows("/api/parameters/federation-upstream", []string{"name", "vhost", "value.uri", "value.ack-mode", "value.prefetch-count", "value.reconnect-delay"}, nil)
	})
	upstreams.Aliases = []string{"list_upstreams"}
	links := listCmd("list_all_links", "the federation links of every vhost", func() error {
		return c.listRows("/api/federation-links", []string{"vhost", "upstream", "type", "exchange", "queue", "status", "uri"}, nil)
	})
	links.Aliases = []string{"list_links"}
	g.AddCommand(upstreams, declare, del, links)
	return g
}

// newMoreGroupCmds are the groups of params.go and shovelfed.go.
func newMoreGroupCmds(c *client) []*cobra.Command {
	out := []*cobra.Command{newParametersCmd(c), newGlobalParametersCmd(c), newFeatureFlagsCmd(c), newOperatorPoliciesCmd(c),
		newPermissionsCmd(c), newStreamsCmd(c), newShovelsCmd(c), newFederationCmd(c)}
	return append(out, newLimitsCmds(c)...)
}

// argsRewritten applies the rewrites of v2's flags after the command
// that railmqctl spells differently (--password of declare user,
// --username of permissions and user_limits).
func argsRewritten(args []string) []string {
	return rewriteTargetUser(rewriteUserPassword(rewriteVerbFirst(args)))
}

// verbFirst are rabbitmqadmin v2's verb-first spellings of the groups'
// commands (list vhost_limits, declare vhost_limit, delete stream, ...):
// "verb kind" and the group command it is.
var verbFirst = map[[2]string][2]string{
	{"list", "parameters"}: {"parameters", "list"}, {"list", "operator_policies"}: {"operator_policies", "list"},
	{"list", "vhost_limits"}: {"vhost_limits", "list"}, {"list", "user_limits"}: {"user_limits", "list"},
	{"list", "feature_flags"}: {"feature_flags", "list"},
	{"declare", "parameter"}:  {"parameters", "set"}, {"declare", "operator_policy"}: {"operator_policies", "declare"},
	{"declare", "vhost_limit"}: {"vhost_limits", "declare"}, {"declare", "user_limit"}: {"user_limits", "declare"},
	{"declare", "permissions"}: {"permissions", "declare"}, {"declare", "stream"}: {"streams", "declare"},
	{"delete", "parameter"}: {"parameters", "clear"}, {"delete", "operator_policy"}: {"operator_policies", "delete"},
	{"delete", "vhost_limit"}: {"vhost_limits", "delete"}, {"delete", "user_limit"}: {"user_limits", "delete"},
	{"delete", "permissions"}: {"permissions", "delete"}, {"delete", "stream"}: {"streams", "delete"},
	{"delete", "shovel"}: {"shovels", "delete"},
}

// rewriteVerbFirst turns the first "verb kind" of verbFirst in args into
// its group command.
func rewriteVerbFirst(args []string) []string {
	for i := 0; i+1 < len(args); i++ {
		if g, ok := verbFirst[[2]string{args[i], args[i+1]}]; ok {
			out := slices.Clone(args)
			out[i], out[i+1] = g[0], g[1]
			return out
		}
	}
	return args
}
