package broker

import (
	"net"
	"strconv"

	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/vhost"
)

// More of the admin API (admin.go): one exchange's topic permission, and
// the TLS listeners with their certificate files.

// ClearTopicExchangePermission removes user's topic permission on
// exchange in vh, if there is one.
func (s *Server) ClearTopicExchangePermission(vh, user, exchange string) error {
	b := &persist.Batch{}
	b.DeleteDef(defTopicPerm, vhost.DefName(vh, user, exchange))
	return s.commitDefs(b, func() { s.reg.ClearTopicPermission(vh, user, exchange) })
}

// TLSListener is an AMQP listener serving TLS, and the PEM files its
// certificate and CAs come from (RabbitMQ's ssl_options.certfile and
// cacertfile).
type TLSListener struct {
	Protocol   string // "amqp/ssl", RabbitMQ's name
	Interface  string // the listening IP
	Port       int
	CertFile   string
	CACertFile string // "" when none is configured
}

// TLSListeners lists the AMQP TLS listeners open now.
func (s *Server) TLSListeners() []TLSListener {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []TLSListener
	for _, ln := range s.lns {
		if _, ok := ln.(*tlsListener); !ok {
			continue
		}
		host, p, err := net.SplitHostPort(ln.Addr().String())
		if err != nil {
			continue
		}
		port, _ := strconv.Atoi(p)
		out = append(out, TLSListener{Protocol: "amqp/ssl", Interface: host, Port: port,
			CertFile: s.opts.TLSCertFile, CACertFile: s.opts.TLSCAFile})
	}
	return out
}
