//go:build ignore

// qq-first: how long after a broker process started it accepted an AMQP
// connection and handed a consumer its first message (bench/qq-recovery.sh).
//
//	go run bench/qq-first.go -uri amqp://guest:guest@127.0.0.1:5790/ -queue Q -start UNIX_NANOS
//
// It dials every 5 ms until a connection opens, then consumes from the
// (existing) queue with manual acks and prefetch 1, and prints one JSON
// line: listen_s and first_s, seconds from -start.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func main() {
	uri := flag.String("uri", "amqp://guest:guest@127.0.0.1:5672/", "broker")
	queue := flag.String("queue", "", "queue to consume from")
	start := flag.Int64("start", time.Now().UnixNano(), "when the broker process started, Unix nanoseconds")
	limit := flag.Duration("timeout", 30*time.Minute, "give up after")
	flag.Parse()
	t0 := time.Unix(0, *start)
	deadline := time.Now().Add(*limit)
	var conn *amqp.Connection
	for {
		c, err := amqp.Dial(*uri)
		if err == nil {
			conn = c
			break
		}
		if time.Now().After(deadline) {
			fail("no connection: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	listen := time.Since(t0)
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		fail("channel: %v", err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		fail("qos: %v", err)
	}
	d, err := ch.Consume(*queue, "", false /* autoAck */, false /* exclusive */, false /* noLocal */, false /* noWait */, nil)
	if err != nil {
		fail("consume: %v", err)
	}
	select {
	case m, ok := <-d:
		if !ok {
			fail("consumer closed before a delivery")
		}
		first := time.Since(t0)
		_ = m.Nack(false, true /* requeue */)
		out, _ := json.Marshal(map[string]float64{"listen_s": listen.Seconds(), "first_s": first.Seconds()})
		fmt.Println(string(out))
	case <-time.After(time.Until(deadline)):
		fail("no delivery")
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "qq-first: "+format+"\n", a...)
	os.Exit(1)
}
