package conformance

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// Atomic transactions (docs/transactions.md): tx.commit applies every
// publish and ack of the transaction on this node's queues in one atomic
// store write, fsynced before tx.commit-ok, and only then do the queues
// show the messages and drop the acked ones.

// txQueues10 declares n durable queues named prefix-0.. and a fanout
// exchange bound to all of them, and returns the names.
func txQueues10(t *testing.T, ch *rmq.Channel, prefix string, n int) []string {
	t.Helper()
	must(t, ch.ExchangeDeclare(prefix+"-fan", "fanout", true, false, false, false, nil))
	var qs []string
	for i := range n {
		q := fmt.Sprintf("%s-%d", prefix, i)
		_, err := ch.QueueDeclare(q, true, false, false, false, nil)
		must(t, err)
		must(t, ch.QueueBind(q, "", prefix+"-fan", false, nil))
		qs = append(qs, q)
	}
	return qs
}

// txCounts is each queue's ready count (queue.declare passive).
func txCounts(t *testing.T, ch *rmq.Channel, qs []string) []int {
	t.Helper()
	out := make([]int, len(qs))
	for i, q := range qs {
		d, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		must(t, err)
		out[i] = d.Messages
	}
	return out
}

func allEqual(ns []int, want int) bool {
	for _, n := range ns {
		if n != want {
			return false
		}
	}
	return true
}

// A transaction publishing to 10 durable queues (each message to one
// queue, and one message to all through a fanout) shows nothing before
// tx.commit and everything at tx.commit-ok, and the whole of it is there
// after a restart.
func TestTxAtomicTenQueues(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	qs := txQueues10(t, ch, "txa", 10)
	tx, err := c.Channel()
	must(t, err)
	must(t, tx.Tx())
	for _, q := range qs {
		must(t, tx.Publish("", q, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("own " + q)}))
	}
	must(t, tx.Publish("txa-fan", "", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("fanned")}))
	// The publishes reached the broker (a round trip on their channel)
	// and are not in any queue yet.
	must(t, tx.Qos(10, 0, false))
	if n := txCounts(t, ch, qs); !allEqual(n, 0) {
		t.Fatalf("before tx.commit: %v ready, want 0 in each", n)
	}
	must(t, tx.TxCommit())
	if n := txCounts(t, ch, qs); !allEqual(n, 2) {
		t.Fatalf("after tx.commit-ok: %v ready, want 2 in each", n)
	}
	c.Close()
	r.restart()
	c, ch = r.dial()
	defer c.Close()
	if n := txCounts(t, ch, qs); !allEqual(n, 2) {
		t.Fatalf("after a restart: %v ready, want 2 in each", n)
	}
	for _, q := range qs {
		d, ok, err := ch.Get(q, true)
		must(t, err)
		if !ok || string(d.Body) != "own "+q {
			t.Fatalf("%s: first message %q (%v), want %q", q, d.Body, ok, "own "+q)
		}
		d, ok, err = ch.Get(q, true)
		must(t, err)
		if !ok || string(d.Body) != "fanned" {
			t.Fatalf("%s: second message %q (%v), want fanned", q, d.Body, ok)
		}
	}
}

// Acks in a transaction take effect at tx.commit: before it the messages
// are still the channel's (a close returns them); after tx.commit-ok they
// are gone, across a restart too.
func TestTxAtomicAcksAtCommit(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	qs := txQueues10(t, ch, "txack", 10)
	must(t, ch.Publish("txack-fan", "", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("a")}))
	must(t, ch.Publish("txack-fan", "", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("b")}))
	testutil.Eventually(t, 5*time.Second, func() bool { return allEqual(txCounts(t, ch, qs), 2) }, "2 in each queue")

	getAll := func(tx *rmq.Channel) []rmq.Delivery {
		var ds []rmq.Delivery
		for _, q := range qs {
			d, ok, err := tx.Get(q, false)
			must(t, err)
			if !ok {
				t.Fatalf("%s: empty", q)
			}
			ds = append(ds, d)
		}
		return ds
	}
	// Acked in a transaction never committed: the close returns them.
	tx, err := c.Channel()
	must(t, err)
	must(t, tx.Tx())
	for _, d := range getAll(tx) {
		must(t, d.Ack(false))
	}
	must(t, tx.Close())
	testutil.Eventually(t, 5*time.Second, func() bool { return allEqual(txCounts(t, ch, qs), 2) }, "uncommitted acks undone by the close")

	// Committed: gone from every queue, for good.
	tx, err = c.Channel()
	must(t, err)
	must(t, tx.Tx())
	for _, d := range getAll(tx) {
		must(t, d.Ack(false))
	}
	must(t, tx.TxCommit())
	must(t, tx.Close()) // would return anything not acked
	if n := txCounts(t, ch, qs); !allEqual(n, 1) {
		t.Fatalf("after tx.commit-ok of the acks and a close: %v ready, want 1 in each", n)
	}
	c.Close()
	r.restart()
	c, ch = r.dial()
	defer c.Close()
	if n := txCounts(t, ch, qs); !allEqual(n, 1) {
		t.Fatalf("after a restart: %v ready, want 1 in each", n)
	}
	for _, q := range qs {
		d, ok, err := ch.Get(q, true)
		must(t, err)
		if !ok || string(d.Body) != "b" {
			t.Fatalf("%s: %q (%v) left, want b", q, d.Body, ok)
		}
	}
}

// tx.rollback discards the transaction's publishes and acks: nothing
// published reaches a queue, and the acked deliveries stay unacked (a
// close returns them): AMQP 0-9-1's tx.rollback "abandons all message
// publications and acknowledgments performed in the current transaction"
// (amqp0-9-1.xml, class tx). (The RabbitMQ 3.10.8 on this machine was not
// answering when this test was written: the spec is cited instead.)
func TestTxAtomicRollback(t *testing.T) {
	b := testutil.Start(t, broker.Options{DataDir: t.TempDir()})
	c, err := rmq.Dial(b.URL)
	must(t, err)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	qs := txQueues10(t, ch, "txrb", 10)
	must(t, ch.Publish("txrb-fan", "", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("kept")}))
	testutil.Eventually(t, 5*time.Second, func() bool { return allEqual(txCounts(t, ch, qs), 1) }, "1 in each queue")
	tx, err := c.Channel()
	must(t, err)
	must(t, tx.Tx())
	for _, q := range qs {
		d, ok, err := tx.Get(q, false)
		must(t, err)
		if !ok {
			t.Fatalf("%s: empty", q)
		}
		must(t, d.Ack(false))
		must(t, tx.Publish("", q, false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("discarded")}))
	}
	must(t, tx.TxRollback())
	must(t, tx.TxCommit()) // an empty transaction
	if n := txCounts(t, ch, qs); !allEqual(n, 0) {
		t.Fatalf("after rollback: %v ready, want 0 (the kept messages are unacked, the publishes gone)", n)
	}
	must(t, tx.Close())
	testutil.Eventually(t, 5*time.Second, func() bool { return allEqual(txCounts(t, ch, qs), 1) }, "the rolled-back acks' messages returned by the close")
	for _, q := range qs {
		d, ok, err := ch.Get(q, true)
		must(t, err)
		if !ok || string(d.Body) != "kept" {
			t.Fatalf("%s: %q (%v), want kept", q, d.Body, ok)
		}
	}
}

// A transaction larger than one atomic store write is refused whole: the
// commit fails with 406 PRECONDITION_FAILED naming the limit, nothing of
// it reaches the queue, and its acked delivery is returned to its queue.
func TestTxAtomicTooBig(t *testing.T) {
	b := testutil.Start(t, broker.Options{DataDir: t.TempDir()})
	c, err := rmq.Dial(b.URL)
	must(t, err)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("txbig", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Publish("", "txbig", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte("old")}))
	testutil.Eventually(t, 5*time.Second, func() bool { return txCounts(t, ch, []string{"txbig"})[0] == 1 }, "old published")
	tx, err := c.Channel()
	must(t, err)
	must(t, tx.Tx())
	d, ok, err := tx.Get("txbig", false)
	must(t, err)
	if !ok {
		t.Fatal("empty")
	}
	must(t, d.Ack(false))
	// 30,000 entries: over the 26,214 changes one Badger transaction
	// takes with the default store settings.
	for i := range 30_000 {
		must(t, tx.Publish("", "txbig", false, false, rmq.Publishing{DeliveryMode: rmq.Persistent, Body: []byte(fmt.Sprint(i))}))
	}
	err = tx.TxCommit()
	var ae *rmq.Error
	if err == nil || !errors.As(err, &ae) || ae.Code != 406 || !strings.Contains(ae.Reason, "PRECONDITION_FAILED - transaction too large for one atomic store write") {
		t.Fatalf("tx.commit of 30,000 persistent publishes: %v, want 406 transaction too large", err)
	}
	t.Logf("refused: %s", ae.Reason)
	testutil.Eventually(t, 5*time.Second, func() bool { return txCounts(t, ch, []string{"txbig"})[0] == 1 },
		"nothing of the refused transaction in the queue, its acked message returned")
	got, ok, err := ch.Get("txbig", true)
	must(t, err)
	if !ok || string(got.Body) != "old" || !got.Redelivered {
		t.Fatalf("left: %q (%v, redelivered %v), want old, redelivered", got.Body, ok, got.Redelivered)
	}
}

// pika (the Python client) commits a transaction over 10 queues and rolls
// one back: its tx_select, tx_commit and tx_rollback against railmq.
func TestTxAtomicPika(t *testing.T) {
	testutil.InProcess(t)
	if exec.Command("/usr/bin/python3", "-c", "import pika").Run() != nil {
		t.Skip("pika is not installed for /usr/bin/python3")
	}
	b := testutil.Start(t, broker.Options{DataDir: t.TempDir()})
	const script = `
import sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
qs = ["txpika-%d" % i for i in range(10)]
for q in qs:
    ch.queue_declare(q, durable=True)
tx = conn.channel()
tx.tx_select()
for q in qs:
    tx.basic_publish("", q, b"committed", pika.BasicProperties(delivery_mode=2))
before = [ch.queue_declare(q, passive=True).method.message_count for q in qs]
tx.tx_commit()
after = [ch.queue_declare(q, passive=True).method.message_count for q in qs]
for q in qs:
    tx.basic_publish("", q, b"rolled back", pika.BasicProperties(delivery_mode=2))
tx.tx_rollback()
rolled = [ch.queue_declare(q, passive=True).method.message_count for q in qs]
# acks in a transaction: applied at tx_commit
for q in qs:
    m, _, _ = tx.basic_get(q)
    tx.basic_ack(m.delivery_tag)
tx.tx_commit()
tx.close()
acked = [ch.queue_declare(q, passive=True).method.message_count for q in qs]
print(before, after, rolled, acked)
conn.close()
`
	out, err := exec.Command("/usr/bin/python3", "-c", script, b.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("pika: %v\n%s", err, out)
	}
	zeros, ones := "[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]", "[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"
	want := zeros + " " + ones + " " + ones + " " + zeros
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("pika saw (before commit, after, after rollback, after the acks' commit) %s, want %s", got, want)
	}
}
