package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// Objects in rabbitmqadmin v2's grammar (github.com/rabbitmq/rabbitmqadmin-ng):
// verb first (declare queue --name q, delete queue --name q, purge queue
// --name q, list queues) or group first (queues declare --name q). Each
// change prints what it did; a missing object is said so, with the API's
// reason, and exits non-zero. railmqctl's first spellings (declare queue
// name=q durable=true, delete queue q, purge q) still work.

// kinds railmqctl declares and deletes, and the flags each takes.
var kindFlags = map[string][]string{
	"queue":    {"name", "type", "durable", "auto-delete", "arguments"},
	"exchange": {"name", "type", "durable", "auto-delete", "internal", "arguments"},
	"binding":  {"source", "destination", "destination-type", "routing-key", "arguments"},
	"user":     {"name", "user-password", "tags"},
	"vhost":    {"name", "description", "tags", "default-queue-type", "tracing"},
	"policy":   {"name", "pattern", "definition", "priority", "apply-to"},
}

// objFlags are the declare and delete flags' values.
type objFlags struct {
	name, typ, arguments, source, destination, destType, key string
	password, tags, description, dqt, pattern, definition    string
	applyTo                                                  string
	durable, autoDelete, internal, tracing, idempotent       bool
	priority                                                 int
}

// define adds the flags of kinds to cmd.
func (f *objFlags) define(cmd *cobra.Command, kinds ...string) {
	fl := cmd.Flags()
	seen := map[string]bool{}
	for _, k := range kinds {
		for _, n := range kindFlags[k] {
			if seen[n] {
				continue
			}
			seen[n] = true
			switch n {
			case "name":
				fl.StringVar(&f.name, "name", "", "the object's name")
			case "type":
				fl.StringVar(&f.typ, "type", "", "queue: classic, quorum or stream; exchange: direct, fanout, topic, headers, ... (default direct)")
			case "durable":
				f.durable = true
				fl.Var(boolArg{&f.durable}, "durable", "true or false: survives a restart (default true)")
			case "auto-delete":
				fl.Var(boolArg{&f.autoDelete}, "auto-delete", "true or false: deleted when its last consumer (queue) or binding (exchange) goes (default false)")
			case "internal":
				fl.Var(boolArg{&f.internal}, "internal", "true or false: an exchange clients cannot publish to (default false)")
			case "arguments":
				fl.StringVar(&f.arguments, "arguments", "", `optional arguments as JSON, e.g. '{"x-max-length":100}'`)
			case "source":
				fl.StringVar(&f.source, "source", "", "the exchange the binding is from")
			case "destination":
				fl.StringVar(&f.destination, "destination", "", "the queue or exchange the binding is to")
			case "destination-type":
				fl.StringVar(&f.destType, "destination-type", "queue", "queue or exchange")
			case "routing-key":
				fl.StringVar(&f.key, "routing-key", "", "the binding's routing key")
			case "user-password":
				// v2's --password after "declare user" / "users declare"
				// (run rewrites it: the global --password logs in).
				fl.StringVar(&f.password, "user-password", "", "the new user's password (also --password after the command)")
			case "tags":
				fl.StringVar(&f.tags, "tags", "", "comma-separated tags")
			case "description":
				fl.StringVar(&f.description, "description", "", "description")
			case "default-queue-type":
				fl.StringVar(&f.dqt, "default-queue-type", "", "the type of the queues declared naming none: quorum, stream or classic")
			case "tracing":
				fl.Var(boolArg{&f.tracing}, "tracing", "true or false: the firehose (amq.rabbitmq.trace) on")
			case "pattern":
				fl.StringVar(&f.pattern, "pattern", "", "the names the policy applies to (a regular expression)")
			case "definition":
				fl.StringVar(&f.definition, "definition", "", `the policy's keys as JSON, e.g. '{"max-length":100}'`)
			case "priority":
				fl.IntVar(&f.priority, "priority", 0, "the policy's priority")
			case "apply-to":
				fl.StringVar(&f.applyTo, "apply-to", "all", "queues, exchanges or all")
			}
		}
	}
}

// boolArg is a flag that takes true or false as its value, as
// rabbitmqadmin v2's (--durable true).
type boolArg struct{ p *bool }

func (b boolArg) String() string {
	if b.p == nil {
		return "false"
	}
	return strconv.FormatBool(*b.p)
}

func (b boolArg) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q: true or false", s)
	}
	*b.p = v
	return nil
}

func (b boolArg) Type() string { return "true|false" }

// rewriteUserPassword turns v2's "declare user ... --password P" (and
// "users declare") into --user-password, the global --password being the
// login's; v2 puts global flags before the command, so one after it is
// the new user's.
func rewriteUserPassword(args []string) []string {
	for i := 0; i+1 < len(args); i++ {
		if (args[i] == "declare" && args[i+1] == "user") || (args[i] == "users" && args[i+1] == "declare") {
			out := slices.Clone(args)
			for j := i + 2; j < len(out); j++ {
				if out[j] == "--password" {
					out[j] = "--user-password"
				} else if v, ok := strings.CutPrefix(out[j], "--password="); ok {
					out[j] = "--user-password=" + v
				}
			}
			return out
		}
	}
	return args
}

// notFound says a missing object is missing, with the API's reason.
func (c *client) notFound(err error, kind, name string, inVHost bool) error {
	var se *statusError
	if !errors.As(err, &se) || se.Code != http.StatusNotFound {
		return err
	}
	if inVHost {
		return fmt.Errorf("no %s '%s' in vhost '%s': %w", kind, name, c.vhost, err)
	}
	return fmt.Errorf("no %s '%s': %w", kind, name, err)
}

// where is " in vhost 'v'" for the kinds that live in one.
func (c *client) where(kind string) string {
	if kind == "user" || kind == "vhost" {
		return ""
	}
	return " in vhost '" + c.vhost + "'"
}

func jsonFlag(name, s string) (map[string]any, error) {
	m := map[string]any{}
	if s == "" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("--%s: not a JSON object: %w", name, err)
	}
	return m, nil
}

// declareKind declares kind from the flags (or, when extra holds
// KEY=VALUE arguments, from those as railmqctl's first spelling).
func (c *client) declareKind(cmd *cobra.Command, kind string, f *objFlags, extra []string) error {
	changed := cmd.Flags().Changed
	var body map[string]any
	if len(extra) > 0 { // name=q durable=true ...
		body = kv(extra)
		f.name, _ = body["name"].(string)
		f.source, _ = body["source"].(string)
		f.destination, _ = body["destination"].(string)
		if body["destination_type"] == "exchange" {
			f.destType = "exchange"
		}
		f.key, _ = body["routing_key"].(string)
	} else {
		args, err := jsonFlag("arguments", f.arguments)
		if err != nil {
			return err
		}
		switch kind {
		case "queue":
			if f.typ != "" {
				args["x-queue-type"] = f.typ
			}
			body = map[string]any{"durable": f.durable, "auto_delete": f.autoDelete, "arguments": args}
		case "exchange":
			if f.typ == "" {
				f.typ = "direct"
			}
			body = map[string]any{"type": f.typ, "durable": f.durable, "auto_delete": f.autoDelete, "internal": f.internal, "arguments": args}
		case "binding":
			body = map[string]any{"routing_key": f.key, "arguments": args}
		case "user":
			body = map[string]any{"password": f.password, "tags": f.tags}
		case "vhost":
			body = map[string]any{}
			for flag, key := range map[string]string{"description": "description", "tags": "tags", "default-queue-type": "default_queue_type"} {
				if changed(flag) {
					body[key] = map[string]string{"description": f.description, "tags": f.tags, "default-queue-type": f.dqt}[flag]
				}
			}
			if changed("tracing") {
				body["tracing"] = f.tracing
			}
		case "policy":
			def, err := jsonFlag("definition", f.definition)
			if err != nil {
				return err
			}
			body = map[string]any{"pattern": f.pattern, "definition": def, "priority": f.priority, "apply-to": f.applyTo}
		}
	}
	if kind == "binding" {
		return c.declareBinding(f, body)
	}
	paths := map[string]string{"queue": "/api/queues/" + c.vh() + "/", "exchange": "/api/exchanges/" + c.vh() + "/",
		"user": "/api/users/", "vhost": "/api/vhosts/", "policy": "/api/policies/" + c.vh() + "/"}
	p, ok := paths[kind]
	if !ok {
		return fmt.Errorf("cannot declare %q (queue, exchange, binding, user, vhost or policy)", kind)
	}
	if f.name == "" {
		return fmt.Errorf("declare %s: --name is required", kind)
	}
	if _, err := c.do("PUT", p+url.PathEscape(f.name), body); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "declared %s '%s'%s\n", kind, f.name, c.where(kind))
	return nil
}

func (c *client) declareBinding(f *objFlags, body map[string]any) error {
	if f.source == "" || f.destination == "" {
		return fmt.Errorf("declare binding: --source and --destination are required")
	}
	dt := "q"
	if f.destType == "exchange" {
		dt = "e"
	}
	_, err := c.do("POST", "/api/bindings/"+c.vh()+"/e/"+url.PathEscape(f.source)+"/"+dt+"/"+url.PathEscape(f.destination), body)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "declared binding from exchange '%s' to %s '%s' with routing key '%s' in vhost '%s'\n", f.source, f.destType, f.destination, f.key, c.vhost)
	return nil
}

// deleteKind deletes kind name.
func (c *client) deleteKind(kind, name string, f *objFlags) error {
	if kind == "binding" {
		return c.deleteBinding(f)
	}
	paths := map[string]string{"queue": "/api/queues/" + c.vh() + "/", "exchange": "/api/exchanges/" + c.vh() + "/",
		"user": "/api/users/", "vhost": "/api/vhosts/", "policy": "/api/policies/" + c.vh() + "/"}
	p, ok := paths[kind]
	if !ok {
		return fmt.Errorf("cannot delete %q (queue, exchange, binding, user, vhost or policy)", kind)
	}
	if name == "" {
		return fmt.Errorf("delete %s: --name is required", kind)
	}
	if _, err := c.do("DELETE", p+url.PathEscape(name), nil); err != nil {
		var se *statusError
		if f.idempotent && errors.As(err, &se) && se.Code == http.StatusNotFound {
			fmt.Fprintf(c.out, "no %s '%s'%s: nothing to delete\n", kind, name, c.where(kind))
			return nil
		}
		return c.notFound(err, kind, name, c.where(kind) != "")
	}
	fmt.Fprintf(c.out, "deleted %s '%s'%s\n", kind, name, c.where(kind))
	return nil
}

// deleteBinding deletes the bindings from --source to --destination with
// --routing-key (whatever their arguments).
func (c *client) deleteBinding(f *objFlags) error {
	if f.source == "" || f.destination == "" {
		return fmt.Errorf("delete binding: --source and --destination are required")
	}
	dt := "q"
	if f.destType == "exchange" {
		dt = "e"
	}
	base := "/api/bindings/" + c.vh() + "/e/" + url.PathEscape(f.source) + "/" + dt + "/" + url.PathEscape(f.destination)
	raw, err := c.do("GET", base, nil)
	if err != nil {
		return c.notFound(err, "exchange or "+f.destType, f.source+"' or '"+f.destination, true)
	}
	var bs []struct {
		RoutingKey    string `json:"routing_key"`
		PropertiesKey string `json:"properties_key"`
	}
	if err := json.Unmarshal(raw, &bs); err != nil {
		return err
	}
	n := 0
	for _, b := range bs {
		if b.RoutingKey != f.key {
			continue
		}
		if _, err := c.do("DELETE", base+"/"+url.PathEscape(b.PropertiesKey), nil); err != nil {
			return err
		}
		n++
	}
	if n == 0 && !f.idempotent {
		return fmt.Errorf("no binding from exchange '%s' to %s '%s' with routing key '%s' in vhost '%s'", f.source, f.destType, f.destination, f.key, c.vhost)
	}
	fmt.Fprintf(c.out, "deleted %d binding(s) from exchange '%s' to %s '%s' with routing key '%s' in vhost '%s'\n", n, f.source, f.destType, f.destination, f.key, c.vhost)
	return nil
}

// purgeQueue drops a queue's ready messages.
func (c *client) purgeQueue(name string) error {
	if name == "" {
		return fmt.Errorf("purge queue: --name is required")
	}
	n, _, err := c.queueDepth(name)
	if err != nil {
		return err
	}
	if _, err := c.do("DELETE", "/api/queues/"+c.vh()+"/"+url.PathEscape(name)+"/contents", nil); err != nil {
		return c.notFound(err, "queue", name, true)
	}
	fmt.Fprintf(c.out, "purged queue '%s' in vhost '%s' (it held %d messages)\n", name, c.vhost, n)
	return nil
}

// listKind prints kind's list (listColumns, or cols).
func (c *client) listKind(kind string, cols []string) error {
	def, ok := listColumns[kind]
	if !ok {
		return fmt.Errorf("unknown kind %q (queues, exchanges, bindings, connections, channels, consumers, users, vhosts, policies, permissions, nodes)", kind)
	}
	if len(cols) == 0 {
		cols = def
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
}

// newObjectCmds are list, declare and delete.
func newObjectCmds(c *client) []*cobra.Command {
	list := &cobra.Command{Use: "list KIND [COLUMN...]", Short: "list queues, exchanges, bindings, connections, channels, consumers, users, vhosts, policies, permissions, nodes",
		Args: cobra.MinimumNArgs(1), RunE: func(_ *cobra.Command, a []string) error { return c.listKind(a[0], a[1:]) }}
	var df objFlags
	declare := &cobra.Command{Use: "declare queue|exchange|binding|user|vhost|policy --name NAME [FLAGS]",
		Short: "declare an object (v2: declare queue --name q --type quorum; or KEY=VALUE... as before)",
		Args:  cobra.MinimumNArgs(1), RunE: func(cmd *cobra.Command, a []string) error { return c.declareKind(cmd, a[0], &df, a[1:]) }}
	df.define(declare, "queue", "exchange", "binding", "user", "vhost", "policy")
	var xf objFlags
	del := &cobra.Command{Use: "delete queue|exchange|binding|user|vhost|policy --name NAME", Short: "delete an object (or: delete KIND NAME)",
		Args: cobra.RangeArgs(1, 2), RunE: func(_ *cobra.Command, a []string) error {
			if len(a) == 2 {
				xf.name = a[1]
			}
			return c.deleteKind(a[0], xf.name, &xf)
		}}
	del.Flags().StringVar(&xf.name, "name", "", "the object's name")
	del.Flags().BoolVar(&xf.idempotent, "idempotently", false, "a missing object is not an error")
	xf.define(del, "binding")
	return []*cobra.Command{list, declare, del}
}

// newPurgeCmd is purge queue --name q (and purge QUEUE).
func newPurgeCmd(c *client) *cobra.Command {
	var name string
	cmd := &cobra.Command{Use: "purge queue --name QUEUE", Short: "drop a queue's ready messages (or: purge QUEUE)", Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			switch {
			case cmd.Flags().Changed("name") && (len(a) == 0 || a[0] == "queue"):
			case len(a) == 1:
				name = a[0]
			default:
				return fmt.Errorf("purge: give the queue: purge queue --name QUEUE")
			}
			return c.purgeQueue(name)
		}}
	cmd.Flags().StringVar(&name, "name", "", "the queue")
	return cmd
}

// newDefinitionsCmds are export and import: export definitions --file F
// (or --stdout), import definitions --file F (or --stdin), and the first
// spellings export FILE, import FILE.
func newDefinitionsCmds(c *client) []*cobra.Command {
	export, imp := defsExport(c, "export [definitions] [FILE]"), defsImport(c, "import [definitions] [FILE]")
	return []*cobra.Command{export, imp}
}

// defsFile is the file of export FILE, export definitions FILE, or --file.
func defsFile(a []string, file string) (string, error) {
	if len(a) > 0 && a[0] == "definitions" {
		a = a[1:]
	}
	switch {
	case len(a) == 1 && file == "":
		return a[0], nil
	case len(a) == 0:
		return file, nil
	}
	return "", fmt.Errorf("give one file: --file FILE")
}

func defsExport(c *client, use string) *cobra.Command {
	var file string
	var stdout bool
	cmd := &cobra.Command{Use: use, Short: "write the definitions to --file (or --stdout)", Args: cobra.MaximumNArgs(2),
		RunE: func(_ *cobra.Command, a []string) error {
			f, err := defsFile(a, file)
			if err != nil {
				return err
			}
			if f == "" && !stdout {
				return fmt.Errorf("export: --file FILE or --stdout")
			}
			raw, err := c.do("GET", "/api/definitions", nil)
			if err != nil {
				return err
			}
			if stdout {
				_, err := c.out.Write(append(raw, '\n'))
				return err
			}
			if err := os.WriteFile(f, raw, 0o644); err != nil {
				return err
			}
			what, _ := definitionsSummary(raw)
			fmt.Fprintf(c.out, "exported definitions (%s) to %s\n", what, f)
			return nil
		}}
	cmd.Flags().StringVar(&file, "file", "", "the file to write")
	cmd.Flags().BoolVar(&stdout, "stdout", false, "write to stdout")
	return cmd
}

func defsImport(c *client, use string) *cobra.Command {
	var file string
	var stdin bool
	var interval = defaultInterval
	cmd := &cobra.Command{Use: use, Short: "import definitions from --file (or --stdin), all or nothing; progress on stderr", Args: cobra.MaximumNArgs(2),
		RunE: func(_ *cobra.Command, a []string) error {
			f, err := defsFile(a, file)
			if err != nil {
				return err
			}
			if stdin {
				f = "-"
			}
			if f == "" {
				return fmt.Errorf("import: --file FILE or --stdin")
			}
			return c.importDefinitions(f, interval)
		}}
	cmd.Flags().StringVar(&file, "file", "", "the file to read")
	cmd.Flags().BoolVar(&stdin, "stdin", false, "read from stdin")
	cmd.Flags().DurationVar(&interval, "interval", defaultInterval, "how often to print progress (on stderr)")
	return cmd
}
