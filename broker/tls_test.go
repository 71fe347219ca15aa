package broker_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// (An external test package: testutil, which makes the certificates,
// imports broker. The connections themselves are tested in
// conformance/tls_test.go.)

func shutdown(t *testing.T, s *broker.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// New accepts TLS options as RabbitMQ's ssl_options combine, and refuses
// the rest before it opens anything.
func TestTLSOptions(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "test CA")
	caFile := ca.Write(t, dir, "ca")
	cert, key := ca.Server(t, "server").Write(t, dir, "server")
	junk := filepath.Join(dir, "junk")
	testutil.WriteFile(t, junk, []byte("not PEM"))
	missing := filepath.Join(dir, "missing")
	_, otherKey := ca.Server(t, "other").Write(t, dir, "other")
	for _, tc := range []struct {
		name string
		o    broker.Options
		ok   bool
	}{
		{"no TLS", broker.Options{}, true},
		{"verify_none", broker.Options{TLSCertFile: cert, TLSKeyFile: key}, true},
		{"verify_none with a CA", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSCAFile: caFile, TLSVerify: "verify_none"}, true},
		{"none", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSVerify: "none"}, true},
		{"verify_peer", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSCAFile: caFile, TLSVerify: "verify_peer"}, true},
		{"peer", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSCAFile: caFile, TLSVerify: "peer"}, true},
		{"verify_peer, fail_if_no_peer_cert", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSCAFile: caFile, TLSVerify: "verify_peer", TLSFailIfNoPeerCert: true}, true},

		{"certificate without key", broker.Options{TLSCertFile: cert}, false},
		{"key without certificate", broker.Options{TLSKeyFile: key}, false},
		{"unknown verify", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSCAFile: caFile, TLSVerify: "verify_some"}, false},
		{"fail_if_no_peer_cert with verify_none", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSCAFile: caFile, TLSFailIfNoPeerCert: true}, false},
		{"verify_peer without a CA", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSVerify: "verify_peer"}, false},
		{"CA without a certificate", broker.Options{TLSCAFile: caFile}, false},
		{"verify_peer without a certificate", broker.Options{TLSVerify: "verify_peer"}, false},
		{"missing certificate file", broker.Options{TLSCertFile: missing, TLSKeyFile: key}, false},
		{"key that is not PEM", broker.Options{TLSCertFile: cert, TLSKeyFile: junk}, false},
		{"key of another certificate", broker.Options{TLSCertFile: cert, TLSKeyFile: otherKey}, false},
		{"CA file without PEM", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSCAFile: junk, TLSVerify: "verify_peer"}, false},
		{"missing CA file", broker.Options{TLSCertFile: cert, TLSKeyFile: key, TLSCAFile: missing, TLSVerify: "verify_peer"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.DataDir = t.TempDir()
			s, err := broker.New(tc.o)
			if err == nil {
				shutdown(t, s)
			}
			if (err == nil) != tc.ok {
				t.Fatalf("New: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// Without a certificate there is nothing to serve or reload.
func TestTLSNotConfigured(t *testing.T) {
	s, err := broker.New(broker.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ServeTLS(ln); !errors.Is(err, broker.ErrNoTLS) {
		t.Errorf("ServeTLS: %v, want ErrNoTLS", err)
	}
	if err := s.ReloadTLS(); err != nil {
		t.Errorf("ReloadTLS: %v", err)
	}
	if s.ManagementTLSConfig() != nil {
		t.Error("a management TLS config without a certificate")
	}
}

// ReloadTLS swaps the certificate in force, and logs one line; a
// certificate, key or CA file that does not load keeps the one in force
// and logs one error.
func TestTLSReloadKeepsCertificateOnError(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "test CA")
	caFile := ca.Write(t, dir, "ca")
	cert, key := ca.Server(t, "server-1").Write(t, dir, "server")
	core, logs := observer.New(zapcore.InfoLevel)
	s, err := broker.New(broker.Options{DataDir: t.TempDir(), TLSCertFile: cert, TLSKeyFile: key, TLSCAFile: caFile,
		TLSVerify: "verify_peer", Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	cfg := s.ManagementTLSConfig()
	served := func() string {
		t.Helper()
		c, err := cfg.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.Subject.CommonName
	}
	if cn := served(); cn != "server-1" {
		t.Fatalf("serving %q", cn)
	}
	logs.TakeAll()

	reload := func(wantErr bool) {
		t.Helper()
		err := s.ReloadTLS()
		if (err != nil) != wantErr {
			t.Fatalf("ReloadTLS: %v, want error %v", err, wantErr)
		}
		entries := logs.TakeAll()
		if len(entries) != 1 {
			t.Fatalf("logged %d lines: %v", len(entries), entries)
		}
		if lvl := entries[0].Level; (lvl == zapcore.ErrorLevel) != wantErr {
			t.Errorf("logged %q at %v", entries[0].Message, lvl)
		}
	}
	ca.Server(t, "server-2").Write(t, dir, "server")
	reload(false)
	if cn := served(); cn != "server-2" {
		t.Fatalf("after reload serving %q", cn)
	}

	good := ca.Server(t, "server-3")
	for _, bad := range []struct {
		name  string
		write func()
	}{
		{"broken certificate", func() { testutil.WriteFile(t, cert, []byte("junk")) }},
		{"another's key", func() {
			testutil.WriteFile(t, cert, good.CertPEM)
			testutil.WriteFile(t, key, ca.Server(t, "server-4").KeyPEM)
		}},
		{"broken CA file", func() {
			good.Write(t, dir, "server")
			testutil.WriteFile(t, caFile, []byte("junk"))
		}},
	} {
		bad.write()
		reload(true)
		if cn := served(); cn != "server-2" {
			t.Fatalf("%s: serving %q", bad.name, cn)
		}
	}
	ca.Write(t, dir, "ca")
	reload(false)
	if cn := served(); cn != "server-3" {
		t.Fatalf("serving %q", cn)
	}
}
