// Command railmq runs the broker.
//
// Every flag has an environment variable: --data-dir is RAILMQ_DATA_DIR,
// and so on. A flag given on the command line wins over the variable,
// which wins over RabbitMQ's variables (env.go: RABBITMQ_DEFAULT_USER,
// ...), which win over a rabbitmq.conf file (--config or
// RABBITMQ_CONFIG_FILE; conf.go reads the format, conf_table.go maps
// RabbitMQ's keys to the flags, conf_apply.go applies them).
// docs/configuration.md has the table.
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
