package main

import (
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// confState gathers what a config file's entries ask for; finish turns
// it into flag values. Keys that combine (listeners.tcp.N, the absolute
// and the relative watermark, a port and an ip) are gathered first.
type confState struct {
	flags map[string]confValue // flag name → value
	notes []note

	tcp, ssl               []confValue // listeners.tcp.N, listeners.ssl.N, in file order
	tcpNone, sslNone       *confEntry  // listeners.tcp = none
	loopback               []loopbackUser
	loopbackNone           *confEntry
	wmAbs, wmRel           *confValue
	diskAbs, diskRel       *confValue
	consoleLvl, defaultLvl *confValue
	nodes                  []confValue // cluster_formation.classic_config.nodes.N
	distMin, distMax       *confValue  // distribution.listener.port_range.*
	distIP                 *confValue  // distribution.listener.interface
	mgmt, mgmtTLS, prom    hostPort
	defs, mgmtDefs         *confValue
	// ssl_options' file, then management.ssl's: railmq serves one
	// certificate on AMQPS and HTTPS.
	tlsCA, tlsCert, tlsKey [2]*confValue
}

// loopbackUser is a loopback_users.NAME = true|false entry.
type loopbackUser struct {
	name string
	on   bool
	from confEntry
}

// A confValue is a flag's value and the entry it comes from.
type confValue struct {
	value string
	from  confEntry
}

// hostPort gathers an HTTP listener's .ip and .port keys.
type hostPort struct{ ip, port *confValue }

// A note is a line to log once the logger exists.
type note struct {
	level  zapcore.Level
	msg    string
	fields []zap.Field
}

// confKey is one key railmq reads: its words, "$" for any word, and what
// it does with the entry, the variable words passed in vars.
type confKey struct {
	pattern string
	apply   func(c *confState, e confEntry, vars []string) error
}

// setFlag is a key that sets one flag, its value read by conv (nil: as
// written).
func setFlag(flag string, conv func(string) (string, error)) func(*confState, confEntry, []string) error {
	return func(c *confState, e confEntry, _ []string) error {
		v := e.value
		if conv != nil {
			var err error
			if v, err = conv(v); err != nil {
				return err
			}
		}
		c.flags[flag] = confValue{v, e}
		return nil
	}
}

// into stores the entry's value, read by check, in *dst.
func into(dst func(c *confState) **confValue, check func(string) error) func(*confState, confEntry, []string) error {
	return func(c *confState, e confEntry, _ []string) error {
		if check != nil {
			if err := check(e.value); err != nil {
				return err
			}
		}
		*dst(c) = &confValue{e.value, e}
		return nil
	}
}

func checkPort(v string) error { _, err := confPort(v); return err }
func checkIP(v string) error {
	if !isIP(v) {
		return fmt.Errorf("%q is not an IP address", v)
	}
	return nil
}
func checkBool(v string) error  { _, err := confBool(v); return err }
func checkBytes(v string) error { _, err := confBytes(v); return err }
func checkFloat(v string) error { _, err := confFloat(v); return err }

// intFlag reads an integer of at most max into flag, suffixed (a
// duration's unit).
func intFlag(flag string, max int64, suffix string) func(*confState, confEntry, []string) error {
	return setFlag(flag, func(v string) (string, error) {
		n, err := confInt(v, max)
		if err != nil {
			return "", err
		}
		return strconv.FormatInt(n, 10) + suffix, nil
	})
}

// accepted is a key railmq reads and checks but that changes nothing.
func accepted(check func(string) error) func(*confState, confEntry, []string) error {
	return func(_ *confState, e confEntry, _ []string) error {
		if check != nil {
			return check(e.value)
		}
		return nil
	}
}

// ignoredValue warns that a value railmq cannot honour is ignored.
func (c *confState) ignoredValue(e confEntry, why string) {
	c.notes = append(c.notes, note{zapcore.WarnLevel, "config value not supported by railmq, ignored",
		[]zap.Field{zap.String("key", e.key), zap.String("value", e.value), zap.String("file", e.file), zap.Int("line", e.line), zap.String("reason", why)}})
}

// matchKey matches a key's words against a pattern's; vars are the words
// matched by $.
func matchKey(pattern string, words []string) (vars []string, ok bool) {
	p := strings.Split(pattern, ".")
	if len(p) != len(words) {
		return nil, false
	}
	for i, w := range p {
		switch {
		case strings.HasPrefix(w, "$"):
			vars = append(vars, words[i])
		case w != words[i]:
			return nil, false
		}
	}
	return vars, true
}
