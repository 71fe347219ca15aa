package conformance

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// TLS as RabbitMQ 3.10.8 does it with listeners.ssl.N, ssl_options and
// the rabbitmq_auth_mechanism_ssl plugin (auth_mechanisms PLAIN,
// AMQPLAIN, EXTERNAL; ssl_cert_login_from = common_name), compared side
// by side with one (see docs/operations.md, TLS). Certificates are made per test.

// pki is a test's CA and the broker's certificate files.
type pki struct {
	dir                       string
	ca                        *testutil.CA
	caFile, certFile, keyFile string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), ca: testutil.NewCA(t, "railmq test CA")}
	p.caFile = p.ca.Write(t, p.dir, "ca")
	p.certFile, p.keyFile = p.ca.Server(t, "server-1").Write(t, p.dir, "server")
	return p
}

// opts configures the broker's TLS with p's files.
func (p *pki) opts(verify string, failIfNoPeerCert bool) broker.Options {
	return broker.Options{TLSCertFile: p.certFile, TLSKeyFile: p.keyFile, TLSCAFile: p.caFile,
		TLSVerify: verify, TLSFailIfNoPeerCert: failIfNoPeerCert}
}

// client is a client configuration that trusts p's CA and presents certs.
func (p *pki) client(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: p.ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12}
}

// startTLS starts an in-process broker that also serves TLS (ServeTLS) on
// a loopback port, which it returns.
func startTLS(t *testing.T, opts broker.Options) (*testutil.Broker, string) {
	t.Helper()
	testutil.InProcess(t)
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	b, stop := testutil.StartStoppable(t, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Server.ServeTLS(ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, broker.ErrServerClosed) {
			t.Errorf("ServeTLS: %v", err)
		}
	})
	return b, ln.Addr().String()
}

// amqps is the URL of the TLS listener at addr, with userinfo if given.
func amqps(userinfo, addr string) string {
	if userinfo != "" {
		userinfo += "@"
	}
	return "amqps://" + userinfo + addr + "/"
}

// dialExternal connects with the EXTERNAL mechanism only.
func dialExternal(addr string, cfg *tls.Config) (*rmq.Connection, error) {
	return rmq.DialConfig(amqps("", addr), rmq.Config{SASL: []rmq.Authentication{&rmq.ExternalAuth{}}, TLSClientConfig: cfg})
}

// roundTrip publishes a message with confirms (with user-id set, if
// given: the broker acks it only if that is the user logged in) and gets
// it back.
func roundTrip(t *testing.T, c *rmq.Connection, userID string) {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	body := "over tls as " + userID
	dc, err := ch.PublishWithDeferredConfirm("", q.Name, false, false, rmq.Publishing{UserId: userID, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if !dc.Wait() {
		t.Fatal("publish nacked")
	}
	msgs, err := ch.Consume(q.Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume (user-id %q refused?): %v", userID, err)
	}
	select {
	case d := <-msgs:
		if string(d.Body) != body || d.UserId != userID {
			t.Fatalf("got %q from %q", d.Body, d.UserId)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
}

// amqp091-go's DialTLS against a server certificate signed by the CA the
// client trusts (checked for 127.0.0.1, the URL's host): publish and
// consume over TLS 1.3, and over TLS 1.2 when the client offers no more.
func TestTLSPublishConsume(t *testing.T) {
	p := newPKI(t)
	b, addr := startTLS(t, p.opts("", false))
	for _, max := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		cfg := p.client()
		cfg.MaxVersion = max
		c, err := rmq.DialTLS(amqps("guest:guest", addr), cfg)
		if err != nil {
			t.Fatalf("DialTLS (max version %x): %v", max, err)
		}
		st := c.ConnectionState()
		if st.Version != max || !st.HandshakeComplete || len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "server-1" {
			t.Errorf("connection state: version %x, complete %v, peer %v", st.Version, st.HandshakeComplete, st.PeerCertificates)
		}
		roundTrip(t, c, "guest")
		c.Close()
	}
	// The plain listener is unchanged beside it.
	c, err := rmq.Dial(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "guest")
	c.Close()

	// A client that does not trust the CA refuses the server.
	if _, err := rmq.DialTLS(amqps("guest:guest", addr), &tls.Config{MinVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("a client without the CA connected")
	}
}

// Only TLS 1.2 and 1.3: a TLS 1.1 or 1.0 client gets a protocol_version
// alert. (RabbitMQ 3.10.8 on OTP 25 still accepts both by default; its
// TLS guide disables them.)
func TestTLSRefusesTLS11(t *testing.T) {
	p := newPKI(t)
	_, addr := startTLS(t, p.opts("", false))
	for _, v := range []uint16{tls.VersionTLS11, tls.VersionTLS10} {
		cfg := p.client()
		cfg.MinVersion, cfg.MaxVersion = v, v
		c, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			c.Close()
			t.Fatalf("TLS version %x accepted", v)
		}
		if !strings.Contains(err.Error(), "protocol version not supported") {
			t.Errorf("TLS version %x: %v, want the server's protocol_version alert", v, err)
		}
	}
}

// verify_peer with fail_if_no_peer_cert: a client without a certificate
// fails the TLS handshake, one with a certificate the CA signed connects,
// and one whose certificate another CA signed fails (unknown_ca).
func TestTLSVerifyPeerFailIfNoPeerCert(t *testing.T) {
	for _, verify := range []string{"verify_peer", "peer"} {
		t.Run(verify, func(t *testing.T) {
			p := newPKI(t)
			_, addr := startTLS(t, p.opts(verify, true))

			other := testutil.NewCA(t, "another CA").Client(t, "alice").TLS(t)
			// Go's client sends only a certificate the server's CA list
			// accepts; this one goes anyway, as openssl would send it.
			otherCA := func(cfg *tls.Config) *tls.Config {
				cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &other, nil }
				return cfg
			}
			// Refused with the alerts RabbitMQ 3.10.8 sends. amqp091-go
			// reports them or, when its reader sees the alert before it has
			// sent the protocol header, "connection is not open"; a raw
			// client that writes the header first (as amqp091-go may)
			// always reads the alert, not a reset.
			for _, tc := range []struct {
				name  string
				max   uint16
				cfg   *tls.Config
				alert string
			}{
				{"TLS 1.3, no certificate", tls.VersionTLS13, p.client(), "tls: certificate required"},
				{"TLS 1.2, no certificate", tls.VersionTLS12, p.client(), "tls: handshake failure"},
				{"TLS 1.3, another CA", tls.VersionTLS13, otherCA(p.client()), "tls: unknown certificate authority"},
				{"TLS 1.2, another CA", tls.VersionTLS12, otherCA(p.client()), "tls: unknown certificate authority"},
			} {
				tc.cfg.MaxVersion = tc.max
				if c, err := rmq.DialTLS(amqps("guest:guest", addr), tc.cfg); err == nil {
					c.Close()
					t.Fatalf("%s: connected", tc.name)
				}
				nc, err := tls.Dial("tcp", addr, tc.cfg)
				if err == nil {
					_, err = nc.Write([]byte("AMQP\x00\x00\x09\x01"))
					if err == nil {
						_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
						_, err = nc.Read(make([]byte, 1))
					}
					nc.Close()
				}
				if err == nil || !strings.Contains(err.Error(), "remote error: "+tc.alert) {
					t.Errorf("%s: %v, want the alert %q", tc.name, err, tc.alert)
				}
			}

			c, err := rmq.DialTLS(amqps("guest:guest", addr), p.client(p.ca.Client(t, "alice").TLS(t)))
			if err != nil {
				t.Fatalf("a certificate signed by the CA: %v", err)
			}
			if len(c.ConnectionState().VerifiedChains) == 0 {
				t.Error("no verified chain")
			}
			roundTrip(t, c, "guest")
			c.Close()
		})
	}
}

// verify_peer without fail_if_no_peer_cert: a client without a
// certificate connects, one with a bad certificate still does not.
func TestTLSVerifyPeerOptionalCert(t *testing.T) {
	p := newPKI(t)
	_, addr := startTLS(t, p.opts("verify_peer", false))
	c, err := rmq.DialTLS(amqps("guest:guest", addr), p.client())
	if err != nil {
		t.Fatalf("no certificate: %v", err)
	}
	roundTrip(t, c, "guest")
	c.Close()
	other := testutil.NewCA(t, "another CA").Client(t, "guest").TLS(t)
	cfg := p.client()
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &other, nil }
	if c, err := rmq.DialTLS(amqps("guest:guest", addr), cfg); err == nil {
		c.Close()
		t.Fatal("a certificate from another CA was accepted")
	}
}

// startMechanisms reads the mechanisms connection.start offers.
func startMechanisms(t *testing.T, r *testutil.Raw) string {
	t.Helper()
	r.Write([]byte("AMQP\x00\x00\x09\x01"))
	return r.Expect((*amqp.ConnectionStart)(nil)).(*amqp.ConnectionStart).Mechanisms
}

// connection.start offers EXTERNAL on TLS connections only, after PLAIN
// and AMQPLAIN, with a client certificate or without (as
// rabbit_auth_mechanism_ssl's should_offer: a client without one is
// refused at login), with verify_none too.
func TestTLSMechanisms(t *testing.T) {
	for _, verify := range []string{"verify_none", "verify_peer"} {
		t.Run(verify, func(t *testing.T) {
			p := newPKI(t)
			b, addr := startTLS(t, p.opts(verify, false))
			if got := startMechanisms(t, testutil.DialRaw(t, b.Addr)); got != "AMQPLAIN PLAIN" {
				t.Errorf("plain listener offers %q", got)
			}
			if got := startMechanisms(t, testutil.DialRawTLS(t, addr, p.client())); got != "AMQPLAIN PLAIN EXTERNAL" {
				t.Errorf("TLS, no certificate: %q", got)
			}
			if got := startMechanisms(t, testutil.DialRawTLS(t, addr, p.client(p.ca.Client(t, "guest").TLS(t)))); got != "AMQPLAIN PLAIN EXTERNAL" {
				t.Errorf("TLS with a certificate: %q", got)
			}
		})
	}
}

// EXTERNAL logs in as the user the verified client certificate's CN
// names (several CNs joined with ","), with no password; the user must
// exist. The user-id check shows who is logged in.
func TestTLSExternalLogin(t *testing.T) {
	p := newPKI(t)
	opts := p.opts("verify_peer", false)
	opts.Users = map[string]string{"guest": "guest", "alice": "alice's password", "alice,bob": "x"}
	b, addr := startTLS(t, opts)

	for _, cns := range [][]string{{"alice"}, {"alice", "bob"}, {"guest"}} {
		c, err := dialExternal(addr, p.client(p.ca.Client(t, cns...).TLS(t)))
		if err != nil {
			t.Fatalf("EXTERNAL with CN %v: %v", cns, err)
		}
		roundTrip(t, c, strings.Join(cns, ","))
		c.Close()
	}
	// A verified certificate with PLAIN logs in by the password as usual.
	c, err := rmq.DialTLS(amqps("alice:alice's%20password", addr), p.client(p.ca.Client(t, "guest").TLS(t)))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "alice")
	c.Close()

	// Refused: a CN that is no user, a certificate without a CN, and no
	// certificate at all. (At once: each refusal waits out the silent
	// close delay.)
	var refused sync.WaitGroup
	for name, cfg := range map[string]*tls.Config{
		"unknown user":   p.client(p.ca.Client(t, "nobody").TLS(t)),
		"no CN":          p.client(p.ca.Client(t).TLS(t)),
		"no certificate": p.client(),
	} {
		refused.Go(func() {
			if c, err := dialExternal(addr, cfg); err == nil {
				c.Close()
				t.Errorf("%s: EXTERNAL login accepted", name)
			} else if !errors.Is(err, rmq.ErrCredentials) {
				t.Errorf("%s: %v, want %v", name, err, rmq.ErrCredentials)
			}
		})
	}
	defer refused.Wait()
	// On the plain listener EXTERNAL is not offered: amqp091-go gives up
	// itself, and a client that sends it anyway is closed on without a
	// word, as for an unknown mechanism.
	if c, err := rmq.DialConfig(b.URL, rmq.Config{SASL: []rmq.Authentication{&rmq.ExternalAuth{}}}); !errors.Is(err, rmq.ErrSASL) {
		if c != nil {
			c.Close()
		}
		t.Errorf("EXTERNAL on the plain listener: %v, want %v", err, rmq.ErrSASL)
	}
	r := testutil.DialRaw(t, b.Addr)
	startMechanisms(t, r)
	r.Send(0, &amqp.ConnectionStartOk{ClientProperties: amqp.Table{"capabilities": amqp.Table{"authentication_failure_close": true}},
		Mechanism: "EXTERNAL", Response: "\x00*\x00*", Locale: "en_US"})
	if _, m, err := r.Next(); err == nil {
		t.Errorf("EXTERNAL on the plain listener answered with %#v", m)
	}
}

// With authentication_failure_close, a refused EXTERNAL login gets
// RabbitMQ's 403 with the mechanism's name, as PLAIN does; under
// verify_none no certificate is asked for, so EXTERNAL never succeeds.
func TestTLSExternalRefusedText(t *testing.T) {
	for _, verify := range []string{"verify_peer", "verify_none"} {
		t.Run(verify, func(t *testing.T) {
			p := newPKI(t)
			_, addr := startTLS(t, p.opts(verify, false))
			certs := []tls.Certificate{}
			if verify == "verify_none" {
				certs = append(certs, p.ca.Client(t, "guest").TLS(t))
			}
			r := testutil.DialRawTLS(t, addr, p.client(certs...))
			startMechanisms(t, r)
			r.Send(0, &amqp.ConnectionStartOk{ClientProperties: amqp.Table{"capabilities": amqp.Table{"authentication_failure_close": true}},
				Mechanism: "EXTERNAL", Response: "\x00*\x00*", Locale: "en_US"})
			cc := r.ExpectConnectionClose()
			want := "ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. For details see the broker logfile."
			if cc.ReplyCode != 403 || cc.ReplyText != want {
				t.Errorf("got %d %q", cc.ReplyCode, cc.ReplyText)
			}
		})
	}
}

// ReloadTLS (SIGHUP) swaps the certificate and the CA pool for new
// connections; a connection made before goes on with its session. A bad
// file keeps what was in force.
func TestTLSReload(t *testing.T) {
	p := newPKI(t)
	opts := p.opts("verify_peer", false)
	opts.Users = map[string]string{"guest": "guest", "alice": "pw"}
	b, addr := startTLS(t, opts)
	old, err := dialExternal(addr, p.client(p.ca.Client(t, "alice").TLS(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldCh, err := old.Channel()
	if err != nil {
		t.Fatal(err)
	}

	// The new certificate from the same CA; client certificates now from
	// a new CA only.
	p.ca.Server(t, "server-2").Write(t, p.dir, "server")
	ca2 := testutil.NewCA(t, "the new client CA")
	ca2.Write(t, p.dir, "ca")
	if err := b.Server.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	servedCN := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", addr, p.client())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := servedCN(); cn != "server-2" {
		t.Fatalf("after reload the server presents %q", cn)
	}
	if c, err := dialExternal(addr, p.client(ca2.Client(t, "alice").TLS(t))); err != nil {
		t.Fatalf("a certificate of the new CA: %v", err)
	} else {
		roundTrip(t, c, "alice")
		c.Close()
	}
	oldCert := p.ca.Client(t, "alice").TLS(t)
	cfg := p.client()
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &oldCert, nil }
	if c, err := dialExternal(addr, cfg); err == nil {
		c.Close()
		t.Fatal("a certificate of the CA no longer trusted was accepted")
	}

	// The connection made before the reload still works.
	if _, err := oldCh.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatalf("the old connection after reload: %v", err)
	}
	roundTrip(t, old, "alice")

	// A broken certificate file, then a key that is not the certificate's:
	// refused, server-2 stays.
	testutil.WriteFile(t, p.certFile, []byte("not a certificate"))
	if err := b.Server.ReloadTLS(); err == nil {
		t.Fatal("reload of a broken certificate succeeded")
	}
	kp := p.ca.Server(t, "server-3")
	testutil.WriteFile(t, p.certFile, kp.CertPEM)
	testutil.WriteFile(t, p.keyFile, p.ca.Server(t, "server-4").KeyPEM)
	if err := b.Server.ReloadTLS(); err == nil {
		t.Fatal("reload of a certificate with another's key succeeded")
	}
	if cn := servedCN(); cn != "server-2" {
		t.Fatalf("after failed reloads the server presents %q", cn)
	}
	roundTrip(t, old, "alice")
}

// Over TLS the reader is woken as on TCP (a read deadline in the past, in
// the middle of TLS records too): a consumer timeout closes the channel
// and the connection goes on. A client that never starts its TLS
// handshake is dropped at the handshake timeout.
func TestTLSConsumerAndHandshakeTimeouts(t *testing.T) {
	p := newPKI(t)
	opts := p.opts("", false)
	opts.TimeoutCheckInterval = 50 * time.Millisecond
	opts.HandshakeTimeout = 300 * time.Millisecond
	_, addr := startTLS(t, opts)
	c, err := rmq.DialTLS(amqps("guest:guest", addr), p.client())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, false, false, false, rmq.Table{"x-consumer-timeout": int32(300)})
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *rmq.Error, 1))
	ds, err := ch.Consume(q.Name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", q.Name, false, false, rmq.Publishing{Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ds: // held, never acked
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 406 {
			t.Fatalf("channel closed with %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed by the consumer timeout")
	}
	roundTrip(t, c, "guest")

	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if n, err := nc.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v: not dropped", n, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("dropped after %v", d)
	}
}

// Debian's openssl s_client completes a TLS handshake with the broker,
// verifying its certificate, and gets AMQP's protocol header back for a
// bad header, as from RabbitMQ's TLS listener; with verify_peer it
// connects with a client certificate of the CA.
func TestTLSOpenSSLClient(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("no openssl binary")
	}
	p := newPKI(t)
	_, addr := startTLS(t, p.opts("verify_peer", true))
	clientCert, clientKey := p.ca.Client(t, "guest").Write(t, p.dir, "client")
	run := func(args ...string) (stdout, stderr string, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"s_client", "-connect", addr, "-servername", "localhost",
			"-CAfile", p.caFile, "-verify_return_error", "-brief", "-ign_eof"}, args...)...)
		cmd.Stdin = strings.NewReader("GET / HTTP/1.0\r\n\r\n")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	stdout, stderr, err := run("-cert", clientCert, "-key", clientKey)
	if err != nil {
		t.Fatalf("openssl s_client: %v\n%s", err, stderr)
	}
	if stdout != "AMQP\x00\x00\x09\x01" {
		t.Errorf("got %q, want AMQP's protocol header", stdout)
	}
	for _, want := range []string{"Protocol version: TLSv1.3", "Verification: OK", "Peer certificate: CN = server-1"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("s_client output lacks %q:\n%s", want, stderr)
		}
	}
	// Without a client certificate, and over TLS 1.1 (which OpenSSL 3
	// offers only at security level 0): refused by the broker's alert.
	if _, stderr, err := run(); err == nil || !strings.Contains(stderr, "certificate required") {
		t.Errorf("without a client certificate: %v\n%s", err, stderr)
	}
	if _, stderr, err := run("-cert", clientCert, "-key", clientKey, "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"); err == nil || !strings.Contains(stderr, "alert protocol version") {
		t.Errorf("TLS 1.1: %v\n%s", err, stderr)
	}
}

// The management API over HTTPS (ManagementTLSConfig) with the AMQP
// certificate, reloaded with it.
func TestTLSManagementHTTPS(t *testing.T) {
	p := newPKI(t)
	b, _ := startTLS(t, p.opts("", false))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: b.ManagementHandler(), TLSConfig: b.Server.ManagementTLSConfig(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.ServeTLS(ln, "", "") }()
	defer func() {
		hs.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTLS: %v", err)
		}
	}()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: p.client()}}
	defer hc.CloseIdleConnections()
	get := func() string {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+ln.Addr().String()+"/api/overview", nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(body), "railmq") {
			t.Fatalf("GET /api/overview: %s %s", resp.Status, body)
		}
		return resp.TLS.PeerCertificates[0].Subject.CommonName
	}
	if cn := get(); cn != "server-1" {
		t.Errorf("served %q", cn)
	}
	p.ca.Server(t, "server-2").Write(t, p.dir, "server")
	if err := b.Server.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	if cn := get(); cn != "server-2" {
		t.Errorf("after reload served %q", cn)
	}
}

// The real binary: --tls-listen and the other TLS flags (some from their
// RAILMQ_ variables), --management-tls-listen, and SIGHUP reloading the
// certificate while a connection stays open.
func TestTLSBinarySIGHUP(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	p := newPKI(t)
	addr, tlsAddr, mgmtAddr := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	logFile := filepath.Join(t.TempDir(), "log")
	logs, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd := exec.Command(bin, "--listen", addr, "--data-dir", t.TempDir(), "--log-format", "json",
		"--tls-listen", tlsAddr, "--tls-verify", "verify_peer", "--management-tls-listen", mgmtAddr)
	cmd.Env = append(os.Environ(), "RAILMQ_TLS_CERT="+p.certFile, "RAILMQ_TLS_KEY="+p.keyFile, "RAILMQ_TLS_CA="+p.caFile,
		"RAILMQ_TLS_FAIL_IF_NO_PEER_CERT=true")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	testutil.WaitListening(t, tlsAddr, 10*time.Second)
	cert := p.ca.Client(t, "guest").TLS(t)
	c, err := dialExternal(tlsAddr, p.client(cert))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := rmq.DialTLS(amqps("guest:guest", tlsAddr), p.client()); err == nil {
		t.Error("fail_if_no_peer_cert from RAILMQ_TLS_FAIL_IF_NO_PEER_CERT: a client without a certificate connected")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: p.client(), DisableKeepAlives: true}}
	req, _ := http.NewRequest("GET", "https://"+mgmtAddr+"/api/overview", nil)
	req.SetBasicAuth("guest", "guest")
	if resp, err := hc.Do(req); err != nil {
		t.Fatalf("management over HTTPS: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("management over HTTPS: %s", resp.Status)
		}
	}

	p.ca.Server(t, "server-2").Write(t, p.dir, "server")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		tc, err := tls.Dial("tcp", tlsAddr, p.client(cert))
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].Subject.CommonName == "server-2"
	}, "the new certificate served after SIGHUP")
	roundTrip(t, c, "guest")
	c.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd, 10*time.Second); err != nil {
		t.Fatalf("exit: %v", err)
	}
	out, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"msg":"tls certificate loaded"`, `"msg":"tls certificates reloaded","subject":"CN=server-2"`,
		`"msg":"listening","addr":"` + tlsAddr + `","tls":true`, `"msg":"management API listening","addr":"` + mgmtAddr + `","tls":true`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

// Flags the binary refuses: TLS listeners without a certificate (exit
// 2), fail_if_no_peer_cert without verify_peer (exit 1, as RabbitMQ's
// listener fails with {options, incompatible, ...}).
func TestTLSBinaryBadFlags(t *testing.T) {
	testutil.InProcess(t)
	bin := testutil.Binary(t)
	p := newPKI(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--tls-listen", testutil.FreePort(t)}, 2},
		{[]string{"--management-tls-listen", testutil.FreePort(t), "--tls-cert", p.certFile}, 2},
		{[]string{"--tls-listen", testutil.FreePort(t), "--tls-cert", p.certFile, "--tls-key", p.keyFile, "--tls-fail-if-no-peer-cert"}, 1},
		{[]string{"--tls-listen", testutil.FreePort(t), "--tls-cert", p.certFile, "--tls-key", p.keyFile, "--tls-verify", "verify_peer"}, 1},
		{[]string{"--tls-listen", testutil.FreePort(t), "--tls-cert", p.certFile, "--tls-key", p.caFile}, 1},
	} {
		cmd := exec.Command(bin, append([]string{"--listen", testutil.FreePort(t), "--data-dir", t.TempDir()}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
			t.Errorf("%v: %v, want exit %d\n%s", tc.args, err, tc.code, out)
		}
	}
}
