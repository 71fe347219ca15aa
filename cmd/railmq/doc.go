// Command railmq runs the broker.
//
// Every flag has an environment variable: --data-dir is RAILMQ_DATA_DIR,
// and so on. A flag given on the command line wins over the variable.
//
// main.go parses the flags and environment, opens the broker (the store,
// the registry, recovery), listens on every --listen address, and on
// SIGINT or SIGTERM shuts down gracefully (broker.Server.Shutdown): every
// connection gets connection.close 320 CONNECTION_FORCED, the queues stop,
// and the store closes once its last group commit is synced; durable
// messages still unacked are in the store, redelivered after a restart.
package main
