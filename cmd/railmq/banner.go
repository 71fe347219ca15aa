package main

import (
	"fmt"
	"net"
	"os"
	"strings"

	"go.uber.org/zap"
)

// node is the node's name as the broker gives it (broker.Server.NodeName):
// --node-name in a cluster, railmq@HOST otherwise. Log lines carry it.
func (o *options) node() string {
	if o.nodeName != "" {
		return o.nodeName
	}
	h, _ := os.Hostname()
	return "railmq@" + h
}

// logBanner logs, once the broker serves, what it serves and where: the
// version, the node, the data directory, each listener, and the console
// with how to log in. In JSON one line with a field each; on the console
// a block, as RabbitMQ prints its banner.
func logBanner(log *zap.Logger, o *options, amqp, amqps []string) {
	const msg = "server startup complete"
	mgmt, console := "", ""
	switch {
	case o.managementListen != "":
		mgmt = "http://" + shownAddr(o.managementListen) + "/"
		console = "http://" + browserHost(o.managementListen) + "/"
	case o.managementTLSListen != "":
		console = "https://" + browserHost(o.managementTLSListen) + "/"
	}
	prom := ""
	if o.prometheusListen != "" {
		prom = "http://" + shownAddr(o.prometheusListen) + "/metrics"
	}
	login := loginHint(o)
	if o.logFormat == "json" {
		log.Info(msg, zap.String("version", version), zap.String("data_dir", o.dataDir), // node: on every line
			zap.Strings("amqp", amqp), zap.Strings("amqps", amqps), zap.String("management", mgmt),
			zap.String("management_tls", o.managementTLSListen), zap.String("prometheus", prom),
			zap.String("console", console), zap.String("login", login))
		return
	}
	var b strings.Builder
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "\n  %-16s%s", k+":", v)
		}
	}
	fmt.Fprintf(&b, "%s\n\n  railmq %s", msg, version)
	line("node", o.node())
	line("data dir", o.dataDir)
	line("AMQP", strings.Join(amqp, ", "))
	line("AMQPS", strings.Join(amqps, ", "))
	line("management", mgmt)
	if o.managementTLSListen != "" {
		line("management TLS", "https://"+shownAddr(o.managementTLSListen)+"/")
	}
	line("prometheus", prom)
	line("console", console)
	if console != "" {
		line("log in", login)
	}
	log.Info(b.String())
}

// shownAddr is a listener's address as the AMQP listeners show theirs:
// every interface is [::].
func shownAddr(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("::", port)
	}
	return addr
}

// browserHost is an HTTP listener's address as a browser on this host
// reaches it: localhost for every interface.
func browserHost(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// loginHint says who logs in to the console and from where: the default
// user of a fresh store (or the --users administrators), from localhost
// only when it is one of the loopback users.
func loginHint(o *options) string {
	if o.users != "" || o.usersFile != "" {
		return "as an administrator of --users/--users-file"
	}
	where := "from any host"
	for _, u := range splitList(o.loopbackUsers) {
		if u == o.defaultUser {
			where = "from localhost only (loopback_users; --loopback-users= allows it from anywhere)"
		}
	}
	return fmt.Sprintf("as %q with its password (default_user, made with a fresh store), %s", o.defaultUser, where)
}
