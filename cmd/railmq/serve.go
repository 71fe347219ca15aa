package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/mgmt"
)

// serve starts the broker with opts and serves it, with its HTTP
// servers, until SIGINT or SIGTERM (exit 0) or a listener fails (exit 1).
// procs, when not nil, adapts the P count while the broker runs.
func serve(o *options, opts broker.Options, procs *procsAdapter, log *zap.Logger) int {
	errc := make(chan error, 16)
	// The management listener comes up first: while the store recovers,
	// the console shows how far it has got.
	startup, stopMgmt, err := startManagement(o, errc, log)
	if err != nil {
		log.Error("cannot listen for the management API", zap.Error(err))
		return 1
	}
	defer stopMgmt()
	opts.RecoveryProgress = startup.Progress
	if procs != nil {
		opts.BeforeDiskWork = procs.diskWork
	}
	srv, err := broker.New(opts)
	if err != nil {
		log.Error("cannot start broker", zap.Error(err))
		return 1
	}
	api := mgmt.New(srv, mgmt.Options{MaxBodySize: o.managementMaxBody})
	defer api.Close()
	if procs != nil {
		procs.start()
		defer procs.stop()
	}
	if o.loadDefinitions != "" {
		if err := mgmt.LoadDefinitions(srv, o.loadDefinitions); err != nil {
			log.Error("cannot start broker: loading definitions", zap.Error(err))
			shutdown(srv)
			return 1
		}
	}
	amqp, amqps, err := serveAMQP(srv, o, errc)
	if err != nil {
		log.Error("cannot listen", zap.Error(err))
		shutdown(srv)
		return 1
	}
	stopDebug := serveDebug(o.debugListen, errc, log)
	defer stopDebug()
	stopHTTP := serveHTTP(srv, api, startup, o, errc, log)
	defer stopHTTP()
	logBanner(log, o, amqp, amqps)
	// systemd's Type=notify (notify.go): recovered, and every listener up.
	sdNotify("READY=1\nSTATUS=serving", log)
	return waitSignals(srv, errc, log)
}

// serveAMQP listens on every --listen and --tls-listen address and serves
// them, or on none if any of them fails; it returns the addresses. With
// --tls-listen, --listen may be empty (RabbitMQ's listeners.tcp = none).
func serveAMQP(srv *broker.Server, o *options, errc chan<- error) (amqp, amqps []string, err error) {
	var lns []net.Listener
	if addrs := splitList(o.listen); len(addrs) > 0 || o.tlsListen == "" {
		if lns, err = listenAll(addrs); err != nil {
			return nil, nil, err
		}
	}
	var tlsLns []net.Listener // RabbitMQ's listeners.ssl.N
	if o.tlsListen != "" {
		if tlsLns, err = listenAll(splitList(o.tlsListen)); err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return nil, nil, err
		}
	}
	for _, ln := range lns {
		amqp = append(amqp, ln.Addr().String())
		go func() { errc <- srv.Serve(ln) }()
	}
	for _, ln := range tlsLns {
		amqps = append(amqps, ln.Addr().String())
		go func() { errc <- srv.ServeTLS(ln) }()
	}
	return amqp, amqps, nil
}

// listenAll opens a TCP listener on each address (RabbitMQ's
// listeners.tcp.N), or none and an error if any of them fails.
func listenAll(addrs []string) ([]net.Listener, error) {
	if len(addrs) == 0 {
		return nil, errors.New("--listen: no address")
	}
	var lns []net.Listener
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// waitSignals serves until SIGINT or SIGTERM, then shuts the broker down
// (exit 0), or until a listener fails (exit 1); SIGHUP reloads the TLS
// certificates.
func waitSignals(srv *broker.Server, errc <-chan error, log *zap.Logger) int {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP) // reloads the TLS certificates
	defer signal.Stop(hup)
	for {
		select {
		case err := <-errc:
			log.Error("listener failed", zap.Error(err))
			shutdown(srv)
			return 1
		case sig := <-sigc:
			log.Info("signal received, shutting down", zap.String("signal", sig.String()))
			signal.Stop(sigc)
			sdNotify("STOPPING=1\nSTATUS=shutting down", log)
			shutdown(srv)
			return 0
		case <-hup:
			_ = srv.ReloadTLS() // logs what it did
		}
	}
}

func shutdown(srv *broker.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}
