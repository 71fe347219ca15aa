package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func isIP(s string) bool { return net.ParseIP(s) != nil }

// oneOf checks that a value is one of values.
func oneOf(values ...string) func(string) error {
	return func(v string) error {
		for _, w := range values {
			if v == w {
				return nil
			}
		}
		return fmt.Errorf("not one of %s", strings.Join(values, ", "))
	}
}

// confKeys are the rabbitmq.conf keys railmq reads (docs/configuration.md
// has the table). The names, value syntaxes and units are RabbitMQ's
// (v4.1.0's deps/rabbit/priv/schema/rabbit.schema, rabbitmq_management's
// and rabbitmq_prometheus's schemas).
var confKeys = []confKey{
	// Listeners.
	{"listeners.tcp", listenersNone(func(c *confState) **confEntry { return &c.tcpNone })},
	{"listeners.tcp.$name", listener(func(c *confState) *[]confValue { return &c.tcp })},
	{"listeners.ssl", listenersNone(func(c *confState) **confEntry { return &c.sslNone })},
	{"listeners.ssl.$name", listener(func(c *confState) *[]confValue { return &c.ssl })},
	// TLS.
	{"ssl_options.cacertfile", into(func(c *confState) **confValue { return &c.tlsCA[0] }, nil)},
	{"ssl_options.certfile", into(func(c *confState) **confValue { return &c.tlsCert[0] }, nil)},
	{"ssl_options.keyfile", into(func(c *confState) **confValue { return &c.tlsKey[0] }, nil)},
	{"ssl_options.verify", setFlag("tls-verify", checked(oneOf("verify_peer", "verify_none")))},
	{"ssl_options.fail_if_no_peer_cert", setFlag("tls-fail-if-no-peer-cert", checked(checkBool))},
	// Users and access.
	{"default_user", setFlag("default-user", nil)},
	{"default_pass", setFlag("default-pass", plainPassword)},
	{"default_vhost", setFlag("default-vhost", nil)},
	{"loopback_users", func(c *confState, e confEntry, _ []string) error {
		if e.value != "none" {
			return errors.New("only none is a value of loopback_users itself (loopback_users.NAME = true|false lists users)")
		}
		c.loopbackNone = &e
		return nil
	}},
	{"loopback_users.$user", func(c *confState, e confEntry, vars []string) error {
		on, err := confBool(e.value)
		if err != nil {
			return err
		}
		c.loopback = append(c.loopback, loopbackUser{vars[0], on, e})
		return nil
	}},
	// Resources and limits.
	{"vm_memory_high_watermark.relative", into(func(c *confState) **confValue { return &c.wmRel }, checkFraction)},
	{"vm_memory_high_watermark.absolute", into(func(c *confState) **confValue { return &c.wmAbs }, checkBytes)},
	{"vm_memory_high_watermark_paging_ratio", setFlag("vm-memory-high-watermark-paging-ratio", func(v string) (string, error) {
		f, err := confFloat(v)
		return fraction(f), err
	})},
	{"vm_memory_calculation_strategy", memoryStrategy},
	{"disk_free_limit.relative", into(func(c *confState) **confValue { return &c.diskRel }, checkFloat)},
	{"disk_free_limit.absolute", into(func(c *confState) **confValue { return &c.diskAbs }, checkBytes)},
	{"consumer_timeout", setFlag("consumer-timeout", func(v string) (string, error) {
		n, err := confInt(v, 1<<53)
		if err != nil || n < 1 {
			return "", errors.New("not a number of milliseconds, 1 or more")
		}
		return strconv.FormatInt(n, 10) + "ms", nil
	})},
	{"heartbeat", intFlag("heartbeat", 65535, "s")},
	{"handshake_timeout", setFlag("handshake-timeout", func(v string) (string, error) {
		if v == "infinity" {
			return "876000h", nil // a hundred years
		}
		n, err := confInt(v, 1<<53)
		return strconv.FormatInt(n, 10) + "ms", err
	})},
	{"frame_max", setFlag("frame-max", func(v string) (string, error) {
		n, err := confByteSize(v)
		return strconv.FormatInt(n, 10), err
	})},
	{"channel_max", setFlag("channel-max", func(v string) (string, error) {
		n, err := confInt(v, 65535)
		if n == 0 {
			n = 65535 // 0 is "no limit" in RabbitMQ: the most AMQP 0-9-1 allows
		}
		return strconv.FormatInt(n, 10), err
	})},
	{"max_message_size", setFlag("max-message-size", func(v string) (string, error) {
		n, err := confInt(v, 536870912)
		if err != nil || n < 1 {
			return "", errors.New("max message size should be between 1 and 512MB (536870912)")
		}
		return strconv.FormatInt(n, 10), nil
	})},
	// Management and metrics.
	{"management.tcp.port", into(func(c *confState) **confValue { return &c.mgmt.port }, checkPort)},
	{"management.tcp.ip", into(func(c *confState) **confValue { return &c.mgmt.ip }, checkIP)},
	{"management.listener.port", into(func(c *confState) **confValue { return &c.mgmt.port }, checkPort)},
	{"management.listener.ip", into(func(c *confState) **confValue { return &c.mgmt.ip }, checkIP)},
	{"management.ssl.port", into(func(c *confState) **confValue { return &c.mgmtTLS.port }, checkPort)},
	{"management.ssl.ip", into(func(c *confState) **confValue { return &c.mgmtTLS.ip }, checkIP)},
	{"management.ssl.cacertfile", into(func(c *confState) **confValue { return &c.tlsCA[1] }, nil)},
	{"management.ssl.certfile", into(func(c *confState) **confValue { return &c.tlsCert[1] }, nil)},
	{"management.ssl.keyfile", into(func(c *confState) **confValue { return &c.tlsKey[1] }, nil)},
	{"management.http.max_body_size", intFlag("management-max-body-size", 1<<53, "")},
	{"prometheus.tcp.port", into(func(c *confState) **confValue { return &c.prom.port }, checkPort)},
	{"prometheus.tcp.ip", into(func(c *confState) **confValue { return &c.prom.ip }, checkIP)},
	// Definitions.
	{"load_definitions", into(func(c *confState) **confValue { return &c.defs }, nil)},
	{"definitions.local.path", into(func(c *confState) **confValue { return &c.defs }, nil)},
	{"management.load_definitions", into(func(c *confState) **confValue { return &c.mgmtDefs }, nil)},
	{"definitions.import_backend", func(c *confState, e confEntry, _ []string) error {
		if e.value != "local_filesystem" && e.value != "rabbit_definitions_import_local_filesystem" {
			c.ignoredValue(e, "railmq imports definitions from a local file only")
		}
		return nil
	}},
	// Logging.
	{"log.console.level", into(func(c *confState) **confValue { return &c.consoleLvl }, checkLevel)},
	{"log.default.level", into(func(c *confState) **confValue { return &c.defaultLvl }, checkLevel)},
	{"log.console", func(c *confState, e confEntry, _ []string) error {
		on, err := confBool(e.value)
		if err == nil && !on {
			c.ignoredValue(e, "railmq always logs to stderr")
		}
		return err
	}},
	{"log.console.formatter", setFlag("log-format", func(v string) (string, error) {
		switch v {
		case "json":
			return "json", nil
		case "plaintext":
			return "console", nil
		}
		return "", errors.New("not plaintext or json")
	})},
	{"log.console.stdio", func(c *confState, e confEntry, _ []string) error {
		if err := oneOf("stdout", "stderr")(e.value); err != nil {
			return err
		}
		if e.value == "stdout" {
			c.ignoredValue(e, "railmq logs to stderr")
		}
		return nil
	}},
	{"log.file", func(c *confState, e confEntry, _ []string) error {
		if e.value != "false" {
			c.ignoredValue(e, "railmq logs to stderr only, not to a file")
		}
		return nil
	}},
	// Cluster.
	{"cluster_formation.peer_discovery_backend", func(c *confState, e confEntry, _ []string) error {
		switch e.value {
		case "classic_config", "classic", "config", "rabbit_peer_discovery_classic_config":
		default:
			c.ignoredValue(e, "railmq finds peers in cluster_formation.classic_config.nodes (--cluster-peers) only")
		}
		return nil
	}},
	{"cluster_formation.classic_config.nodes.$node", func(c *confState, e confEntry, _ []string) error {
		if _, err := confNodeHost(e.value); err != nil {
			return err
		}
		c.nodes = append(c.nodes, confValue{e.value, e})
		return nil
	}},
	{"distribution.listener.port_range.min", into(func(c *confState) **confValue { return &c.distMin }, checkPort)},
	{"distribution.listener.port_range.max", into(func(c *confState) **confValue { return &c.distMax }, checkPort)},
	{"distribution.listener.interface", into(func(c *confState) **confValue { return &c.distIP }, checkIP)},
	{"cluster_name", func(c *confState, e confEntry, _ []string) error {
		c.notes = append(c.notes, note{zapcore.InfoLevel, "config key accepted, not used by railmq yet",
			[]zap.Field{zap.String("key", e.key), zap.String("value", e.value), zap.String("file", e.file), zap.Int("line", e.line)}})
		return nil
	}},
	// Deprecated features RabbitMQ 4.x refuses unless permitted; railmq
	// has no such switch: what it implements of them works.
	{"deprecated_features.permit.$name", accepted(checkBool)},
}

func checked(check func(string) error) func(string) (string, error) {
	return func(v string) (string, error) { return v, check(v) }
}

// checkFraction checks a relative watermark: railmq's is at most 1.0.
func checkFraction(v string) error {
	f, err := confFloat(v)
	if err == nil && f > 1 {
		return errors.New("a relative watermark is at most 1.0")
	}
	return err
}

func checkLevel(v string) error { _, err := confLogLevel(v); return err }

// plainPassword refuses RabbitMQ's encrypted values (encrypted:...,
// decrypted by a passphrase railmq does not have).
func plainPassword(v string) (string, error) {
	if strings.HasPrefix(v, "encrypted:") {
		return "", errors.New("encrypted values are not supported; give the password itself")
	}
	return v, nil
}

// memoryStrategy reads vm_memory_calculation_strategy: rss as railmq's
// rss; allocated, erlang and legacy (the Erlang VM's own figures) have no
// railmq meaning: railmq's held is used, with a warning. held is railmq's
// own value.
func memoryStrategy(c *confState, e confEntry, _ []string) error {
	switch e.value {
	case "rss", "held":
		c.flags["vm-memory-calculation-strategy"] = confValue{e.value, e}
	case "allocated", "erlang", "legacy":
		c.ignoredValue(e, "railmq measures held (bodies it holds for clients) or rss; held is used")
	default:
		return errors.New("not one of rss, allocated, erlang, legacy (or railmq's held)")
	}
	return nil
}

func listenersNone(dst func(c *confState) **confEntry) func(*confState, confEntry, []string) error {
	return func(c *confState, e confEntry, _ []string) error {
		if e.value != "none" {
			return errors.New("only none is a value of the key itself (.NAME = PORT or IP:PORT adds a listener)")
		}
		*dst(c) = &e
		return nil
	}
}

func listener(dst func(c *confState) *[]confValue) func(*confState, confEntry, []string) error {
	return func(c *confState, e confEntry, _ []string) error {
		a, err := confListener(e.value)
		if err != nil {
			return err
		}
		l := dst(c)
		*l = append(*l, confValue{a, e})
		return nil
	}
}
