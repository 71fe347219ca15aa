// Package amqp is the AMQP 0-9-1 wire protocol: frames, the method structs
// and codecs generated from RabbitMQ's extended spec (spec_gen.go, written
// by gen.go), field tables, content headers, reply codes and Error.
//
// It imports the standard library only. Decoding is strict and bounded:
// every length prefix is checked against the bytes at hand, and a frame's
// size against the negotiated frame_max before anything is read.
package amqp
