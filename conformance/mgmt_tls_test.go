package conformance

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
)

// A TLS connection as the management API shows it: ssl true, with
// RabbitMQ's names of the protocol, key exchange, cipher and hash
// (Erlang's ssl: "tlsv1.3", "any" for a TLS 1.3 suite, "aes_128_gcm",
// "sha256"); and GET /api/health/checks/certificate-expiration/{n}/{unit}
// fails with 503 when a TLS listener's certificate expires within that
// time, listing it as rabbit_mgmt_wm_health_check_certificate_expiration
// does ({"status":"failed","reason":"Certificates expiring","expired":
// [{node, protocol, interface, port, certfile, cacertfile,
// certfile_expires_on, cacertfile_expires_on}]}). The test's server
// certificate is valid for 24 hours.
func TestMgmtTLSConnectionAndCertificateExpiration(t *testing.T) {
	p := newPKI(t)
	b, addr := startTLS(t, p.opts("verify_none", false))
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	a := &api{t: t, url: hs.URL}
	c, err := rmq.DialTLS(amqps("guest:guest", addr), p.client())
	must(t, err)
	t.Cleanup(func() { c.Close() })
	var conn map[string]any
	a.call("GET", "/api/connections/"+strings.ReplaceAll(c.LocalAddr().String()+" -> "+c.RemoteAddr().String(), " ", "%20"), "guest", "guest", nil, &conn)
	if conn["ssl"] != true || conn["ssl_protocol"] != "tlsv1.3" || conn["ssl_key_exchange"] != "any" {
		t.Errorf("TLS connection: ssl %v protocol %v key exchange %v", conn["ssl"], conn["ssl_protocol"], conn["ssl_key_exchange"])
	}
	if cipher, _ := conn["ssl_cipher"].(string); cipher == "" || strings.Contains(cipher, "TLS_") {
		t.Errorf("ssl_cipher %v", conn["ssl_cipher"])
	}
	if h, _ := conn["ssl_hash"].(string); h != "sha256" && h != "sha384" {
		t.Errorf("ssl_hash %v", conn["ssl_hash"])
	}

	if code, body := a.raw("GET", "/api/health/checks/certificate-expiration/0/days"); code != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("within 0 days: %d %s", code, body)
	}
	var fail struct {
		Status, Reason string
		Expired        []map[string]any `json:"expired"`
	}
	if code := a.call("GET", "/api/health/checks/certificate-expiration/2/days", "guest", "guest", nil, &fail); code != 503 {
		t.Fatalf("within 2 days: %d, want 503", code)
	}
	if fail.Status != "failed" || fail.Reason != "Certificates expiring" || len(fail.Expired) != 1 {
		t.Fatalf("within 2 days: %+v", fail)
	}
	e := fail.Expired[0]
	_, port, _ := strings.Cut(addr, ":")
	if e["certfile"] != p.certFile || e["cacertfile"] != p.caFile || fmt.Sprint(e["port"]) != port || e["protocol"] != "amqp/ssl" || e["interface"] != "127.0.0.1" {
		t.Errorf("expired listener %v", e)
	}
	on, _ := e["certfile_expires_on"].([]any)
	if len(on) != 1 {
		t.Fatalf("certfile_expires_on %v", e["certfile_expires_on"])
	}
	at, err := time.Parse("2006-01-02 15:04:05", fmt.Sprint(on[0]))
	if err != nil || at.Before(time.Now().Add(23*time.Hour)) || at.After(time.Now().Add(25*time.Hour)) {
		t.Errorf("certfile_expires_on %v (%v), want in about 24 hours", on[0], err)
	}
}
