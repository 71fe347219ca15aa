package broker

import (
	"crypto/subtle"
	"net"
	"slices"

	"github.com/railmq/railmq/amqp"
)

// users is the broker's user store.
type users struct {
	passwords map[string]string
	loopback  []string
}

// check reports whether user/pass are valid for a client at remote.
// Loopback-only users (guest by default, as RabbitMQ's loopback_users)
// are refused from any other address.
func (u *users) check(user, pass string, remote net.Addr) bool {
	want, ok := u.passwords[user]
	if !ok || subtle.ConstantTimeCompare([]byte(want), []byte(pass)) != 1 {
		return false
	}
	if slices.Contains(u.loopback, user) && !isLoopback(remote) {
		return false
	}
	return true
}

func isLoopback(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return false
}

// parseCredentials extracts the user and password from a start-ok
// response for mechanism PLAIN ("\0user\0pass", authzid ignored) or
// AMQPLAIN (a table body with LOGIN and PASSWORD).
func parseCredentials(mechanism, response string) (user, pass string, ok bool) {
	switch mechanism {
	case "PLAIN":
		parts := splitNUL(response)
		if len(parts) != 3 {
			return "", "", false
		}
		return parts[1], parts[2], true
	case "AMQPLAIN":
		t, err := amqp.DecodeTable([]byte(response))
		if err != nil {
			return "", "", false
		}
		user, uok := t["LOGIN"].(string)
		pass, pok := t["PASSWORD"].(string)
		return user, pass, uok && pok
	}
	return "", "", false
}

func splitNUL(s string) []string {
	var parts []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}
