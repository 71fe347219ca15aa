package main

import (
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// rabbitKeys are the keys of RabbitMQ's config schemas, 4.1.0's and
// 3.10.8's, one a line ($name: any word), regenerated with
//
//	G="git -C rabbitmq-server"; for f in $($G ls-tree -r --name-only v4.1.0 | grep 'priv/schema/.*\.schema$'); do
//	  $G show v4.1.0:$f | tr '\n' ' ' | grep -o '{mapping, *"[^"]*"' | sed 's/.*"\([^"]*\)"/\1/'; done
//	for f in /usr/lib/rabbitmq/lib/rabbitmq_server-3.10.8/plugins/*/priv/schema/*.schema; do
//	  tr '\n' ' ' < $f | grep -o '{mapping, *"[^"]*"' | sed 's/.*"\([^"]*\)"/\1/'; done
//
// (both lists, sort -u).
//
//go:embed rabbitmq_keys.txt
var rabbitKeys string

// isRabbitKey reports whether RabbitMQ's schemas define the key.
func isRabbitKey(words []string) bool {
	for _, l := range strings.Split(rabbitKeys, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if _, ok := matchKey(l, words); ok {
			return true
		}
	}
	return false
}

// confFile is the config file to read: --config (RAILMQ_CONFIG), which
// must exist, or else RABBITMQ_CONFIG_FILE, which RabbitMQ reads as
// PATH.conf when it has no extension and which is skipped, with an info
// line, when it does not exist (RabbitMQ ignores a missing default
// config). "" when there is none.
func confFile(o *options, getenv func(string) string) (path string, notes []note, err error) {
	if o.config != "" {
		return o.config, nil, nil
	}
	p := getenv("RABBITMQ_CONFIG_FILE")
	if p == "" {
		return "", nil, nil
	}
	if filepath.Ext(p) == "" {
		p += ".conf"
	}
	if filepath.Ext(p) == ".config" {
		return "", []note{{zapcore.WarnLevel, "config file in Erlang terms (advanced.config format) not supported by railmq, ignored",
			[]zap.Field{zap.String("file", p), zap.String("variable", "RABBITMQ_CONFIG_FILE")}}}, nil
	}
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return "", []note{{zapcore.InfoLevel, "config file not found, ignored",
			[]zap.Field{zap.String("file", p), zap.String("variable", "RABBITMQ_CONFIG_FILE")}}}, nil
	}
	return p, nil, nil
}

// applyConf reads the config file, if any, into the flags of fs not in
// set (those the command line or the environment gave, which win). It
// returns the lines to log: the file read, keys ignored. A key or value
// it cannot read is an error naming the file, the line and the key.
func applyConf(fs *flag.FlagSet, o *options, set map[string]bool, getenv func(string) string) ([]note, error) {
	path, notes, err := confFile(o, getenv)
	if err != nil {
		return notes, err
	}
	var paths []string
	if path != "" {
		paths = append(paths, path)
	}
	more, err := additionalConfFiles(getenv("RABBITMQ_CONFIG_FILES"))
	if err != nil {
		return nil, fmt.Errorf("RABBITMQ_CONFIG_FILES: %w", err)
	}
	paths = append(paths, more...)
	if len(paths) == 0 {
		return notes, nil
	}
	var entries []confEntry
	for _, p := range paths {
		es, err := readConf(p)
		if err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		entries = append(entries, es...)
	}
	c := &confState{flags: map[string]confValue{}}
	for _, e := range entries {
		if err := c.read(fs, e); err != nil {
			return nil, fmt.Errorf("%s: %s = %s: %w", e.where(), e.key, e.value, err)
		}
	}
	c.finish(o, set, getenv)
	names := make([]string, 0, len(c.flags))
	for name := range c.flags {
		names = append(names, name)
	}
	sort.Strings(names)
	applied := 0
	for _, name := range names {
		v := c.flags[name]
		if set[name] {
			c.notes = append(c.notes, note{zapcore.DebugLevel, "config key overridden by a flag or variable", v.fields()})
			continue
		}
		if err := fs.Lookup(name).Value.Set(v.value); err != nil {
			return nil, fmt.Errorf("%s: %s = %s: %w", v.from.where(), v.from.key, v.from.value, err)
		}
		applied++
	}
	read := []zap.Field{zap.String("file", paths[0])}
	if len(paths) > 1 {
		read = append(read, zap.Strings("files", paths))
	}
	notes = append(notes, note{zapcore.InfoLevel, "config file read", append(read, zap.Int("keys", len(entries)), zap.Int("flags_set", applied))})
	return append(notes, c.notes...), nil
}

// additionalConfFiles are the files RABBITMQ_CONFIG_FILES names, read
// after the main file (later files win), as RabbitMQ reads them: a
// directory's files or a glob's, in name order. Unlike RabbitMQ, railmq
// has no default (RabbitMQ's is /etc/rabbitmq/conf.d/*.conf).
func additionalConfFiles(pattern string) ([]string, error) {
	if pattern == "" {
		return nil, nil
	}
	if st, err := os.Stat(pattern); err == nil && st.IsDir() {
		pattern = filepath.Join(pattern, "*")
	}
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && st.Mode().IsRegular() {
			files = append(files, m)
		}
	}
	sort.Strings(files)
	return files, nil
}

func (v confValue) fields() []zap.Field {
	return []zap.Field{zap.String("key", v.from.key), zap.String("file", v.from.file), zap.Int("line", v.from.line)}
}

// read takes one entry: a key of confKeys, railmq.FLAG (any flag of
// railmq's, as RAILMQ_FLAG), or a key railmq does not read, which is
// logged.
func (c *confState) read(fs *flag.FlagSet, e confEntry) error {
	for _, k := range confKeys {
		if vars, ok := matchKey(k.pattern, e.words); ok {
			return k.apply(c, e, vars)
		}
	}
	if len(e.words) == 2 && e.words[0] == "railmq" {
		name := strings.ReplaceAll(e.words[1], "_", "-")
		if f := fs.Lookup(name); f != nil && !cliOnly[name] {
			c.flags[name] = confValue{e.value, e}
			return nil
		}
	}
	msg := "unknown config key, ignored"
	if isRabbitKey(e.words) {
		msg = "config key not supported by railmq, ignored"
	}
	c.notes = append(c.notes, note{zapcore.WarnLevel, msg, confValue{from: e}.fields()})
	return nil
}

// cliOnly are flags no file or variable sets.
var cliOnly = map[string]bool{"config": true, "version": true}

// finish turns the gathered keys into flag values. o holds the options
// the command line and the environment gave (the cluster's address).
func (c *confState) finish(o *options, set map[string]bool, getenv func(string) string) {
	c.listeners("listen", c.tcp, c.tcpNone)
	c.listeners("tls-listen", c.ssl, c.sslNone)
	c.loopbackUsers()
	c.limit("vm-memory-high-watermark", "vm_memory_high_watermark", c.wmAbs, c.wmRel, func(f float64) string { return fraction(f) })
	c.limit("disk-free-limit", "disk_free_limit", c.diskAbs, c.diskRel, func(f float64) string { return "mem_relative:" + fraction(f) })
	if lvl := first(c.consoleLvl, c.defaultLvl); lvl != nil {
		l, _ := confLogLevel(lvl.value) // checked when read
		c.flags["log-level"] = confValue{l, lvl.from}
	}
	c.http("management-listen", c.mgmt, 15672)
	c.http("management-tls-listen", c.mgmtTLS, 15671)
	c.http("prometheus-listen", c.prom, 15692)
	if d := first(c.defs, c.mgmtDefs); d != nil {
		c.flags["load-definitions"] = *d
	}
	for i, flag := range []string{"tls-ca", "tls-cert", "tls-key"} {
		files := [][2]*confValue{c.tlsCA, c.tlsCert, c.tlsKey}[i]
		if f := first(files[0], files[1]); f != nil {
			c.flags[flag] = *f
		}
		if files[0] != nil && files[1] != nil && files[0].value != files[1].value {
			c.ignoredValue(files[1].from, "railmq serves one certificate on AMQPS and HTTPS: ssl_options' is used")
		}
	}
	c.cluster(o, set, getenv)
}

// first is the first of vs set.
func first(vs ...*confValue) *confValue {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}

func (c *confState) listeners(flag string, ls []confValue, none *confEntry) {
	switch {
	case none != nil:
		c.flags[flag] = confValue{"", *none}
	case len(ls) > 0:
		addrs := make([]string, len(ls))
		for i, l := range ls {
			addrs[i] = l.value
		}
		c.flags[flag] = confValue{strings.Join(addrs, ","), ls[0].from}
	}
}

// loopbackUsers: loopback_users = none, or the users set true (RabbitMQ's
// translation: guest is one only when loopback_users.guest = true).
func (c *confState) loopbackUsers() {
	switch {
	case c.loopbackNone != nil:
		c.flags["loopback-users"] = confValue{"", *c.loopbackNone}
	case len(c.loopback) > 0:
		on := map[string]bool{}
		var names []string
		for _, u := range c.loopback {
			on[u.name] = u.on // the last line for a user wins
		}
		for _, u := range c.loopback {
			if on[u.name] && !contains(names, u.name) {
				names = append(names, u.name)
			}
		}
		c.flags["loopback-users"] = confValue{strings.Join(names, ","), c.loopback[0].from}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// limit sets a resource limit from its .absolute key (bytes) or its
// .relative key; with both, .absolute wins with a warning, as in
// RabbitMQ.
func (c *confState) limit(flag, key string, abs, rel *confValue, relative func(float64) string) {
	switch {
	case abs != nil:
		n, _ := confBytes(abs.value) // checked when read
		c.flags[flag] = confValue{strconv.FormatInt(n, 10), abs.from}
		if rel != nil {
			c.notes = append(c.notes, note{zapcore.WarnLevel, "both " + key + ".absolute and " + key + ".relative are configured; " + key + ".absolute has precedence",
				rel.fields()})
		}
	case rel != nil:
		f, _ := confFloat(rel.value)
		c.flags[flag] = confValue{relative(f), rel.from}
	}
}

// http sets an HTTP listener from its .port and .ip keys; either alone
// takes the other's default (RabbitMQ's port, every interface).
func (c *confState) http(flag string, hp hostPort, port int) {
	v := first(hp.port, hp.ip)
	if v == nil {
		return
	}
	host := ""
	if hp.ip != nil {
		host = hp.ip.value
	}
	if hp.port != nil {
		port, _ = confPort(hp.port.value)
	}
	c.flags[flag] = confValue{net.JoinHostPort(host, strconv.Itoa(port)), v.from}
}

// defaultDistPort is RabbitMQ's inter-node port (RABBITMQ_DIST_PORT,
// 20000 above the AMQP port), railmq's --cluster-listen port by
// convention.
const defaultDistPort = 25672

// cluster turns cluster_formation.classic_config.nodes.N, RabbitMQ node
// names rabbit@host, into --cluster-peers: name=host:PORT. PORT is the
// port of --cluster-listen when it is given; else the file's
// distribution.listener.port_range (railmq listens on one port: .min);
// else RABBITMQ_DIST_PORT; else 25672. Without --cluster-listen the node
// listens on that port (on distribution.listener.interface, or every
// interface); without --node-name it is rabbit@ this host's short name,
// as RabbitMQ names a node. Without nodes, the distribution keys change
// nothing: a standalone node has no inter-node listener.
func (c *confState) cluster(o *options, set map[string]bool, getenv func(string) string) {
	if len(c.nodes) == 0 {
		return
	}
	from := c.nodes[0].from
	port := strconv.Itoa(defaultDistPort)
	if p, err := confPort(getenv("RABBITMQ_DIST_PORT")); err == nil {
		port = strconv.Itoa(p)
	}
	if d := first(c.distMin, c.distMax); d != nil {
		port = d.value
		if c.distMin != nil && c.distMax != nil && c.distMin.value != c.distMax.value {
			c.ignoredValue(c.distMax.from, "railmq listens on one inter-node port: port_range.min is used")
		}
	}
	listen := o.clusterListen
	if v, ok := c.flags["cluster-listen"]; ok && !set["cluster-listen"] {
		listen = v.value
	}
	if _, p, err := net.SplitHostPort(listen); err == nil && listen != "" {
		port = p
	} else if listen == "" {
		host := ""
		if c.distIP != nil {
			host = c.distIP.value
		}
		c.flags["cluster-listen"] = confValue{net.JoinHostPort(host, port), from}
	}
	peers := make([]string, 0, len(c.nodes))
	for _, n := range c.nodes {
		host, _ := confNodeHost(n.value) // checked when read
		peers = append(peers, n.value+"="+net.JoinHostPort(host, port))
	}
	c.flags["cluster-peers"] = confValue{strings.Join(peers, ","), from}
	if o.nodeName == "" {
		if _, ok := c.flags["node-name"]; !ok {
			c.flags["node-name"] = confValue{"rabbit@" + shortHostname(), from}
		}
	}
}

// shortHostname is this host's name up to its first dot, as RabbitMQ's
// default node name rabbit@HOST has it.
func shortHostname() string {
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(h, ".")
	return h
}

// configFilesRead are the config files applyConf read (the main file,
// then RABBITMQ_CONFIG_FILES'), for /api/nodes config_files and
// rabbitmq-diagnostics status.
func configFilesRead(o *options, getenv func(string) string) []string {
	var out []string
	if p, _, err := confFile(o, getenv); err == nil && p != "" {
		out = append(out, p)
	}
	more, _ := additionalConfFiles(getenv("RABBITMQ_CONFIG_FILES"))
	return append(out, more...)
}
