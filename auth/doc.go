// Package auth is who may do what, as RabbitMQ's internal auth backend
// models it: users (password hashes as rabbit_password_hashing_* makes
// them, tags, limits) and, per user per virtual host, permissions
// (configure, write and read patterns) and topic permissions (write and
// read patterns on routing keys, per topic exchange). Connections check
// their operations against a Grant, whose patterns are swapped in place
// when an operator changes them, so that a check is a pointer load and a
// regular expression match, and a channel can remember what it last
// checked (see channel).
//
// It keeps everything in memory; the broker stores it (persist) and loads
// it at start. It imports amqp only, for the errors a refusal is.
package auth
