// Command railmq runs the broker.
//
// Every flag has an environment variable: --data-dir is RAILMQ_DATA_DIR,
// and so on. A flag given on the command line wins over the variable.
//
// main.go's run goes from flags to a serving broker in three steps:
// options.go defines the flags, reads the environment and the command
// line into options and checks them into the broker's Options; cluster.go
// builds the cluster node's configuration from them; serve.go opens the
// broker (the store, the registry, recovery), listens on every --listen
// address, and http.go serves the management API, metrics and pprof. On
// SIGINT or SIGTERM it shuts down gracefully (broker.Server.Shutdown):
// every connection gets connection.close 320 CONNECTION_FORCED, the
// queues stop, and the store closes once its last group commit is synced;
// durable messages still unacked are in the store, redelivered after a
// restart.
package main
