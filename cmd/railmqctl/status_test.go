package main

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// rabbitmq-diagnostics status prints RabbitMQ's sections that railmq
// fills, in RabbitMQ's order and wording. RabbitMQ 3.10.8 on this
// machine (rabbitmq-diagnostics status, Erlang-only lines elided):
//
//	Status of node rabbit@vm ...
//	Runtime
//
//	OS PID: 1099
//	OS: Linux
//	Uptime (seconds): 2629
//	Is under maintenance?: false
//	RabbitMQ version: 3.10.8
//	...
//	Node name: rabbit@vm
//	...
//	Data directory
//
//	Node data directory: /var/lib/rabbitmq/mnesia/rabbit@vm
//	...
//	Config files
//
//
//	Log file(s)
//
//	 * /var/log/rabbitmq/rabbit@vm.log
//	 * /var/log/rabbitmq/rabbit@vm_upgrade.log
//	 * <stdout>
//
//	Alarms
//
//	(none)
//
//	Memory
//
//	Total memory used: 0.1442 gb
//	Calculation strategy: rss
//	Memory high watermark setting: 0.4 of available memory, computed to: 10.1105 gb
//	...
//	File Descriptors
//
//	Total: 14, limit: 927
//	...
//	Free Disk Space
//
//	Low free disk space watermark: 0.05 gb
//	Free disk space: 39.59 gb
//
//	Totals
//
//	Connection count: 0
//	Queue count: 11
//	Virtual host count: 1
//
//	Listeners
//
//	Interface: [::], port: 15672, protocol: http, purpose: HTTP API
//	...
//	Interface: [::], port: 5672, protocol: amqp, purpose: AMQP 0-9-1 and AMQP 1.0
func TestStatusSections(t *testing.T) {
	b := testutil.Start(t, broker.Options{ConfigFiles: []string{"/etc/railmq/rabbitmq.conf"}})
	api := managementAPI(t, b)
	ctlOK(t, "railmqctl", api, "declare", "queue", "--name", "st-q")
	out := ctlOK(t, "rabbitmq-diagnostics", api, "status")
	node := regexp.QuoteMeta(b.Server.NodeName())
	want := "^Status of node " + node + " ...\n" +
		"Runtime\n\nOS PID: [0-9]+\nOS: Linux\nUptime \\(seconds\\): [0-9]+\nIs under maintenance\\?: false\n" +
		"Product name: railmq\nProduct version: \\S+\nRabbitMQ version: [0-9.]+\nNode name: " + node + "\n" +
		"\nData directory\n\nNode data directory: \\S+\n" +
		"\nConfig files\n\n \\* /etc/railmq/rabbitmq.conf\n" +
		"\nLog file\\(s\\)\n\n \\* <stderr>\n" +
		"\nAlarms\n\n\\(none\\)\n" +
		"\nMemory\n\nTotal memory used: [0-9]+\\.[0-9]+ gb\nCalculation strategy: rss\nMemory high watermark: computed to: [0-9]+\\.[0-9]+ gb\n" +
		"\nFile Descriptors\n\nTotal: [0-9]+, limit: [0-9]+\n" +
		"\nFree Disk Space\n\nLow free disk space watermark: [0-9]+\\.[0-9]+ gb\nFree disk space: [0-9]+\\.[0-9]+ gb\n" +
		"\nTotals\n\nConnection count: 0\nQueue count: 1\nVirtual host count: 1\n" +
		"\nListeners\n\n(Interface: \\S+, port: [0-9]+, protocol: \\S+, purpose: .+\n)+$"
	if !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("status:\n%s\nwant to match\n%s", out, want)
	}
	if !strings.Contains(out, "protocol: amqp, purpose: AMQP 0-9-1\n") {
		t.Errorf("status lists no AMQP listener:\n%s", out)
	}

	var st map[string]any
	if err := json.Unmarshal([]byte(ctlOK(t, "rabbitmq-diagnostics", api, "status", "--formatter", "json")), &st); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"os": "Linux", "is_under_maintenance": false, "product_name": "railmq", "log_files": []any{"<stderr>"},
		"config_files":                   []any{"/etc/railmq/rabbitmq.conf"},
		"vm_memory_calculation_strategy": "rss", "totals": map[string]any{"connection_count": float64(0), "queue_count": float64(1), "virtual_host_count": float64(1)}} {
		if !reflect.DeepEqual(st[k], v) {
			t.Errorf("status json %s = %#v, want %#v", k, st[k], v)
		}
	}
	if l, _ := st["listeners"].([]any); len(l) < 2 {
		t.Errorf("status json listeners %v", st["listeners"])
	}
}

// A node that reports its config and log files (RabbitMQ's /api/nodes
// config_files, log_files) has them listed; a node on another host has
// no OS line (this machine's would not be its).
func TestStatusReportedFiles(t *testing.T) {
	api := newFakeAPI(t, map[string]reply{
		"GET /api/overview": {200, `{"node":"rabbit@far","product_name":"railmq","product_version":"1.0","rabbitmq_version":"3.10.8","object_totals":{"connections":2,"queues":3}}`},
		"GET /api/nodes": {200, `[{"name":"rabbit@far","os_pid":"7","uptime":5000,"mem_used":50000000,"mem_calculation_strategy":"rss","mem_limit":1000000000,
			"disk_free":39590000000,"disk_free_limit":50000000,"fd_used":3,"fd_total":10,"db_dir":"/d","config_files":["/etc/rabbitmq/rabbitmq.conf"],
			"log_files":["/var/log/rabbitmq/rabbit@far.log","<stdout>"],"mem_alarm":true}]`},
		"GET /api/vhosts": {200, `[{"name":"/"},{"name":"v"}]`}})
	u := strings.Replace(api.URL, "127.0.0.1", "localhost", 1)
	code, out, errOut := ctl(t, "rabbitmq-diagnostics", map[string]string{"RAILMQ_MANAGEMENT_URL": u}, "-q", "status")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "Runtime\n\nOS PID: 7\nOS: Linux\nUptime (seconds): 5\nIs under maintenance?: false\nProduct name: railmq\nProduct version: 1.0\n" +
		"RabbitMQ version: 3.10.8\nNode name: rabbit@far\n\nData directory\n\nNode data directory: /d\n" +
		"\nConfig files\n\n * /etc/rabbitmq/rabbitmq.conf\n\nLog file(s)\n\n * /var/log/rabbitmq/rabbit@far.log\n * <stdout>\n" +
		"\nAlarms\n\nMemory alarm on node rabbit@far\n\nMemory\n\nTotal memory used: 0.05 gb\nCalculation strategy: rss\nMemory high watermark: computed to: 1.0 gb\n" +
		"\nFile Descriptors\n\nTotal: 3, limit: 10\n\nFree Disk Space\n\nLow free disk space watermark: 0.05 gb\nFree disk space: 39.59 gb\n" +
		"\nTotals\n\nConnection count: 2\nQueue count: 3\nVirtual host count: 2\n\nListeners\n\nInterface: localhost, port: " + u[strings.LastIndex(u, ":")+1:] + ", protocol: http, purpose: HTTP API\n"
	if out != want {
		t.Errorf("status:\n%q\nwant\n%q", out, want)
	}
	// The same node reached by another host's name: no OS line.
	sh := &shim{c: &client{base: "http://rabbit.example:15672"}}
	if sh.local() {
		t.Error("rabbit.example taken for this machine")
	}
	for _, base := range []string{"http://127.0.0.1:15672", "http://[::1]:15672", "http://localhost:1"} {
		if sh := (&shim{c: &client{base: base}}); !sh.local() {
			t.Errorf("%s not taken for this machine", base)
		}
	}
}
