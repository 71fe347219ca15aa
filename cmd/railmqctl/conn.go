package main

import (
	"net"
	"os"
	"strings"
)

// How railmqctl, and the rabbitmqctl and rabbitmq-diagnostics shims,
// find the node and log in. RabbitMQ's CLI tools reach a node over Erlang
// distribution and authenticate with the Erlang cookie; railmq's tools
// use the management HTTP API and a management user, so a shim can do
// only what that user may. In order, the first set wins:
//
//	address:  --url, RAILMQ_MANAGEMENT_URL, http://RAILMQ_MANAGEMENT_LISTEN
//	          (the broker's own --management-listen variable, so a
//	          container's health check finds the API wherever it listens),
//	          http://127.0.0.1:15672
//	user:     --user, RAILMQ_USER, RABBITMQ_DEFAULT_USER (the official
//	          image's variable), RAILMQ_DEFAULT_USER (the broker's
//	          --default-user), guest
//	password: --password, RAILMQ_PASSWORD, RABBITMQ_DEFAULT_PASS,
//	          RAILMQ_DEFAULT_PASS, guest

// envVars are the variables read here (tests unset them all).
var envVars = []string{"RAILMQ_MANAGEMENT_URL", "RAILMQ_MANAGEMENT_LISTEN", "RAILMQ_USER", "RAILMQ_PASSWORD",
	"RABBITMQ_DEFAULT_USER", "RABBITMQ_DEFAULT_PASS", "RAILMQ_DEFAULT_USER", "RAILMQ_DEFAULT_PASS", "RABBITMQ_NODENAME"}

// firstEnv is the first of keys set to something, or def.
func firstEnv(def string, keys ...string) string {
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return def
}

// defaultURL is the management API's address when --url is not given.
func defaultURL() string {
	if u := os.Getenv("RAILMQ_MANAGEMENT_URL"); u != "" {
		return u
	}
	if l := os.Getenv("RAILMQ_MANAGEMENT_LISTEN"); l != "" {
		return "http://" + dialable(l)
	}
	return "http://127.0.0.1:15672"
}

// dialable turns a listen address (":15672", "0.0.0.0:15672",
// "[::]:15672") into one to connect to on this host.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

func defaultUser() string {
	return firstEnv("guest", "RAILMQ_USER", "RABBITMQ_DEFAULT_USER", "RAILMQ_DEFAULT_USER")
}

func defaultPassword() string {
	return firstEnv("guest", "RAILMQ_PASSWORD", "RABBITMQ_DEFAULT_PASS", "RAILMQ_DEFAULT_PASS")
}

// localNodeName is the name the shims give the node before it has
// answered (RabbitMQ's default, rabbit@ and the short host name, or
// RABBITMQ_NODENAME).
func localNodeName() string {
	if n := os.Getenv("RABBITMQ_NODENAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(h, ".")
	return "rabbit@" + h
}
