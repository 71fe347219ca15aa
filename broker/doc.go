// Package broker is the server: the listener and accept loop, one reader
// and one writer goroutine per connection (handshake, tuning, heartbeats,
// channel 0, frame dispatch to channels, exception handling), the memory
// alarm, the consumer-timeout sweeper, the management API subset, and
// graceful Shutdown. It wires the store, the vhost registry and channels
// together; nothing but cmd/ and tests imports it.
package broker
