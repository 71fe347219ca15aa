package metrics

import (
	"strconv"

	"github.com/railmq/railmq/broker"
)

// The channel and connection families of RabbitMQ 3.10.8's
// rabbitmq_prometheus (its /metrics and /metrics/per-object, read from a
// running node with a pika client's channels open): on /metrics each is
// the sum over the channels (connections) open now, as RabbitMQ sums its
// channel_metrics tables, whose rows go when their channel closes; per
// object, one series per channel (connection). RabbitMQ labels them with
// the Erlang process (channel="<0.1129.0>"); railmq, which has none,
// with the channel's (the connection's) name as the management API
// lists it, under the same label. Its per-exchange and per-queue
// breakdown of a channel's publishes and deliveries (the vhost and
// exchange or queue labels) is a channel's one figure here, labelled
// with its vhost; the Erlang process figures
// (rabbitmq_channel_process_reductions_total, ...) have no counterpart.

// chanFigures are one channel's figures, or the sum of several.
type chanFigures struct {
	consumers, unacked, unconfirmed, uncommitted, acksUncommitted, prefetch int64
	s                                                                       broker.ChannelStats
}

func (f *chanFigures) add(ch *broker.Channel) {
	f.consumers += int64(len(ch.Consumers))
	f.unacked += int64(ch.Unacked)
	f.unconfirmed += int64(ch.Unconfirmed)
	f.uncommitted += ch.Stats.UncommittedMsgs
	f.acksUncommitted += ch.Stats.UncommittedAcks
	f.prefetch += int64(ch.GlobalPrefetch)
	s := &ch.Stats
	f.s.Publish += s.Publish
	f.s.Confirm += s.Confirm
	f.s.ReturnUnroutable += s.ReturnUnroutable
	f.s.DropUnroutable += s.DropUnroutable
	f.s.Deliver += s.Deliver
	f.s.DeliverNoAck += s.DeliverNoAck
	f.s.Get += s.Get
	f.s.GetNoAck += s.GetNoAck
	f.s.GetEmpty += s.GetEmpty
	f.s.Redeliver += s.Redeliver
	f.s.Ack += s.Ack
}

// emit sends f's gauges with labels, and its counters with labels and
// then more (RabbitMQ's counters carry the vhost beside the channel).
func (f *chanFigures) emit(e emitter, labels, more []string) {
	e.gauge("rabbitmq_channel_consumers", "Consumers on a channel", float64(f.consumers), labels...)
	e.gauge("rabbitmq_channel_messages_unacked", "Delivered but not yet acknowledged messages", float64(f.unacked), labels...)
	e.gauge("rabbitmq_channel_messages_unconfirmed", "Published but not yet confirmed messages", float64(f.unconfirmed), labels...)
	e.gauge("rabbitmq_channel_messages_uncommitted", "Messages received in a transaction but not yet committed", float64(f.uncommitted), labels...)
	e.gauge("rabbitmq_channel_acks_uncommitted", "Message acknowledgements in a transaction not yet committed", float64(f.acksUncommitted), labels...)
	e.gauge("rabbitmq_channel_prefetch", "Total limit of unacknowledged messages for all consumers on a channel", float64(f.prefetch), labels...)
	l := append(append([]string{}, labels...), more...)
	s := &f.s
	e.counter("rabbitmq_channel_messages_published_total", "Total number of messages published into an exchange on a channel", s.Publish, l...)
	e.counter("rabbitmq_channel_messages_confirmed_total", "Total number of messages published into an exchange and confirmed on the channel", s.Confirm, l...)
	e.counter("rabbitmq_channel_messages_unroutable_returned_total", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable", s.ReturnUnroutable, l...)
	e.counter("rabbitmq_channel_messages_unroutable_dropped_total", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable", s.DropUnroutable, l...)
	e.counter("rabbitmq_channel_get_ack_total", "Total number of messages fetched with basic.get in manual acknowledgement mode", s.Get, l...)
	e.counter("rabbitmq_channel_get_total", "Total number of messages fetched with basic.get in automatic acknowledgement mode", s.GetNoAck, l...)
	e.counter("rabbitmq_channel_messages_delivered_ack_total", "Total number of messages delivered to consumers in manual acknowledgement mode", s.Deliver, l...)
	e.counter("rabbitmq_channel_messages_delivered_total", "Total number of messages delivered to consumers in automatic acknowledgement mode", s.DeliverNoAck, l...)
	e.counter("rabbitmq_channel_messages_redelivered_total", "Total number of messages redelivered to consumers", s.Redeliver, l...)
	e.counter("rabbitmq_channel_messages_acked_total", "Total number of messages acknowledged by consumers", s.Ack, l...)
	e.counter("rabbitmq_channel_get_empty_total", "Total number of times basic.get operations fetched no message", s.GetEmpty, l...)
}

// collectChannels sends the channels' families: summed, or one series
// per channel.
func (m *collector) collectChannels(e emitter, chans []broker.Channel) {
	if !m.perObject {
		var all chanFigures
		for i := range chans {
			all.add(&chans[i])
		}
		all.emit(e, nil, nil)
		return
	}
	for i := range chans {
		ch := &chans[i]
		var f chanFigures
		f.add(ch)
		name := channelName(ch)
		f.emit(e, []string{"channel", name}, []string{"vhost", ch.Conn.VHost})
	}
}

// channelName is the management API's name of ch.
func channelName(ch *broker.Channel) string {
	return ch.Conn.Name + " (" + strconv.Itoa(int(ch.Number)) + ")"
}

// collectConnTraffic sends the connections' traffic families: summed, or
// one series per connection.
func (m *collector) collectConnTraffic(e emitter, conns []broker.Connection) {
	var in, out, inPk, outPk, chans int64
	for _, c := range conns {
		if m.perObject {
			emitConnTraffic(e, c.Net.RecvOct, c.Net.SendOct, c.Net.RecvCnt, c.Net.SendCnt, int64(c.Channels), "channel", c.Name)
			continue
		}
		in, out, inPk, outPk, chans = in+c.Net.RecvOct, out+c.Net.SendOct, inPk+c.Net.RecvCnt, outPk+c.Net.SendCnt, chans+int64(c.Channels)
	}
	if !m.perObject {
		emitConnTraffic(e, in, out, inPk, outPk, chans)
	}
}

func emitConnTraffic(e emitter, in, out, inPk, outPk, chans int64, labels ...string) {
	e.counter("rabbitmq_connection_incoming_bytes_total", "Total number of bytes received on a connection", in, labels...)
	e.counter("rabbitmq_connection_outgoing_bytes_total", "Total number of bytes sent on a connection", out, labels...)
	e.counter("rabbitmq_connection_incoming_packets_total", "Total number of packets received on a connection", inPk, labels...)
	e.counter("rabbitmq_connection_outgoing_packets_total", "Total number of packets sent on a connection", outPk, labels...)
	e.gauge("rabbitmq_connection_channels", "Channels on a connection", float64(chans), labels...)
}
