package testutil

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/railmq/railmq/amqp"
)

// CA is a certificate authority made for one test: it issues server and
// client certificates with crypto/x509 (ECDSA P-256, quick to make).
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // the CA certificate, PEM
	key  *ecdsa.PrivateKey
}

// KeyPair is a certificate and its private key, PEM.
type KeyPair struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
}

var serial atomic.Int64

// oidCommonName is the subject attribute RabbitMQ's ssl_cert_login_from =
// common_name reads (id-at-commonName).
var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// NewCA makes a self-signed CA named cn.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"railmq tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Pool is a pool holding only this CA, for a client's RootCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server issues a server certificate for localhost and 127.0.0.1 with
// subject CN cn (tests tell two apart by it).
func (ca *CA) Server(t testing.TB, cn string) KeyPair {
	t.Helper()
	return ca.issue(t, pkix.Name{CommonName: cn}, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, x509.ExtKeyUsageServerAuth)
}

// Node issues a cluster node's certificate: for localhost and 127.0.0.1,
// good as a server's and as a client's (nodes dial each other).
func (ca *CA) Node(t testing.TB, cn string) KeyPair {
	t.Helper()
	return ca.issue(t, pkix.Name{CommonName: cn}, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// Client issues a client certificate whose subject has one CN per name,
// in that order (none: a subject with no CN at all).
func (ca *CA) Client(t testing.TB, cns ...string) KeyPair {
	t.Helper()
	name := pkix.Name{Organization: []string{"railmq tests"}}
	for _, cn := range cns {
		name.ExtraNames = append(name.ExtraNames, pkix.AttributeTypeAndValue{Type: oidCommonName, Value: cn})
	}
	return ca.issue(t, name, nil, nil, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, subject pkix.Name, dns []string, ips []net.IP, usages ...x509.ExtKeyUsage) KeyPair {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		Cert:    cert,
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TLS is the pair as a client presents it (tls.Config.Certificates).
func (k KeyPair) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(k.CertPEM, k.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Write writes the pair to dir/name.pem and dir/name.key (replacing
// them atomically, as a certificate renewal would) and returns the paths.
func (k KeyPair) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	WriteFile(t, certFile, k.CertPEM)
	WriteFile(t, keyFile, k.KeyPEM)
	return certFile, keyFile
}

// Write writes the CA certificate to dir/name.pem and returns the path.
func (ca *CA) Write(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name+".pem")
	WriteFile(t, p, ca.PEM)
	return p
}

// WriteFile replaces path with data atomically (a rename).
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// DialRawTLS is DialRaw over TLS: the handshake is done before it returns.
func DialRawTLS(t testing.TB, addr string, cfg *tls.Config) *Raw {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	r := &Raw{t: t, NC: nc, FR: amqp.NewFrameReader(bufio.NewReader(nc))}
	r.FR.Max = 131072
	return r
}
