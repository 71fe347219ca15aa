package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/poll"
	"github.com/railmq/railmq/internal/testutil"
)

var streamArgs = rmq.Table{"x-queue-type": "stream"}

// streamTake consumes n deliveries from a stream at offset spec (args
// added), acking each, and returns their bodies and offsets.
func streamTake(t *testing.T, ch *rmq.Channel, q string, n int, args rmq.Table) ([]string, []int64) {
	t.Helper()
	must(t, ch.Qos(100, 0, false))
	tag := fmt.Sprintf("take-%d", time.Now().UnixNano())
	if v, ok := args["tag"].(string); ok {
		tag = v
		delete(args, "tag")
	}
	ds, err := ch.Consume(q, tag, false, false, false, false, args)
	must(t, err)
	var bodies []string
	var offs []int64
	for len(bodies) < n {
		select {
		case d := <-ds:
			bodies = append(bodies, string(d.Body))
			off, _ := d.Headers["x-stream-offset"].(int64)
			offs = append(offs, off)
			must(t, d.Ack(false))
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d deliveries, then nothing", len(bodies), n)
		}
	}
	must(t, ch.Cancel(tag, false))
	return bodies, offs
}

// TestStreamSurvivesRestart: a stream's records, and a tracked consumer's
// stored offset (railmq's x-stream-offset-tracking), outlive a restart.
func TestStreamSurvivesRestart(t *testing.T) {
	r := newRestartable(t, broker.Options{})
	c, ch := r.dial()
	_, err := ch.QueueDeclare("st-restart", true, false, false, false, streamArgs)
	must(t, err)
	var bodies []string
	for i := range 50 {
		bodies = append(bodies, fmt.Sprint("m", i))
	}
	publishPersistent(t, ch, "", "st-restart", bodies...)
	ch2, err := c.Channel()
	must(t, err)
	got, _ := streamTake(t, ch2, "st-restart", 20, rmq.Table{"x-stream-offset": "first", "x-stream-offset-tracking": "billing"})
	if got[0] != "m0" || got[19] != "m19" {
		t.Fatalf("tracked consumer read %v", got)
	}
	_ = c.Close()
	r.restart()
	c, ch = r.dial()
	defer c.Close()
	q, err := ch.QueueDeclarePassive("st-restart", true, false, false, false, streamArgs)
	must(t, err)
	if q.Messages != 50 {
		t.Fatalf("after the restart the stream holds %d records, want 50", q.Messages)
	}
	all, offs := streamTake(t, ch, "st-restart", 50, rmq.Table{"x-stream-offset": "first"})
	for i := range 50 {
		if all[i] != bodies[i] || offs[i] != int64(i) {
			t.Fatalf("record %d: %q at offset %d, want %q at %d", i, all[i], offs[i], bodies[i], i)
		}
	}
	// The tracked consumer, giving no x-stream-offset, resumes after
	// what it acked.
	ch3, err := c.Channel()
	must(t, err)
	got, offs = streamTake(t, ch3, "st-restart", 1, rmq.Table{"x-stream-offset-tracking": "billing"})
	if got[0] != "m20" || offs[0] != 20 {
		t.Fatalf("tracked consumer resumed at %q (offset %d), want m20 at 20", got[0], offs[0])
	}
}

// TestStreamDeleteRemovesFiles: deleting a stream removes its files; a
// stream declared again under the name starts empty at offset 0.
func TestStreamDeleteRemovesFiles(t *testing.T) {
	testutil.InProcess(t)
	dir := t.TempDir()
	b := testutil.Start(t, broker.Options{DataDir: dir})
	c := dial(t, b.URL)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("st-del", true, false, false, false, streamArgs)
	must(t, err)
	publishPersistent(t, ch, "", "st-del", "a", "b", "c")
	streams := filepath.Join(dir, "streams")
	dirs, err := os.ReadDir(streams)
	must(t, err)
	if len(dirs) != 1 {
		t.Fatalf("%d stream directories, want 1", len(dirs))
	}
	n, err := ch.QueueDelete("st-del", true /* if-unused */, true /* if-empty */, false)
	must(t, err)
	// RabbitMQ 3.10.8 ignores if-unused and if-empty for a stream and
	// answers delete-ok with message_count 0 (checked).
	if n != 0 {
		t.Fatalf("delete-ok message_count %d, want 0", n)
	}
	if dirs, _ := os.ReadDir(streams); len(dirs) != 0 {
		t.Fatalf("%d stream directories left after the delete", len(dirs))
	}
	_, err = ch.QueueDeclare("st-del", true, false, false, false, streamArgs)
	must(t, err)
	publishPersistent(t, ch, "", "st-del", "new")
	got, offs := streamTake(t, ch, "st-del", 1, rmq.Table{"x-stream-offset": "first"})
	if got[0] != "new" || offs[0] != 0 {
		t.Fatalf("the new stream starts with %q at %d", got[0], offs[0])
	}
}

// TestStreamPolicyRetention: a policy's max-length-bytes (apply-to
// streams) drops a stream's oldest segments; its first offset moves, and
// a consumer from "first" starts there.
func TestStreamPolicyRetention(t *testing.T) {
	testutil.InProcess(t)
	b := testutil.Start(t, broker.Options{})
	a := newAPI(t, b)
	c := dial(t, b.URL)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	args := rmq.Table{"x-queue-type": "stream", "x-stream-max-segment-size-bytes": int64(8 << 10)}
	_, err = ch.QueueDeclare("st-pol", true, false, false, false, args)
	must(t, err)
	a.admin("PUT", "/api/policies/%2F/st-retention", map[string]any{"pattern": "^st-pol$", "apply-to": "streams",
		"definition": map[string]any{"max-length-bytes": 32 << 10}}, 201)
	body := make([]byte, 1024)
	must(t, ch.Confirm(false))
	for range 200 {
		dc, err := ch.PublishWithDeferredConfirm("", "st-pol", false, false, rmq.Publishing{Body: body})
		must(t, err)
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	var first int64
	poll.Eventually(t, 10*time.Second, func() bool {
		_, offs := streamTake(t, ch, "st-pol", 1, rmq.Table{"x-stream-offset": "first"})
		first = offs[0]
		return first > 0
	}, "the first offset never moved")
	q, err := ch.QueueDeclarePassive("st-pol", true, false, false, false, args)
	must(t, err)
	// 32 KiB kept, in whole segments of 8 KiB: about 30 records of
	// 1 KiB and a segment more at most.
	if q.Messages > 48 || q.Messages < 16 {
		t.Fatalf("%d records kept under a 32 KiB limit (first offset %d)", q.Messages, first)
	}
}
