package main

import (
	"net"
	"net/http"
	_ "net/http/pprof" // served on --debug-listen only
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/metrics"
	"github.com/railmq/railmq/mgmt"
)

// startManagement listens on --management-listen before the broker
// starts: while the store recovers, the console shows how far it has got
// (the returned Startup's Progress is the broker's RecoveryProgress).
// stop closes the listener's server.
func startManagement(o *options, errc chan<- error, log *zap.Logger) (startup *mgmt.Startup, stop func(), err error) {
	startup = mgmt.NewStartup()
	if o.managementListen == "" {
		return startup, func() {}, nil
	}
	ln, err := net.Listen("tcp", o.managementListen)
	if err != nil {
		return nil, nil, err
	}
	hs := mgmt.NewServer(startup, mgmt.ServerLimits{})
	go func() { errc <- hs.Serve(ln) }()
	log.Info("management API listening", zap.String("addr", o.managementListen))
	return startup, func() { hs.Close() }, nil
}

// serveHTTP hands the management listener over to the broker, and serves
// Prometheus metrics on --prometheus-listen and the management API on
// --management-tls-listen. stop closes the servers it started.
func serveHTTP(srv *broker.Server, api *mgmt.API, startup *mgmt.Startup, o *options, errc chan<- error, log *zap.Logger) (stop func()) {
	var servers []*http.Server
	startup.Ready(api.Handler())
	if o.prometheusListen != "" { // rabbitmq_prometheus's prometheus.tcp.port
		ps := mgmt.NewServer(metrics.Handler(srv, metrics.Options{Utilisation: api.ConsumerUtilisation}), mgmt.ServerLimits{Public: true})
		ps.Addr = o.prometheusListen
		go func() { errc <- ps.ListenAndServe() }()
		servers = append(servers, ps)
		log.Info("prometheus metrics listening", zap.String("addr", o.prometheusListen))
	}
	if o.managementTLSListen != "" { // rabbitmq_management's management.ssl.port
		hs := mgmt.NewServer(api.Handler(), mgmt.ServerLimits{})
		hs.Addr, hs.TLSConfig = o.managementTLSListen, srv.ManagementTLSConfig()
		go func() { errc <- hs.ListenAndServeTLS("", "") }() // the certificate comes from TLSConfig
		servers = append(servers, hs)
		log.Info("management API listening", zap.String("addr", o.managementTLSListen), zap.Bool("tls", true))
	}
	return func() { closeAll(servers) }
}

// serveDebug serves Go's pprof endpoints on --debug-listen. stop closes
// the server.
func serveDebug(addr string, errc chan<- error, log *zap.Logger) (stop func()) {
	if addr == "" {
		return func() {}
	}
	// The mutex profile samples one contention event in 20 (a few
	// nanoseconds per contended unlock); only with pprof served.
	runtime.SetMutexProfileFraction(20)
	ds := &http.Server{Addr: addr, Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
	go func() { errc <- ds.ListenAndServe() }()
	log.Info("pprof listening", zap.String("addr", addr))
	return func() { ds.Close() }
}

// closeAll closes servers, the last started first.
func closeAll(servers []*http.Server) {
	for i := len(servers) - 1; i >= 0; i-- {
		servers[i].Close()
	}
}
