package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// version is railmqctl's (the release sets it: -ldflags "-X main.version=...").
var version = "0.1.0"

// requestTimeout bounds one management API request of a short command.
// Long work (redrive, definitions import) has no client-side timeout:
// see longwork.go.
var requestTimeout = 60 * time.Second

// defaultInterval is how often long work prints its progress (a
// variable for tests).
var defaultInterval = time.Second

// addGlobalFlags defines railmqctl's global flags: rabbitmqadmin v2's
// (--host, --port, --base-uri, --username, --password, --vhost,
// --non-interactive) and railmqctl's first spellings (--url, --user,
// --format).
func addGlobalFlags(root *cobra.Command, c *client) {
	pf := root.PersistentFlags()
	pf.StringVar(&c.base, "url", defaultURL(), "the management API's address (RAILMQ_MANAGEMENT_URL, else http://RAILMQ_MANAGEMENT_LISTEN)")
	pf.StringVarP(&c.base, "base-uri", "U", defaultURL(), "the management API's address, as rabbitmqadmin's --base-uri (same as --url)")
	var host string
	var port int
	pf.StringVarP(&host, "host", "H", "", "the management API's host (replaces --url's)")
	pf.IntVarP(&port, "port", "P", 0, "the management API's port (replaces --url's)")
	pf.StringVarP(&c.user, "username", "u", defaultUser(), "user (RAILMQ_USER, RABBITMQ_DEFAULT_USER)")
	pf.StringVar(&c.user, "user", defaultUser(), "user (same as --username)")
	pf.StringVarP(&c.pass, "password", "p", defaultPassword(), "password (RAILMQ_PASSWORD, RABBITMQ_DEFAULT_PASS)")
	pf.StringVarP(&c.vhost, "vhost", "V", "/", "virtual host")
	pf.StringVarP(&c.format, "format", "f", "table", "table or json")
	var timeoutSecs float64
	pf.Float64Var(&timeoutSecs, "timeout", requestTimeout.Seconds(), "HTTP API request timeout in seconds, above 0 (rabbitmqadmin v2's); long work (redrive, import) waits as long as it takes unless this is given")
	pf.BoolVar(&c.nonInteractive, "non-interactive", false, "for scripts: tables as rabbitmqadmin v2 prints them: no header line, columns aligned with spaces, numbers as they are")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if c.format != "table" && c.format != "json" {
			return fmt.Errorf("--format %q: table or json", c.format)
		}
		if f := cmd.Root().PersistentFlags().Lookup("timeout"); f != nil && f.Changed {
			if timeoutSecs <= 0 {
				return fmt.Errorf("--timeout %v: a number of seconds greater than 0", timeoutSecs)
			}
			c.timeout = time.Duration(timeoutSecs * float64(time.Second))
			c.timeoutGiven = true
		}
		if host == "" && port == 0 {
			return nil
		}
		u, err := url.Parse(c.base)
		if err != nil {
			return fmt.Errorf("--url %q: %w", c.base, err)
		}
		h, p := u.Hostname(), u.Port()
		if host != "" {
			h = host
		}
		if port != 0 {
			p = strconv.Itoa(port)
		}
		if p == "" {
			u.Host = h
			if h != "" && net.ParseIP(h) != nil && net.ParseIP(h).To4() == nil {
				u.Host = "[" + h + "]"
			}
		} else {
			u.Host = net.JoinHostPort(h, p)
		}
		c.base = u.String()
		return nil
	}
}

// exitCode is railmqctl's exit code for err: 69 (EX_UNAVAILABLE, as
// RabbitMQ's tools) when the node cannot be reached, 1 for anything
// else (the API's refusal, printed with its reason, or a bad command).
func exitCode(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return 1
	}
	var ne net.Error
	var oe *net.OpError
	var de *net.DNSError
	if errors.As(err, &oe) || errors.As(err, &de) || (errors.As(err, &ne) && ne.Timeout()) {
		return exitUnavailable
	}
	return 1
}
