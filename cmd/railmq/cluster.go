package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/railmq/railmq/cluster"
)

// clusterConfig is the cluster node's configuration the options give,
// raft logging to log; nil when --cluster-listen is not set. It reads the
// secret file and, with --cluster-tls, the certificates. An error is a
// *refusal.
func (o *options) clusterConfig(log *zap.Logger) (*cluster.NodeConfig, error) {
	if o.clusterListen == "" {
		return nil, nil
	}
	if o.nodeName == "" || o.clusterPeers == "" || o.clusterSecretFile == "" {
		return nil, &refusal{msg: "--cluster-listen needs --node-name, --cluster-peers and --cluster-secret-file"}
	}
	peers, err := cluster.ParsePeers(o.clusterPeers)
	if err != nil {
		return nil, &refusal{msg: "bad --cluster-peers", err: err}
	}
	secret, err := os.ReadFile(o.clusterSecretFile)
	if err != nil || len(bytes.TrimSpace(secret)) == 0 {
		return nil, &refusal{msg: "cannot read the cluster secret", fields: []zap.Field{zap.String("file", o.clusterSecretFile)}, err: err}
	}
	cfg := &cluster.NodeConfig{Name: o.nodeName, Listen: o.clusterListen, Peers: peers, Secret: bytes.TrimSpace(secret),
		Join: o.clusterJoin, Logger: log}
	if o.clusterTLS {
		tc, err := clusterTLSConfig(o.tlsCert, o.tlsKey, o.tlsCA)
		if err != nil {
			return nil, &refusal{msg: "bad --cluster-tls", err: err}
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

// clusterTLSConfig is the TLS between nodes: the node's certificate, as
// server and as client, and peers verified against the CA both ways.
func clusterTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("--cluster-tls needs --tls-cert, --tls-key and --tls-ca")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert}, nil
}
