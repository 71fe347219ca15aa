// Command drainclient publishes or drains the backlog of the cgroup drain
// test, checking every body. It is built by the test without the race
// detector: under it, copying 4 GiB through amqp091-go took minutes, and
// the client, not the broker, set the pace.
//
//	drainclient publish URL QUEUE N SIZE
//	drainclient consume URL QUEUE FROM TO SIZE
//
// Message seq's body is a random block (the same in every run: a fixed
// seed) turned by seq, with seq in its first 8 bytes, so that every body
// differs from the others all along: one delivered for another, cut
// short or corrupted anywhere is seen. consume takes messages FROM to
// TO-1, in order, with a prefetch of 2 and an ack each, and prints what
// it drained and how fast. Exit status 1 on any error or wrong body.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "drainclient:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 4 {
		return fmt.Errorf("usage: publish URL QUEUE N SIZE | consume URL QUEUE FROM TO SIZE")
	}
	nums := make([]uint64, 0, 3)
	for _, a := range args[3:] {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return err
		}
		nums = append(nums, n)
	}
	conn, err := rmq.Dial(args[1])
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	switch {
	case args[0] == "publish" && len(nums) == 2:
		return publish(ch, args[2], nums[0], base(int(nums[1])))
	case args[0] == "consume" && len(nums) == 3:
		return consume(ch, args[2], nums[0], nums[1], base(int(nums[2])))
	}
	return fmt.Errorf("bad arguments %q", args)
}

func base(size int) []byte {
	b := make([]byte, size)
	r := rand.NewChaCha8([32]byte{'r', 'a', 'i', 'l', 'm', 'q'})
	_, _ = r.Read(b)
	return b
}

func body(dst, base []byte, seq uint64) []byte {
	dst = dst[:len(base)]
	r := int(seq*7919) % len(base)
	n := copy(dst, base[r:])
	copy(dst[n:], base[:r])
	binary.BigEndian.PutUint64(dst, seq)
	return dst
}

func publish(ch *rmq.Channel, q string, n uint64, base []byte) error {
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	var pending []*rmq.DeferredConfirmation
	wait := func(dc *rmq.DeferredConfirmation) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish %d: confirmed %v, %v", dc.DeliveryTag, ok, err)
		}
		return nil
	}
	buf := make([]byte, len(base))
	start := time.Now()
	for seq := range n {
		// Publish writes the whole message before it returns: buf is free.
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{
			DeliveryMode: rmq.Persistent, Body: body(buf, base, seq)})
		if err != nil {
			return fmt.Errorf("publish %d: %w", seq, err)
		}
		if pending = append(pending, dc); len(pending) == 4 {
			if err := wait(pending[0]); err != nil {
				return err
			}
			pending = pending[1:]
		}
	}
	for _, dc := range pending {
		if err := wait(dc); err != nil {
			return err
		}
	}
	report("published", n, len(base), time.Since(start))
	return nil
}

func consume(ch *rmq.Channel, q string, from, to uint64, base []byte) error {
	if err := ch.Qos(2, 0, false); err != nil {
		return err
	}
	dels, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	want := make([]byte, len(base))
	start := time.Now()
	for seq := from; seq < to; seq++ {
		var d rmq.Delivery
		var ok bool
		select {
		case d, ok = <-dels:
		case <-time.After(3 * time.Minute):
		}
		if !ok {
			return fmt.Errorf("no message %d: deliveries ended, or none for 3 minutes", seq)
		}
		if !bytes.Equal(d.Body, body(want, base, seq)) {
			got := uint64(0)
			if len(d.Body) >= 8 {
				got = binary.BigEndian.Uint64(d.Body)
			}
			return fmt.Errorf("message %d: a body of %d bytes starting with seq %d is not message %d's", seq, len(d.Body), got, seq)
		}
		if err := d.Ack(false); err != nil {
			return err
		}
	}
	report("drained", to-from, len(base), time.Since(start))
	return nil
}

func report(what string, n uint64, size int, d time.Duration) {
	mib := float64(n) * float64(size) / (1 << 20)
	fmt.Printf("%s %d messages (%.0f MiB) in %v: %.1f MiB/s\n", what, n, mib, d.Round(time.Millisecond), mib/d.Seconds())
}
