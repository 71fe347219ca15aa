package broker

// TLS for AMQP, as RabbitMQ configures it: listeners.ssl.N served by
// ServeTLS with ssl_options (certfile, keyfile, cacertfile, verify,
// fail_if_no_peer_cert), and the EXTERNAL SASL mechanism of the
// rabbitmq_auth_mechanism_ssl plugin with ssl_cert_login_from =
// common_name. The certificate and CA pool are swapped atomically by
// ReloadTLS (SIGHUP): each handshake reads the ones in force, and open
// connections keep the session they made.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
)

// ErrNoTLS is returned by ServeTLS when Options name no certificate.
var ErrNoTLS = errors.New("railmq: no TLS certificate configured")

// tlsState is the server's TLS configuration. on and clientAuth are fixed
// at New; cfg is swapped whole by ReloadTLS and read by every handshake.
type tlsState struct {
	on         bool
	clientAuth tls.ClientAuthType
	cfg        atomic.Pointer[tls.Config] // the certificate and CA pool in force
	// startFrame is connection.start for TLS connections: EXTERNAL is
	// offered on every one of them, with a client certificate or not, as
	// rabbit_auth_mechanism_ssl's should_offer does (a client without one
	// is then refused at login, not at mechanism choice).
	startFrame []byte
}

// mechanismsTLS is what connection.start offers on TLS: the plain
// listeners' list, then EXTERNAL, as RabbitMQ 3.10.8 lists them.
const mechanismsTLS = "AMQPLAIN PLAIN EXTERNAL"

// initTLS checks the TLS options and loads the certificate, before
// anything is started. No certificate means no TLS.
func (s *Server) initTLS() error {
	o := &s.opts
	if o.TLSCertFile == "" && o.TLSKeyFile == "" {
		if o.TLSCAFile != "" || o.TLSFailIfNoPeerCert || o.TLSVerify != "verify_none" {
			return errors.New("tls: client verification options given without a certificate and key")
		}
		return nil
	}
	if o.TLSCertFile == "" || o.TLSKeyFile == "" {
		return errors.New("tls: a certificate needs both its certificate file and its key file")
	}
	ca, err := clientAuth(o.TLSVerify, o.TLSFailIfNoPeerCert)
	if err != nil {
		return err
	}
	if ca != tls.NoClientCert && o.TLSCAFile == "" {
		return errors.New("tls: verify_peer needs a CA file to verify client certificates against")
	}
	s.tls.on, s.tls.clientAuth = true, ca
	cfg, err := s.loadTLS()
	if err != nil {
		return err
	}
	s.tls.cfg.Store(cfg)
	s.tls.startFrame = amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionStart{
		VersionMajor: 0, VersionMinor: 9, ServerProperties: s.serverProperties(),
		Mechanisms: mechanismsTLS, Locales: "en_US",
	})
	s.log.Info("tls certificate loaded", append(certFields(cfg), zap.String("verify", o.TLSVerify),
		zap.Bool("fail_if_no_peer_cert", o.TLSFailIfNoPeerCert))...)
	return nil
}

// clientAuth maps RabbitMQ's ssl_options.verify and fail_if_no_peer_cert
// to Go's. "peer" and "none" are accepted for verify_peer and verify_none.
// fail_if_no_peer_cert without verify_peer is refused, as Erlang's ssl
// refuses it ({options, incompatible, ...}: RabbitMQ 3.10.8 then starts
// without its TLS listener).
func clientAuth(verify string, failIfNoPeerCert bool) (tls.ClientAuthType, error) {
	switch verify {
	case "verify_none", "none":
		if failIfNoPeerCert {
			return 0, errors.New("tls: fail_if_no_peer_cert needs verify_peer")
		}
		return tls.NoClientCert, nil
	case "verify_peer", "peer":
		if failIfNoPeerCert {
			return tls.RequireAndVerifyClientCert, nil
		}
		return tls.VerifyClientCertIfGiven, nil
	}
	return 0, fmt.Errorf("tls: verify %q is neither verify_none nor verify_peer", verify)
}

// loadTLS reads the certificate, key and CA files into a config for the
// handshakes to come. TLS 1.2 and 1.3 only (RabbitMQ 3.10.8 on OTP 25
// also accepts 1.0 and 1.1; every RabbitMQ TLS guide disables them).
// Session tickets are off: AMQP connections are long-lived, and a resumed
// session would skip the verification against a reloaded CA pool.
func (s *Server) loadTLS() (*tls.Config, error) {
	o := &s.opts
	cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: loading %s and %s: %w", o.TLSCertFile, o.TLSKeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:             tls.VersionTLS12,
		Certificates:           []tls.Certificate{cert},
		ClientAuth:             s.tls.clientAuth,
		SessionTicketsDisabled: true,
	}
	if o.TLSCAFile != "" {
		pem, err := os.ReadFile(o.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: no PEM certificate in the CA file %s", o.TLSCAFile)
		}
		cfg.ClientCAs = pool
	}
	return cfg, nil
}

func certFields(cfg *tls.Config) []zap.Field {
	leaf := cfg.Certificates[0].Leaf // set by LoadX509KeyPair
	if leaf == nil {
		return nil
	}
	return []zap.Field{zap.String("subject", leaf.Subject.String()), zap.Time("not_after", leaf.NotAfter)}
}

// ServeTLS is Serve for a TLS listener (RabbitMQ's listeners.ssl.N, port
// 5671): every connection accepted on ln does a TLS handshake with the
// certificate in force, then speaks AMQP as on any other listener, with
// the EXTERNAL mechanism offered too.
func (s *Server) ServeTLS(ln net.Listener) error {
	if !s.tls.on {
		ln.Close()
		return ErrNoTLS
	}
	return s.Serve(&tlsListener{Listener: ln, cfg: &tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.tls.cfg.Load(), nil },
	}})
}

// tlsListener wraps accepted connections in TLS; the handshake is made by
// the connection's first read (on its own goroutine, under the handshake
// timeout), not by Accept.
type tlsListener struct {
	net.Listener
	cfg *tls.Config
}

func (l *tlsListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &serverTLSConn{Conn: tls.Server(nc, l.cfg), raw: nc}, nil
}

// serverTLSConn is a TLS connection that, once its handshake has failed,
// reads the raw socket: the reads that follow are the teardown's linger,
// which discards what it reads until the client closes. A failed
// tls.Conn answers every read with its error at once, and closing the
// socket with the client's data unread would send a RST that can destroy
// our alert before the client reads it (amqp091-go writes its protocol
// header as soon as its side of a TLS 1.3 handshake is done, before the
// server has checked its certificate).
type serverTLSConn struct {
	*tls.Conn
	raw    net.Conn
	failed bool // reader-owned
}

func (c *serverTLSConn) Read(p []byte) (int, error) {
	if c.failed {
		return c.raw.Read(p)
	}
	n, err := c.Conn.Read(p)
	if err != nil && !isTimeout(err) && !c.Conn.ConnectionState().HandshakeComplete {
		c.failed = true
	}
	return n, err
}

// isTLS reports whether Serve is serving a TLS listener (for its log).
func isTLS(ln net.Listener) bool {
	_, ok := ln.(*tlsListener)
	return ok
}

// ReloadTLS reads the certificate, key and CA files again (on SIGHUP):
// new handshakes use them, open connections are not touched. If anything
// fails to load, the certificates in force stay and the error is logged
// and returned. Without TLS it does nothing.
func (s *Server) ReloadTLS() error {
	if !s.tls.on {
		s.log.Info("no tls certificate to reload")
		return nil
	}
	cfg, err := s.loadTLS()
	if err != nil {
		s.log.Error("tls certificates not reloaded, the current ones stay in use", zap.Error(err))
		return err
	}
	s.tls.cfg.Store(cfg)
	s.log.Info("tls certificates reloaded", certFields(cfg)...)
	return nil
}

// ManagementTLSConfig is the configuration of an HTTPS management
// listener (rabbitmq_management's management.ssl.*): the AMQP
// certificate, reloaded with it; no client certificate is asked for
// (management.ssl's default, verify_none). Nil without TLS.
func (s *Server) ManagementTLSConfig() *tls.Config {
	if !s.tls.on {
		return nil
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &s.tls.cfg.Load().Certificates[0], nil
		},
	}
}

// tlsConn is the connection's TLS layer, or nil on a plain listener.
func (c *conn) tlsConn() *tls.Conn {
	if tc, ok := c.nc.(*serverTLSConn); ok {
		return tc.Conn
	}
	return nil
}

// startFrame is the connection.start this connection is sent.
func (c *conn) startFrame() []byte {
	if c.tlsConn() != nil {
		return c.srv.tls.startFrame
	}
	return c.srv.startFrame
}

// offersExternal reports whether EXTERNAL was offered: on TLS connections.
// Elsewhere RabbitMQ treats it as an unknown mechanism (a silent close).
func (c *conn) offersExternal() bool { return c.tlsConn() != nil }

// externalUser is the user name a verified client certificate logs in as
// with EXTERNAL: its subject's CN, several joined with "," (rabbit_ssl's
// peer_cert_auth_name with ssl_cert_login_from = common_name). False
// without a verified certificate (none sent, or verify_none, which asks
// for none) or without a CN.
func (c *conn) externalUser() (string, bool) {
	tc := c.tlsConn()
	if tc == nil {
		return "", false
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return "", false
	}
	return commonName(st.PeerCertificates[0])
}

var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

func commonName(cert *x509.Certificate) (string, bool) {
	var cns []string
	for _, a := range cert.Subject.Names {
		if v, ok := a.Value.(string); ok && a.Type.Equal(oidCommonName) {
			cns = append(cns, v)
		}
	}
	return strings.Join(cns, ","), len(cns) > 0
}

// externalLogin logs a client in with EXTERNAL: as the user its verified
// certificate names, who must exist; no password is checked.
// loopback_users apply as with PLAIN (rabbit_reader's auth_phase checks
// them after any mechanism). It returns the name it tried.
func (c *conn) externalLogin() (string, *auth.User, bool) {
	name, ok := c.externalUser()
	if !ok {
		return "", nil, false
	}
	u := c.srv.reg.User(name)
	if u == nil || slices.Contains(c.srv.opts.LoopbackUsers, name) && !isLoopback(c.nc.RemoteAddr()) {
		return name, nil, false
	}
	return name, u, true
}
