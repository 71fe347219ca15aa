package main

import (
	"fmt"
	"sort"
	"strings"
)

// Which of the shims' commands each tool takes. RabbitMQ 3.10.8 splits
// them: rabbitmqctl has no health checks nor listeners, and
// rabbitmq-diagnostics no await_startup, tracing or changes; a command
// of the other tool is answered as unknown (exit 64, usage on stderr).
// Recorded on this machine against RabbitMQ 3.10.8:
//
//	rabbitmq-diagnostics await_startup   stderr "\nCommand 'await_startup' not found. \n\nUsage\n\n..."; exit 64
//	rabbitmqctl check_running            stderr "\nCommand 'check_running' not found. \n\nUsage\n\n..."; exit 64
//	rabbitmqctl ping                     "Ping succeeded"; exit 0
var toolCommands = map[string]map[string]string{
	"rabbitmqctl": {
		"ping": "Checks that the node answers and CLI tools can authenticate with it", "status": "Displays status of a node",
		"await_startup": "Waits for the RabbitMQ application to start on the target node", "list_queues": "Lists queues and their properties",
		"list_connections": "Lists AMQP 0.9.1 connections for the node", "close_connection": "Instructs the broker to close the connection associated with the Erlang process id",
		"set_vm_memory_high_watermark": "Sets the vm_memory_high_watermark setting",
		"trace_on":                     "Enables tracing (the firehose) in a virtual host", "trace_off": "Disables tracing (the firehose) in a virtual host",
		"node_health_check": "DEPRECATED. Performs intrusive, opinionated health checks on a fully booted node", "version": "Displays CLI tools version",
	},
	"rabbitmq-diagnostics": {
		"ping": "Checks that the node answers and CLI tools can authenticate with it", "status": "Displays status of a node",
		"check_running":           "Health check that exits with a non-zero code if the RabbitMQ app on the target node is not running",
		"is_running":              "Checks if RabbitMQ is fully booted and running on the target node",
		"check_local_alarms":      "Health check that exits with a non-zero code if the target node reports any local alarms",
		"check_alarms":            "Health check that exits with a non-zero code if the target node reports any alarms, local or cluster-wide.",
		"check_port_connectivity": "Basic TCP connectivity health check for each listener's port on the target node",
		"check_virtual_hosts":     "Health check that checks if all vhosts are running in the target node",
		"listeners":               "Lists active connection listeners (bound interface, port, protocol) on the target node",
		"list_queues":             "Lists queues and their properties", "list_connections": "Lists AMQP 0.9.1 connections for the node",
		"node_health_check": "DEPRECATED. Performs intrusive, opinionated health checks on a fully booted node", "version": "Displays CLI tools version",
	},
}

// unknownCommand is RabbitMQ's answer to a command its tool does not
// have: the text on stderr, as is, and exit 64.
func (s *shim) unknownCommand(cmd string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\nCommand '%s' not found. \n\nUsage\n\n", cmd)
	fmt.Fprintf(&b, "%s [--node <node>] [--timeout <timeout>] [--longnames] [--quiet] <command> [<command options>]\n\nAvailable commands:\n\n", s.tool)
	cmds := toolCommands[s.tool]
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "   %-30s %s\n", n, cmds[n])
	}
	fmt.Fprintf(&b, "\nUse '%s help <command>' to learn more about a specific command\n", s.tool)
	return &shimError{code: exitUsage, msg: b.String(), raw: true}
}

// takes reports whether the shim's tool has cmd.
func (s *shim) takes(cmd string) bool {
	_, ok := toolCommands[s.tool][cmd]
	return ok
}
