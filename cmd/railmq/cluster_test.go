package main

import (
	"crypto/tls"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"go.uber.org/zap"

	"github.com/railmq/railmq/cluster"
	"github.com/railmq/railmq/internal/testutil"
)

func TestClusterConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write("cookie", "  s3cret\n")
	blank := write("blank", " \n\t\n")
	missing := filepath.Join(dir, "missing")
	peers := "a@h=127.0.0.1:25672, b@h=127.0.0.1:25673"
	node := []string{"--cluster-listen=127.0.0.1:25672", "--node-name=a@h", "--cluster-peers=" + peers, "--cluster-secret-file=" + secret}
	log := zap.NewNop()
	want := &cluster.NodeConfig{Name: "a@h", Listen: "127.0.0.1:25672", Peers: map[string]string{"a@h": "127.0.0.1:25672", "b@h": "127.0.0.1:25673"},
		Secret: []byte("s3cret"), Logger: log}

	for _, tc := range []struct {
		name string
		args []string
		want *cluster.NodeConfig
	}{
		{"not clustered", nil, nil},
		// The other cluster flags mean nothing without --cluster-listen.
		{"no cluster-listen", []string{"--node-name=a@h", "--cluster-peers=" + peers, "--cluster-secret-file=" + missing, "--cluster-tls", "--cluster-join"}, nil},
		{"node", node, want},
		{"joining", append(node, "--cluster-join"), func() *cluster.NodeConfig { c := *want; c.Join = true; return &c }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(t, nil, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := o.clusterConfig(log)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%v: %v\n got %+v\nwant %+v", tc.args, err, got, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		args   []string
		msg    string
		err    string // as checkRefusal
		is     error
		fields []zap.Field
	}{
		{name: "no node name", args: []string{"--cluster-listen=:1", "--cluster-peers=" + peers, "--cluster-secret-file=" + secret},
			msg: "--cluster-listen needs --node-name, --cluster-peers and --cluster-secret-file"},
		{name: "no peers", args: []string{"--cluster-listen=:1", "--node-name=a@h", "--cluster-secret-file=" + secret},
			msg: "--cluster-listen needs --node-name, --cluster-peers and --cluster-secret-file"},
		{name: "no secret", args: []string{"--cluster-listen=:1", "--node-name=a@h", "--cluster-peers=" + peers},
			msg: "--cluster-listen needs --node-name, --cluster-peers and --cluster-secret-file"},
		{name: "peer without address", args: []string{"--cluster-listen=:1", "--node-name=a@h", "--cluster-peers=a@h", "--cluster-secret-file=" + secret},
			msg: "bad --cluster-peers", err: `cluster: peer "a@h": want name=host:port`},
		{name: "peer address without port", args: []string{"--cluster-listen=:1", "--node-name=a@h", "--cluster-peers=a@h=localhost", "--cluster-secret-file=" + secret},
			msg: "bad --cluster-peers", err: `cluster: peer "a@h=localhost": address localhost: missing port in address`},
		{name: "secret file missing", args: []string{"--cluster-listen=:1", "--node-name=a@h", "--cluster-peers=" + peers, "--cluster-secret-file=" + missing},
			msg: "cannot read the cluster secret", err: "open " + missing + ": no such file or directory", is: fs.ErrNotExist,
			fields: []zap.Field{zap.String("file", missing)}},
		{name: "secret blank", args: []string{"--cluster-listen=:1", "--node-name=a@h", "--cluster-peers=" + peers, "--cluster-secret-file=" + blank},
			msg: "cannot read the cluster secret", fields: []zap.Field{zap.String("file", blank)}},
		{name: "tls without certificates", args: append(node, "--cluster-tls"),
			msg: "bad --cluster-tls", err: "--cluster-tls needs --tls-cert, --tls-key and --tls-ca"},
		{name: "tls without ca", args: append(node, "--cluster-tls", "--tls-cert=c", "--tls-key=k"),
			msg: "bad --cluster-tls", err: "--cluster-tls needs --tls-cert, --tls-key and --tls-ca"},
		{name: "tls certificate missing", args: append(node, "--cluster-tls", "--tls-cert="+missing, "--tls-key=k", "--tls-ca="+secret),
			msg: "bad --cluster-tls", err: "open " + missing + ": no such file or directory", is: fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(t, nil, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = o.clusterConfig(log)
			checkRefusal(t, err, tc.msg, tc.err, tc.is)
			if r, ok := err.(*refusal); ok && !reflect.DeepEqual(r.fields, tc.fields) {
				t.Errorf("fields %v, want %v", r.fields, tc.fields)
			}
		})
	}
}

// --cluster-tls: the node's certificate both ways, peers verified against
// the CA.
func TestClusterConfigTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "railmq test ca")
	caFile := ca.Write(t, dir, "ca")
	certFile, keyFile := ca.Node(t, "a@h").Write(t, dir, "node")
	otherCert, _ := testutil.NewCA(t, "other").Node(t, "a@h").Write(t, dir, "other")
	secret := filepath.Join(dir, "cookie")
	testutil.WriteFile(t, secret, []byte("s3cret"))
	noCA := filepath.Join(dir, "empty.pem")
	testutil.WriteFile(t, noCA, []byte("no pem here\n"))
	node := []string{"--cluster-listen=127.0.0.1:25672", "--node-name=a@h", "--cluster-peers=a@h=127.0.0.1:25672",
		"--cluster-secret-file=" + secret, "--cluster-tls"}

	o, _, err := parse(t, nil, append(node, "--tls-cert="+certFile, "--tls-key="+keyFile, "--tls-ca="+caFile)...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.clusterConfig(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg.TLS
	if tc == nil || tc.MinVersion != tls.VersionTLS12 || tc.ClientAuth != tls.RequireAndVerifyClientCert || len(tc.Certificates) != 1 {
		t.Fatalf("TLS config %+v", tc)
	}
	if tc.RootCAs == nil || !tc.RootCAs.Equal(ca.Pool()) || tc.ClientCAs != tc.RootCAs {
		t.Fatalf("peers are not verified against the CA, both ways: %+v", tc)
	}

	// A CA file without a certificate, a key that is not the certificate's.
	o, _, err = parse(t, nil, append(node, "--tls-cert="+certFile, "--tls-key="+keyFile, "--tls-ca="+noCA)...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.clusterConfig(zap.NewNop())
	checkRefusal(t, err, "bad --cluster-tls", "no certificate in "+noCA, nil)
	o, _, err = parse(t, nil, append(node, "--tls-cert="+otherCert, "--tls-key="+keyFile, "--tls-ca="+caFile)...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.clusterConfig(zap.NewNop())
	checkRefusal(t, err, "bad --cluster-tls", "tls: private key does not match public key", nil)
}
