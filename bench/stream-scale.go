//go:build ignore

// stream-scale: a large stream's memory and recovery. It starts the
// broker binary -bin on an empty data directory, fills one stream with
// -gib GiB of -size-byte messages (-producers publishers with confirms),
// then runs -readers consumers at offsets spread evenly over the stream
// (-prefetch, acking) for -read, sampling the broker's VmRSS every
// 100 ms; then, with a publisher still appending, kills the broker with
// SIGKILL, starts it again on the same directory and times, from the new
// process's start, its first accepted connection and a consumer's first
// delivery (from "first"). It prints one JSON line and deletes the data
// directory.
//
//	go build -o /tmp/railmq ./cmd/railmq
//	go run bench/stream-scale.go -bin /tmp/railmq -gib 10 -readers 100
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

var (
	bin       = flag.String("bin", "", "railmq binary")
	dir       = flag.String("dir", "", "data directory (default: a temporary one, deleted)")
	gib       = flag.Float64("gib", 1, "GiB to publish")
	size      = flag.Int("size", 1<<20, "message size")
	producers = flag.Int("producers", 4, "publishers")
	readers   = flag.Int("readers", 100, "consumers at spread offsets")
	readFor   = flag.Duration("read", 30*time.Second, "how long the readers read")
	prefetch  = flag.Int("prefetch", 10, "each reader's prefetch (its deliveries in flight: the broker holds them until acked)")
	port      = flag.Int("port", 25795, "AMQP port")
)

const queueName = "scale"

func main() {
	flag.Parse()
	data := *dir
	if data == "" {
		d, err := os.MkdirTemp("", "railmq-stream-scale")
		check(err)
		data = d
		defer os.RemoveAll(d)
	}
	uri := fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", *port)
	cmd, _ := start(data)
	defer func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() }()
	waitDial(uri, time.Minute)
	res := map[string]any{"gib": *gib, "size": *size, "readers": *readers, "prefetch": *prefetch}

	c, err := amqp.Dial(uri)
	check(err)
	ch, err := c.Channel()
	check(err)
	_, err = ch.QueueDeclare(queueName, true, false, false, false, amqp.Table{"x-queue-type": "stream"})
	check(err)
	total := int(*gib * (1 << 30) / float64(*size))
	t0 := time.Now()
	publish(uri, total)
	res["fill_s"] = time.Since(t0).Seconds()
	res["fill_mib_s"] = *gib * 1024 / time.Since(t0).Seconds()
	res["messages"] = total
	res["rss_after_fill_mib"] = rssMiB(cmd.Process.Pid, "VmRSS")
	res["disk_gib"] = float64(dirSize(filepath.Join(data, "streams"))) / (1 << 30)

	peak, delivered := readSpread(uri, total, cmd.Process.Pid)
	res["rss_reading_peak_mib"] = peak
	res["read_deliveries"] = delivered
	res["read_mib_s"] = float64(delivered) * float64(*size) / (1 << 20) / readFor.Seconds()
	res["vmhwm_mib"] = rssMiB(cmd.Process.Pid, "VmHWM")
	_ = c.Close()

	// kill -9 with a publisher appending, then time the restart.
	stop := make(chan struct{})
	go func() {
		pc, err := amqp.Dial(uri)
		if err != nil {
			return
		}
		pch, _ := pc.Channel()
		body := make([]byte, *size)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if pch.Publish("", queueName, false, false, amqp.Publishing{Body: body}) != nil {
				return
			}
		}
	}()
	time.Sleep(500 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_, _ = cmd.Process.Wait()
	close(stop)
	cmd, started := start(data)
	listen := waitDial(uri, 10*time.Minute)
	first := firstDelivery(uri)
	res["restart_listen_s"] = listen.Sub(started).Seconds()
	res["restart_first_delivery_s"] = first.Sub(started).Seconds()
	res["restart_rss_mib"] = rssMiB(cmd.Process.Pid, "VmRSS")
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

func start(data string) (*exec.Cmd, time.Time) {
	cmd := exec.Command(*bin, "--listen", fmt.Sprintf("127.0.0.1:%d", *port), "--data-dir", data, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	t := time.Now()
	check(cmd.Start())
	return cmd, t
}

func waitDial(uri string, limit time.Duration) time.Time {
	deadline := time.Now().Add(limit)
	for {
		c, err := amqp.Dial(uri)
		if err == nil {
			at := time.Now()
			_ = c.Close()
			return at
		}
		if time.Now().After(deadline) {
			fail("no connection: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func publish(uri string, total int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range *producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := amqp.Dial(uri)
			check(err)
			defer c.Close()
			ch, err := c.Channel()
			check(err)
			check(ch.Confirm(false))
			body := make([]byte, *size)
			var pend []*amqp.DeferredConfirmation
			for next.Add(1) <= int64(total) {
				dc, err := ch.PublishWithDeferredConfirm("", queueName, false, false, amqp.Publishing{Body: body})
				check(err)
				pend = append(pend, dc)
				if len(pend) >= 16 {
					for _, d := range pend {
						if !d.Wait() {
							fail("nacked")
						}
					}
					pend = pend[:0]
				}
			}
			for _, d := range pend {
				if !d.Wait() {
					fail("nacked")
				}
			}
		}()
	}
	wg.Wait()
}

// readSpread runs the readers and returns the broker's peak VmRSS (MiB)
// while they read, and how many deliveries they took.
func readSpread(uri string, total, pid int) (float64, int64) {
	var got atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range *readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := amqp.Dial(uri)
			check(err)
			defer c.Close()
			ch, err := c.Channel()
			check(err)
			check(ch.Qos(*prefetch, 0, false))
			off := int64(total) * int64(i) / int64(*readers)
			ds, err := ch.Consume(queueName, "", false, false, false, false, amqp.Table{"x-stream-offset": off})
			check(err)
			for {
				select {
				case d := <-ds:
					got.Add(1)
					_ = d.Ack(false)
				case <-stop:
					return
				}
			}
		}()
	}
	peak := 0.0
	deadline := time.Now().Add(*readFor)
	for time.Now().Before(deadline) {
		peak = max(peak, rssMiB(pid, "VmRSS"))
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	return peak, got.Load()
}

func firstDelivery(uri string) time.Time {
	c, err := amqp.Dial(uri)
	check(err)
	defer c.Close()
	ch, err := c.Channel()
	check(err)
	check(ch.Qos(1, 0, false))
	ds, err := ch.Consume(queueName, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	check(err)
	select {
	case <-ds:
		return time.Now()
	case <-time.After(10 * time.Minute):
		fail("no delivery")
	}
	return time.Time{}
}

func rssMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func dirSize(d string) int64 {
	var n int64
	_ = filepath.Walk(d, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "stream-scale: "+f+"\n", a...)
	os.Exit(1)
}
