package conformance

import (
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
)

// Settling, publishing to and deleting a stream (stream_test.go says how
// RabbitMQ was asked).

// TestStreamNackRejectGiveCredit: basic.nack and basic.reject, with
// requeue or not, give the consumer credit as an ack does; nothing is
// requeued or redelivered (RabbitMQ 3.13+: rabbit_stream_queue.erl
// v4.3.5 settle/5, "all settle reasons will "give credit" to the stream
// queue"). RabbitMQ 3.10.8 closes the connection instead: 540
// "NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream
// queues queue 'q' in vhost '/'", class 60 method 120 (nack) or 90
// (reject).
func TestStreamNackRejectGiveCredit(t *testing.T) {
	rabbit4(t, "basic.nack and basic.reject close the connection with 540 NOT_IMPLEMENTED")
	e := setup(t, broker.Options{})
	e.stream("st-nack", stArgs())
	e.publishEach("st-nack", bodiesN("m", 8)...)
	ch, ds := e.streamConsume("st-nack", 1, rmq.Table{"x-stream-offset": "first"})
	closed := ch.NotifyClose(make(chan *rmq.Error, 1))
	settle := []func(d rmq.Delivery) error{
		func(d rmq.Delivery) error { return d.Nack(false, true) },
		func(d rmq.Delivery) error { return d.Nack(false, false) },
		func(d rmq.Delivery) error { return d.Reject(true) },
		func(d rmq.Delivery) error { return d.Reject(false) },
		func(d rmq.Delivery) error { return d.Nack(true, true) },
	}
	for i, f := range settle {
		d := recv(t, ds)
		if off := streamOffset(t, d); off != int64(i) || d.Redelivered {
			t.Fatalf("delivery %d: offset %d redelivered=%v", i, off, d.Redelivered)
		}
		must(t, f(d))
	}
	// Each settle gave the one credit back: the next message came each
	// time, and the channel is open.
	if d := recv(t, ds); streamOffset(t, d) != int64(len(settle)) || d.Redelivered {
		t.Fatalf("after the settles: offset %d redelivered=%v", streamOffset(t, d), d.Redelivered)
	}
	select {
	case err := <-closed:
		t.Fatalf("channel closed: %v", err)
	default:
	}
}

// TestStreamRecoverGivesCredit: basic.recover (requeue) on a channel with
// a stream consumer answers recover-ok and redelivers nothing: the
// unacked deliveries are settled as a requeue, which for a stream is
// credit (RabbitMQ 4.x: rabbit_channel.erl v4.3.5 basic.recover →
// basic.recover_async, and rabbit_stream_queue.erl settle/5). RabbitMQ
// 3.10.8 closes the connection: 541 "INTERNAL_ERROR", class 0 method 0.
func TestStreamRecoverGivesCredit(t *testing.T) {
	rabbit4(t, "basic.recover with a stream consumer closes the connection with 541 INTERNAL_ERROR")
	e := setup(t, broker.Options{})
	e.stream("st-recover", stArgs())
	e.publishEach("st-recover", bodiesN("m", 6)...)
	ch, ds := e.streamConsume("st-recover", 2, rmq.Table{"x-stream-offset": "first"})
	recv(t, ds)
	recv(t, ds)
	//lint:ignore SA1019 basic.recover is the behaviour under test
	must(t, ch.Recover(true))
	for want := int64(2); want < 4; want++ {
		d := recv(t, ds)
		if off := streamOffset(t, d); off != want || d.Redelivered {
			t.Fatalf("after recover: offset %d redelivered=%v, want %d", off, d.Redelivered, want)
		}
	}
}

// TestStreamDeleteIgnoresIfEmptyIfUnused: queue.delete of a stream
// deletes it whatever if-empty and if-unused say, and delete-ok counts
// 0 messages. RabbitMQ 3.10.8: if-empty with 3 messages (also once its
// metrics counted them) → delete-ok 0, deleted; if-unused with a
// consumer → deleted (rabbit_stream_queue.erl v3.10.8 and v4.3.5
// delete(Q, _IfUnused, _IfEmpty, ...); rabbit_stream_coordinator.erl
// v4.3.5 delete_stream answers {ok, 0}).
func TestStreamDeleteIgnoresIfEmptyIfUnused(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-delflags", stArgs())
	e.publishEach("st-delflags", bodiesN("m", 3)...)
	n, err := e.fresh().QueueDelete("st-delflags", false, true, false)
	must(t, err)
	if n != 0 {
		t.Fatalf("delete-ok message_count %d, want 0", n)
	}
	_, err = e.fresh().QueueDeclarePassive("st-delflags", true, false, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no queue 'st-delflags' in vhost '/'")

	e.stream("st-delflags", stArgs())
	e.publishEach("st-delflags", bodiesN("m", 3)...)
	_, ds := e.streamConsume("st-delflags", 10, rmq.Table{"x-stream-offset": "first"})
	recv(t, ds)
	n, err = e.fresh().QueueDelete("st-delflags", true, false, false)
	must(t, err)
	if n != 0 {
		t.Fatalf("delete-ok message_count %d, want 0", n)
	}
	_, err = e.fresh().QueueDeclarePassive("st-delflags", true, false, false, false, nil)
	expectErr(t, err, 404, "NOT_FOUND - no queue 'st-delflags' in vhost '/'")
}

// TestStreamPublish: publishing to a stream as to any queue. RabbitMQ
// 3.10.8: a confirm for each publish; mandatory to a stream returns
// nothing; a transaction commits into it.
func TestStreamPublish(t *testing.T) {
	e := setup(t, broker.Options{})
	e.stream("st-pub", stArgs())
	ch := e.channel(e.conn)
	returns := ch.NotifyReturn(make(chan rmq.Return, 2))
	must(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan rmq.Confirmation, 2))
	must(t, ch.Publish("", "st-pub", true, false, rmq.Publishing{Body: []byte("mandatory"), DeliveryMode: 2}))
	must(t, ch.Publish("", "st-pub", false, false, rmq.Publishing{Body: []byte("plain")}))
	for i := uint64(1); i <= 2; i++ {
		select {
		case c := <-confirms:
			if !c.Ack || c.DeliveryTag != i {
				t.Fatalf("confirm %+v, want an ack of %d", c, i)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no confirm %d", i)
		}
	}
	select {
	case r := <-returns:
		t.Fatalf("basic.return %d %s", r.ReplyCode, r.ReplyText)
	default:
	}
	tx := e.channel(e.conn)
	must(t, tx.Tx())
	must(t, tx.Publish("", "st-pub", false, false, rmq.Publishing{Body: []byte("tx")}))
	must(t, tx.TxCommit())
	_, ds := e.streamConsume("st-pub", 10, rmq.Table{"x-stream-offset": "first"})
	if got, _ := takeAcked(t, ds, 3); got[0] != "mandatory" || got[1] != "plain" || got[2] != "tx" {
		t.Fatalf("stream holds %v", got)
	}
}
