package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// flagGroups are the topics railmq --help lists its flags under, in
// order; every flag is in one (TestUsageGroups).
var flagGroups = []struct {
	title string
	flags []string
}{
	{"Listeners", []string{"listen", "tls-listen", "handshake-timeout"}},
	{"TLS", []string{"tls-cert", "tls-key", "tls-ca", "tls-verify", "tls-fail-if-no-peer-cert"}},
	{"Users & access", []string{"default-user", "default-pass", "default-vhost", "loopback-users", "users", "users-file", "load-definitions"}},
	{"Resources & limits", []string{"vm-memory-high-watermark", "vm-memory-high-watermark-paging-ratio", "vm-memory-calculation-strategy",
		"disk-free-limit", "channel-max", "frame-max", "max-message-size", "heartbeat", "consumer-timeout",
		"queue-window", "queue-window-bytes", "coalesce-acks", "pace-publishers"}},
	{"Storage", []string{"data-dir", "store-gc-interval", "data-encryption-key-file", "data-encryption-old-key-file", "data-encryption-key-rotation"}},
	{"Management & metrics", []string{"management-listen", "management-tls-listen", "management-max-body-size", "prometheus-listen", "debug-listen"}},
	{"Cluster", []string{"node-name", "cluster-listen", "cluster-peers", "cluster-secret-file", "cluster-tls", "cluster-join"}},
	{"Logging", []string{"log-level", "log-format"}},
	{"Config", []string{"config", "version"}},
}

// printUsage is railmq --help: the flags by topic, each as
// flag.PrintDefaults prints it.
func printUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, "railmq %s: an AMQP 0-9-1 message broker.\n\nUsage: railmq [flags]\n\nFlags (each also read from RAILMQ_<NAME>, e.g. RAILMQ_LISTEN, RAILMQ_DATA_DIR):\n", version)
	listed := map[string]bool{}
	for _, g := range flagGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.flags {
			if f := fs.Lookup(name); f != nil {
				printFlag(w, f)
				listed[name] = true
			}
		}
	}
	var other []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			other = append(other, f)
		}
	})
	if len(other) > 0 {
		fmt.Fprintf(w, "\nOther:\n")
		for _, f := range other {
			printFlag(w, f)
		}
	}
	fmt.Fprintf(w, "\nA config file in RabbitMQ's rabbitmq.conf format (--config, RAILMQ_CONFIG or RABBITMQ_CONFIG_FILE) sets the same options;\n"+
		"a flag wins over a variable (RAILMQ_*, then RabbitMQ's: RABBITMQ_DEFAULT_USER, ...), which wins over the file.\n")
}

// printFlag prints one flag as flag.PrintDefaults does.
func printFlag(w io.Writer, f *flag.Flag) {
	var b strings.Builder
	fmt.Fprintf(&b, "  -%s", f.Name)
	name, usage := flag.UnquoteUsage(f)
	if name != "" {
		b.WriteString(" " + name)
	}
	if b.Len() <= 4 { // a one-letter flag's usage goes on its line
		b.WriteString("\t")
	} else {
		b.WriteString("\n    \t")
	}
	b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
	if !isZeroDefault(f) {
		if name == "string" {
			fmt.Fprintf(&b, " (default %q)", f.DefValue)
		} else {
			fmt.Fprintf(&b, " (default %v)", f.DefValue)
		}
	}
	fmt.Fprintln(w, b.String())
}

// isZeroDefault reports whether the flag's default is its type's zero,
// which flag.PrintDefaults leaves out.
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}
