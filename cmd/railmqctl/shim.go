package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// The rabbitmqctl and rabbitmq-diagnostics shims: railmqctl called by one
// of those names (the image installs it so) takes RabbitMQ's commands
// that images, charts and scripts call, with RabbitMQ 3.10.8's output
// and exit codes (shimcmds.go). They reach the node through the
// management API (conn.go says where and as whom).

// RabbitMQ's CLI exit codes (rabbitmq_cli core/exit_codes.ex, sysexits).
const (
	exitOK          = 0
	exitUsage       = 64 // a bad command, flag or argument
	exitUnavailable = 69 // the node is unreachable, or a health check failed
	exitSoftware    = 70 // the node answered with an error
	exitTempFail    = 75 // a timeout
)

// shimError is a failure with its exit code; msg is printed after
// "Error:" (on a line of its own when multiline).
type shimError struct {
	code      int
	msg       string
	multiline bool
	raw       bool // msg is printed as it is (RabbitMQ's usage text)
}

func (e *shimError) Error() string { return e.msg }

// shim is one run of rabbitmqctl or rabbitmq-diagnostics.
type shim struct {
	c         *client
	tool      string
	node      string // -n, or the name the node gives itself
	nodeGiven bool
	quiet     bool
	json      bool // --formatter json
	noHeaders bool
	timeout   time.Duration
	address   string // check_port_connectivity --address
	stdout    io.Writer
}

// runShim runs tool (rabbitmqctl or rabbitmq-diagnostics) with args and
// returns its exit code.
func runShim(tool string, args []string, stdout, stderr io.Writer) int {
	s := &shim{tool: tool, stdout: stdout, timeout: 60 * time.Second}
	s.c = &client{out: stdout, errOut: stderr, base: defaultURL(), user: defaultUser(), pass: defaultPassword(), vhost: "/"}
	pos, err := s.parse(args)
	if err == nil && len(pos) == 0 {
		err = &shimError{code: exitUsage, msg: "no command given (usage: " + tool + " [-n NODE] [-q] [-t SECONDS] COMMAND [ARGS])"}
	}
	if err == nil {
		s.c.timeout = s.timeout
		err = s.target()
	}
	if err == nil {
		err = s.dispatch(pos[0], pos[1:])
	}
	if err == nil {
		return exitOK
	}
	var se *shimError
	if !errors.As(err, &se) {
		se = s.classify(err)
	}
	switch {
	case se.raw:
		fmt.Fprint(stderr, se.msg)
	case se.multiline:
		fmt.Fprintf(stderr, "Error:\n%s\n", se.msg)
	default:
		fmt.Fprintf(stderr, "Error: %s\n", se.msg)
	}
	return se.code
}

// parse takes RabbitMQ's global and list flags from anywhere in args
// (as its CLI does); the rest is the command and its arguments.
func (s *shim) parse(args []string) ([]string, error) {
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		value := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", &shimError{code: exitUsage, msg: "option " + name + " needs a value"}
			}
			i++
			return args[i], nil
		}
		var err error
		var v string
		switch name {
		case "-q", "--quiet", "-s", "--silent":
			s.quiet = true
		case "-l", "--longnames", "--online", "--offline", "--local":
			// Erlang distribution's long names mean nothing here;
			// every queue of railmq's is online and listed.
		case "--no-table-headers":
			s.noHeaders = true
		case "-n", "--node":
			s.node, err = value()
			s.nodeGiven = true
		case "-p", "--vhost":
			s.c.vhost, err = value()
		case "-a", "--address":
			s.address, err = value()
		case "--formatter":
			if v, err = value(); err == nil {
				switch v {
				case "json":
					s.json = true
				case "table", "string", "plugins", "erlang", "pretty_table":
				default:
					err = &shimError{code: exitUsage, msg: "formatter " + v + " is not supported (json or table)"}
				}
			}
		case "-t", "--timeout":
			if v, err = value(); err == nil {
				var secs float64
				if secs, err = strconv.ParseFloat(v, 64); err != nil || secs <= 0 {
					err = &shimError{code: exitUsage, msg: "timeout " + v + " is not a number of seconds above 0"}
				}
				s.timeout = time.Duration(secs * float64(time.Second))
			}
		default:
			err = &shimError{code: exitUsage, msg: "invalid option " + a}
		}
		if err != nil {
			return nil, err
		}
	}
	return pos, nil
}

// target points the client at -n's node: name@host is the API on host
// (at the configured URL's port) unless host is this one, which is the
// configured URL. Without -n, the configured URL.
func (s *shim) target() error {
	if !s.nodeGiven {
		s.node = localNodeName()
		return nil
	}
	_, host, ok := strings.Cut(s.node, "@")
	if !ok {
		host = s.node
		s.node = "rabbit@" + host
	}
	me, _ := os.Hostname()
	short, _, _ := strings.Cut(me, ".")
	if host == "" || host == "localhost" || host == me || host == short {
		return nil
	}
	u, err := url.Parse(s.c.base)
	if err != nil {
		return &shimError{code: exitUsage, msg: "management URL " + s.c.base + ": " + err.Error()}
	}
	u.Host = net.JoinHostPort(host, u.Port())
	if u.Port() == "" {
		u.Host = net.JoinHostPort(host, "15672")
	}
	s.c.base = u.String()
	return nil
}

// classify maps an error of the API's client to RabbitMQ's exit codes
// and messages: unreachable (69), a timeout (75), refused login (69, as
// RabbitMQ's cookie mismatch), anything else the node said (70).
func (s *shim) classify(err error) *shimError {
	var se *statusError
	if errors.As(err, &se) {
		switch se.Code {
		case 401, 403:
			return &shimError{code: exitUnavailable, msg: fmt.Sprintf("unable to perform an operation on node '%s': the management API at %s refused user '%s' (%s); set RAILMQ_USER and RAILMQ_PASSWORD (or RABBITMQ_DEFAULT_USER and RABBITMQ_DEFAULT_PASS)", s.node, s.c.base, s.c.user, se)}
		case 503:
			return &shimError{code: exitUnavailable, msg: fmt.Sprintf("node '%s' is not running or has not fully booted yet (%s)", s.node, se)}
		}
		return &shimError{code: exitSoftware, msg: se.Error()}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &shimError{code: exitTempFail, msg: fmt.Sprintf("operation on node %s timed out after %v", s.node, s.timeout)}
	}
	return &shimError{code: exitUnavailable, multiline: true, msg: s.unreachable(err)}
}

// unreachable is RabbitMQ's text for a node it cannot reach, with what
// railmq's CLI tried.
func (s *shim) unreachable(err error) string {
	return fmt.Sprintf(`unable to perform an operation on node '%s'. Please see diagnostics information and suggestions below.

Most common reasons for this are:

 * Target node is unreachable (e.g. due to hostname resolution, TCP connection or firewall issues)
 * CLI tool fails to authenticate with the server (railmq's CLI tools use the management API and a management user)
 * Target node is not running

DIAGNOSTICS
===========

attempted to contact: %s (the management API; RAILMQ_MANAGEMENT_URL or RAILMQ_MANAGEMENT_LISTEN say where)

%s:
  * %v`, s.node, s.c.base, s.node, err)
}

// banner prints RabbitMQ's informational line, which -q suppresses.
func (s *shim) banner(format string, a ...any) {
	if !s.quiet && !s.json {
		fmt.Fprintf(s.stdout, format+"\n", a...)
	}
}
