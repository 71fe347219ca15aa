package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// rabbitEnv are the RabbitMQ variables railmq reads beside its RAILMQ_
// ones (the official image's and rabbitmq-env's): each sets a flag that
// neither the command line nor its RAILMQ_ variable sets. They win over
// the config file, as RabbitMQ's environment does. RABBITMQ_CONFIG_FILE
// names the config file (confFile) and RABBITMQ_DIST_PORT the cluster's
// port (confState.cluster).
var rabbitEnv = []struct {
	name, flag string
	conv       func(v string, getenv func(string) string) (string, error) // nil: as given
}{
	{"RABBITMQ_DEFAULT_USER", "default-user", nil},
	{"RABBITMQ_DEFAULT_PASS", "default-pass", nil},
	{"RABBITMQ_DEFAULT_VHOST", "default-vhost", nil},
	{"RABBITMQ_NODENAME", "node-name", nodeName},
	{"RABBITMQ_NODE_PORT", "listen", nodeListen},
	{"RABBITMQ_NODE_IP_ADDRESS", "listen", nodeListen},
	{"RABBITMQ_VM_MEMORY_HIGH_WATERMARK", "vm-memory-high-watermark", nil},
}

// applyRabbitEnv sets flags from the RabbitMQ variables set (non-empty),
// skipping flags in set, and adds those it sets to set.
func applyRabbitEnv(fs *flag.FlagSet, set map[string]bool, getenv func(string) string) error {
	done := map[string]bool{}
	for _, e := range rabbitEnv {
		v := getenv(e.name)
		if v == "" || set[e.flag] || done[e.flag] {
			continue
		}
		if e.conv != nil {
			var err error
			if v, err = e.conv(v, getenv); err != nil {
				return fmt.Errorf("%s=%q: %w", e.name, getenv(e.name), err)
			}
		}
		if err := fs.Lookup(e.flag).Value.Set(v); err != nil {
			return fmt.Errorf("%s=%q: %w", e.name, getenv(e.name), err)
		}
		done[e.flag] = true
	}
	for f := range done {
		set[f] = true
	}
	return nil
}

// nodeName reads RABBITMQ_NODENAME: a name without @ gets this host's
// short name, as RabbitMQ's rabbit becomes rabbit@HOST.
func nodeName(v string, _ func(string) string) (string, error) {
	if strings.ContainsAny(v, ", =") {
		return "", errors.New("not a node name such as rabbit@hostname")
	}
	if !strings.Contains(v, "@") {
		v += "@" + shortHostname()
	}
	return v, nil
}

// nodeListen is the AMQP address from RABBITMQ_NODE_IP_ADDRESS and
// RABBITMQ_NODE_PORT (5672 and every interface by default).
func nodeListen(_ string, getenv func(string) string) (string, error) {
	port := 5672
	if p := getenv("RABBITMQ_NODE_PORT"); p != "" {
		n, err := confPort(p)
		if err != nil {
			return "", err
		}
		port = n
	}
	ip := getenv("RABBITMQ_NODE_IP_ADDRESS")
	if ip != "" && net.ParseIP(ip) == nil {
		return "", fmt.Errorf("RABBITMQ_NODE_IP_ADDRESS %q is not an IP address", ip)
	}
	return net.JoinHostPort(ip, strconv.Itoa(port)), nil
}
