package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// rabbitmqadmin v2's groups for runtime parameters, global parameters,
// feature flags, operator policies, limits, permissions and streams
// (rabbitmqadmin-ng src/cli/mod.rs: the command and flag names are its),
// each on RabbitMQ's management API routes.

// change makes one request that changes what; did is printed when it is
// done. A 404 is "no what", or nothing to do with --idempotently.
func (c *client) change(method, path string, body any, did, what string, idempotent bool) error {
	if _, err := c.do(method, path, body); err != nil {
		var se *statusError
		if errors.As(err, &se) && se.Code == http.StatusNotFound {
			if idempotent {
				fmt.Fprintf(c.out, "no %s: nothing to delete\n", what)
				return nil
			}
			return fmt.Errorf("no %s: %w", what, err)
		}
		return err
	}
	fmt.Fprintln(c.out, did)
	return nil
}

// listRows prints the list at path as a table of cols, its items passed
// through keep (nil: all) first; --format json prints what is kept.
func (c *client) listRows(path string, cols []string, keep func([]map[string]any) []map[string]any) error {
	raw, err := c.do("GET", path, nil)
	if err != nil {
		return err
	}
	if keep != nil {
		var items []map[string]any
		if err := json.Unmarshal(raw, &items); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		items = keep(items)
		if items == nil {
			items = []map[string]any{}
		}
		if raw, err = json.Marshal(items); err != nil {
			return err
		}
	}
	return c.show(raw, cols)
}

// jsonValue is a --value: JSON, or else (a global parameter such as
// cluster_name is a string) the text as a string.
func jsonValue(flag, s string, stringOK bool) (any, error) {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		if stringOK {
			return s, nil
		}
		return nil, fmt.Errorf("--%s %q: not JSON: %w", flag, s, err)
	}
	return v, nil
}

// required fails naming the flags of cmd that were not given.
func required(cmd *cobra.Command, names ...string) error {
	var missing []string
	for _, n := range names {
		if !cmd.Flags().Changed(n) {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: %v required", cmd.CommandPath(), missing)
	}
	return nil
}

func listCmd(use, short string, run func() error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs, RunE: func(_ *cobra.Command, _ []string) error { return run() }}
}

// newParametersCmd is parameters list|list_all|list_in|set|clear
// (declare and delete are v2's aliases of set and clear).
func newParametersCmd(c *client) *cobra.Command {
	g := &cobra.Command{Use: "parameters", Short: "runtime parameters: list, list_all, list_in, set (declare), clear (delete)"}
	cols := []string{"name", "vhost", "component", "value"}
	var comp string
	list := &cobra.Command{Use: "list [--component C]", Short: "the runtime parameters in --vhost (of --component)", Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if comp != "" {
				return c.listRows("/api/parameters/"+url.PathEscape(comp)+"/"+c.vh(), cols, nil)
			}
			return c.listRows("/api/parameters", cols, func(in []map[string]any) []map[string]any {
				var out []map[string]any
				for _, p := range in {
					if p["vhost"] == c.vhost {
						out = append(out, p)
					}
				}
				return out
			})
		}}
	list.Flags().StringVar(&comp, "component", "", "component (for example: federation-upstream, shovel)")
	var inComp string
	listIn := &cobra.Command{Use: "list_in --component C", Short: "the runtime parameters of --component in --vhost", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "component"); err != nil {
				return err
			}
			return c.listRows("/api/parameters/"+url.PathEscape(inComp)+"/"+c.vh(), cols, nil)
		}}
	listIn.Flags().StringVar(&inComp, "component", "", "component (for example: federation-upstream, shovel)")
	var name, sComp, value string
	set := &cobra.Command{Use: "set --component C --name N --value JSON", Aliases: []string{"declare"}, Short: "set a runtime parameter", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name", "component", "value"); err != nil {
				return err
			}
			v, err := jsonValue("value", value, false)
			if err != nil {
				return err
			}
			return c.change("PUT", "/api/parameters/"+url.PathEscape(sComp)+"/"+c.vh()+"/"+url.PathEscape(name),
				map[string]any{"vhost": c.vhost, "component": sComp, "name": name, "value": v},
				fmt.Sprintf("set runtime parameter '%s' of component '%s' in vhost '%s'", name, sComp, c.vhost),
				fmt.Sprintf("component '%s' or vhost '%s'", sComp, c.vhost), false)
		}}
	set.Flags().StringVar(&name, "name", "", "parameter's name")
	set.Flags().StringVar(&sComp, "component", "", "component (for example: federation-upstream)")
	set.Flags().StringVar(&value, "value", "", "parameter's value (JSON)")
	var cName, cComp string
	var idem bool
	clr := &cobra.Command{Use: "clear --component C --name N", Aliases: []string{"delete"}, Short: "clear (delete) a runtime parameter", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name", "component"); err != nil {
				return err
			}
			what := fmt.Sprintf("runtime parameter '%s' of component '%s' in vhost '%s'", cName, cComp, c.vhost)
			return c.change("DELETE", "/api/parameters/"+url.PathEscape(cComp)+"/"+c.vh()+"/"+url.PathEscape(cName), nil, "cleared "+what, what, idem)
		}}
	clr.Flags().StringVar(&cName, "name", "", "parameter's name")
	clr.Flags().StringVar(&cComp, "component", "", "component (for example: federation-upstream)")
	clr.Flags().BoolVar(&idem, "idempotently", false, "a missing parameter is not an error")
	g.AddCommand(list, listCmd("list_all", "the runtime parameters of every vhost", func() error { return c.listRows("/api/parameters", cols, nil) }),
		listIn, set, clr)
	return g
}

// newGlobalParametersCmd is global_parameters list|set|clear.
func newGlobalParametersCmd(c *client) *cobra.Command {
	g := &cobra.Command{Use: "global_parameters", Short: "global runtime parameters: list, set (declare), clear (delete)"}
	var name, value string
	set := &cobra.Command{Use: "set --name N --value V", Aliases: []string{"declare"}, Short: "set a global runtime parameter (cluster_name, ...)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name", "value"); err != nil {
				return err
			}
			v, _ := jsonValue("value", value, true)
			return c.change("PUT", "/api/global-parameters/"+url.PathEscape(name), map[string]any{"name": name, "value": v},
				fmt.Sprintf("set global runtime parameter '%s'", name), fmt.Sprintf("global runtime parameter '%s'", name), false)
		}}
	set.Flags().StringVar(&name, "name", "", "parameter's name")
	set.Flags().StringVar(&value, "value", "", "parameter's value (JSON, or a string)")
	var cName string
	var idem bool
	clr := &cobra.Command{Use: "clear --name N", Aliases: []string{"delete"}, Short: "clear (delete) a global runtime parameter", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name"); err != nil {
				return err
			}
			what := fmt.Sprintf("global runtime parameter '%s'", cName)
			return c.change("DELETE", "/api/global-parameters/"+url.PathEscape(cName), nil, "cleared "+what, what, idem)
		}}
	clr.Flags().StringVar(&cName, "name", "", "parameter's name")
	clr.Flags().BoolVar(&idem, "idempotently", false, "a missing parameter is not an error")
	g.AddCommand(listCmd("list", "the global runtime parameters", func() error { return c.listRows("/api/global-parameters", []string{"name", "value"}, nil) }),
		set, clr)
	return g
}

// newFeatureFlagsCmd is feature_flags list|enable|enable_all.
func newFeatureFlagsCmd(c *client) *cobra.Command {
	g := &cobra.Command{Use: "feature_flags", Short: "feature flags: list, enable, enable_all"}
	var name string
	enable := &cobra.Command{Use: "enable --name FLAG", Short: "enable a feature flag", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name"); err != nil {
				return err
			}
			return c.change("PUT", "/api/feature-flags/"+url.PathEscape(name)+"/enable", map[string]any{},
				fmt.Sprintf("enabled feature flag '%s'", name), fmt.Sprintf("feature flag '%s'", name), false)
		}}
	enable.Flags().StringVar(&name, "name", "", "feature flag name (identifier)")
	// enable_all is rabbitmq_http_client's enable_all_stable_feature_flags:
	// every stable flag not yet enabled.
	enableAll := listCmd("enable_all", "enable every stable feature flag", func() error {
		raw, err := c.do("GET", "/api/feature-flags", nil)
		if err != nil {
			return err
		}
		var flags []struct{ Name, State, Stability string }
		if err := json.Unmarshal(raw, &flags); err != nil {
			return fmt.Errorf("/api/feature-flags: %w", err)
		}
		n := 0
		for _, f := range flags {
			if f.State == "enabled" || (f.Stability != "" && f.Stability != "stable") {
				continue
			}
			if _, err := c.do("PUT", "/api/feature-flags/"+url.PathEscape(f.Name)+"/enable", map[string]any{}); err != nil {
				return fmt.Errorf("enable feature flag '%s': %w", f.Name, err)
			}
			n++
		}
		fmt.Fprintf(c.out, "enabled %d feature flag(s); every stable feature flag is enabled\n", n)
		return nil
	})
	g.AddCommand(listCmd("list", "the feature flags and their state", func() error {
		return c.listRows("/api/feature-flags", []string{"name", "state", "stability", "provided_by", "desc"}, nil)
	}), enable, enableAll)
	return g
}

// newOperatorPoliciesCmd is operator_policies list|declare|delete.
func newOperatorPoliciesCmd(c *client) *cobra.Command {
	g := &cobra.Command{Use: "operator_policies", Short: "operator policies: list, declare, delete"}
	var f objFlags
	declare := &cobra.Command{Use: "declare --name N --pattern RE --apply-to queues --definition JSON [--priority P]", Aliases: []string{"update", "set"},
		Short: "create or update an operator policy", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name", "pattern", "definition"); err != nil {
				return err
			}
			def, err := jsonFlag("definition", f.definition)
			if err != nil {
				return err
			}
			return c.change("PUT", "/api/operator-policies/"+c.vh()+"/"+url.PathEscape(f.name),
				map[string]any{"pattern": f.pattern, "definition": def, "priority": f.priority, "apply-to": f.applyTo},
				fmt.Sprintf("declared operator policy '%s' in vhost '%s'", f.name, c.vhost), fmt.Sprintf("vhost '%s'", c.vhost), false)
		}}
	f.define(declare, "policy")
	declare.Flags().Lookup("apply-to").Usage = "queues, classic_queues, quorum_queues, streams, exchanges or all"
	var name string
	var idem bool
	del := &cobra.Command{Use: "delete --name N", Short: "delete an operator policy", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name"); err != nil {
				return err
			}
			what := fmt.Sprintf("operator policy '%s' in vhost '%s'", name, c.vhost)
			return c.change("DELETE", "/api/operator-policies/"+c.vh()+"/"+url.PathEscape(name), nil, "deleted "+what, what, idem)
		}}
	del.Flags().StringVar(&name, "name", "", "operator policy name")
	del.Flags().BoolVar(&idem, "idempotently", false, "a missing policy is not an error")
	g.AddCommand(listCmd("list", "the operator policies in --vhost", func() error {
		return c.listRows("/api/operator-policies/"+c.vh(), listColumns["policies"], nil)
	}), declare, del)
	return g
}

// flattenLimits turns the API's [{"vhost"|"user": X, "value": {name: n}}]
// into one row per limit: X, name, value.
func flattenLimits(key string) func([]map[string]any) []map[string]any {
	return func(in []map[string]any) []map[string]any {
		var out []map[string]any
		for _, e := range in {
			vals, _ := e["value"].(map[string]any)
			for _, n := range sortedKeys(vals) {
				out = append(out, map[string]any{key: e[key], "name": n, "value": vals[n]})
			}
		}
		return out
	}
}

// limitValue is a limit's --value: an integer, as v2 parses it.
func limitValue(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("'%s' is not a valid integer value", s)
	}
	return v, nil
}

// newLimitsCmds are vhost_limits and user_limits: list, declare, delete.
func newLimitsCmds(c *client) []*cobra.Command {
	vl := &cobra.Command{Use: "vhost_limits", Short: "virtual host limits (max-connections, max-queues): list, declare, delete"}
	var vName, vValue string
	vDeclare := &cobra.Command{Use: "declare --name LIMIT --value N", Short: "set a limit of --vhost", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name", "value"); err != nil {
				return err
			}
			v, err := limitValue(vValue)
			if err != nil {
				return err
			}
			return c.change("PUT", "/api/vhost-limits/"+c.vh()+"/"+url.PathEscape(vName), map[string]any{"value": v},
				fmt.Sprintf("set limit %s = %d on vhost '%s'", vName, v, c.vhost), fmt.Sprintf("vhost '%s'", c.vhost), false)
		}}
	vDeclare.Flags().StringVar(&vName, "name", "", "limit name (max-connections, max-queues)")
	vDeclare.Flags().StringVar(&vValue, "value", "", "limit value (-1: no limit)")
	var vdName string
	vDelete := &cobra.Command{Use: "delete --name LIMIT", Short: "clear a limit of --vhost", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "name"); err != nil {
				return err
			}
			what := fmt.Sprintf("limit %s on vhost '%s'", vdName, c.vhost)
			return c.change("DELETE", "/api/vhost-limits/"+c.vh()+"/"+url.PathEscape(vdName), nil, "cleared "+what, what, false)
		}}
	vDelete.Flags().StringVar(&vdName, "name", "", "limit name (max-connections, max-queues)")
	vl.AddCommand(listCmd("list", "the limits of every vhost", func() error {
		return c.listRows("/api/vhost-limits", []string{"vhost", "name", "value"}, flattenLimits("vhost"))
	}), vDeclare, vDelete)

	ul := &cobra.Command{Use: "user_limits", Short: "per-user limits (max-connections, max-channels): list, declare, delete"}
	var luser string
	uList := &cobra.Command{Use: "list [--username U]", Short: "the users' limits (or one user's)", Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			path := "/api/user-limits"
			if luser != "" {
				path += "/" + url.PathEscape(luser)
			}
			return c.listRows(path, []string{"user", "name", "value"}, flattenLimits("user"))
		}}
	var user, uName, uValue string
	uDeclare := &cobra.Command{Use: "declare --username U --name LIMIT --value N", Short: "set a user's limit", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "target-user", "name", "value"); err != nil {
				return err
			}
			v, err := limitValue(uValue)
			if err != nil {
				return err
			}
			return c.change("PUT", "/api/user-limits/"+url.PathEscape(user)+"/"+url.PathEscape(uName), map[string]any{"value": v},
				fmt.Sprintf("set limit %s = %d on user '%s'", uName, v, user), fmt.Sprintf("user '%s'", user), false)
		}}
	var duser, duName string
	uDelete := &cobra.Command{Use: "delete --username U --name LIMIT", Short: "clear a user's limit", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "target-user", "name"); err != nil {
				return err
			}
			what := fmt.Sprintf("limit %s on user '%s'", duName, duser)
			return c.change("DELETE", "/api/user-limits/"+url.PathEscape(duser)+"/"+url.PathEscape(duName), nil, "cleared "+what, what, false)
		}}
	for _, x := range []struct {
		cmd  *cobra.Command
		user *string
	}{{uList, &luser}, {uDeclare, &user}, {uDelete, &duser}} {
		x.cmd.Flags().StringVar(x.user, "target-user", "", "the user (--username or --user after the command)")
	}
	uDeclare.Flags().StringVar(&uName, "name", "", "limit name (max-connections, max-channels)")
	uDeclare.Flags().StringVar(&uValue, "value", "", "limit value (-1: no limit)")
	uDelete.Flags().StringVar(&duName, "name", "", "limit name (max-connections, max-channels)")
	ul.AddCommand(uList, uDeclare, uDelete)
	return []*cobra.Command{vl, ul}
}

// sortedKeys are m's keys in order.
func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// rewriteTargetUser turns v2's --username (or --user) after the
// commands that name a user (permissions declare|delete, user_limits
// list|declare|delete) into --target-user: before the command, as v2
// puts global flags, --username is the login's.
func rewriteTargetUser(args []string) []string {
	for i := 0; i+1 < len(args); i++ {
		g, cmd := args[i], args[i+1]
		if !((g == "permissions" && (cmd == "declare" || cmd == "delete")) || (g == "user_limits" && (cmd == "list" || cmd == "declare" || cmd == "delete"))) {
			continue
		}
		out := slices.Clone(args)
		for j := i + 2; j < len(out); j++ {
			for _, f := range []string{"--username", "--user"} {
				if out[j] == f {
					out[j] = "--target-user"
				} else if v, ok := strings.CutPrefix(out[j], f+"="); ok {
					out[j] = "--target-user=" + v
				}
			}
		}
		return out
	}
	return args
}

// secondsOrDuration is a flag that takes seconds (5, 0.5), as
// rabbitmqadmin v2's --timeout, or a Go duration (10s, 2m).
type secondsOrDuration struct{ p *time.Duration }

func (d secondsOrDuration) String() string {
	if d.p == nil {
		return "0s"
	}
	return d.p.String()
}

func (d secondsOrDuration) Set(s string) error {
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 {
		*d.p = time.Duration(f * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("%q: seconds or a duration such as 2m", s)
	}
	*d.p = v
	return nil
}

func (d secondsOrDuration) Type() string { return "seconds|duration" }
