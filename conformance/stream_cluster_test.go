package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/internal/testutil"
)

// Replicated streams: a stream declared in a cluster is a Raft group of
// its own, x-initial-cluster-size voters (every other node follows it as
// a non-voter and holds the log too); a publish is confirmed once a
// quorum has it, any node's consumers read their own node's copy, and a
// leader's loss loses nothing confirmed (docs/streams.md, In a cluster).

// streamMsg is a record as a stream consumer got it.
type streamMsg struct {
	offset int64
	body   string
}

// readStream reads q from its first offset on the node at url until it
// has want records, or nothing came for idle.
func readStream(url, q string, want int, idle time.Duration) ([]streamMsg, error) {
	c, err := rmq.DialConfig(url, rmq.Config{Dial: rmq.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(500, 0, false); err != nil {
		return nil, err
	}
	ds, err := ch.Consume(q, "", false, false, false, false, rmq.Table{"x-stream-offset": "first"})
	if err != nil {
		return nil, err
	}
	var out []streamMsg
	for len(out) < want {
		select {
		case d, ok := <-ds:
			if !ok {
				return out, fmt.Errorf("consumer closed after %d records", len(out))
			}
			off, ok := d.Headers["x-stream-offset"].(int64)
			if !ok {
				return out, fmt.Errorf("delivery %d without an x-stream-offset header: %v", len(out), d.Headers)
			}
			out = append(out, streamMsg{offset: off, body: string(d.Body)})
			if err := d.Ack(false); err != nil {
				return out, err
			}
		case <-time.After(idle):
			return out, nil
		}
	}
	return out, nil
}

// declareStreamOn declares a stream on the node at url, retrying while
// the cluster elects its first leader.
func declareStreamOn(t *testing.T, url, name string, size int) {
	t.Helper()
	declareQuorum(t, url, name, rmq.Table{"x-queue-type": "stream", "x-initial-cluster-size": int32(size)})
}

// publishStreamConfirmed publishes n bodies prefix-0.. on the node at url with
// confirms and returns those confirmed (acked), in publish order, and
// how many were nacked.
func publishStreamConfirmed(t *testing.T, url, q, prefix string, n int) (acked []string, nacked int) {
	t.Helper()
	c := dial(t, url)
	defer c.Close()
	ch, err := c.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	closed := ch.NotifyClose(make(chan *rmq.Error, 1))
	dcs := make([]*rmq.DeferredConfirmation, n)
	for i := range n {
		dcs[i], err = ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprintf("%s-%d", prefix, i))})
		must(t, err)
	}
	for i, dc := range dcs {
		select {
		case <-dc.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("publish %s-%d: no confirm within 30 s", prefix, i)
		}
		if dc.Acked() {
			acked = append(acked, fmt.Sprintf("%s-%d", prefix, i))
		} else {
			nacked++
		}
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Logf("publishing %s: the channel closed: %v", prefix, err)
		}
	default:
	}
	return acked, nacked
}

// checkStream checks a copy of a stream read from its start: offsets
// dense from first, each record once, and every confirmed body in it in
// the order published.
func checkStream(t *testing.T, where string, got []streamMsg, confirmed []string) {
	t.Helper()
	pos := map[string]int{}
	for i, m := range got {
		if i > 0 && m.offset != got[i-1].offset+1 {
			t.Fatalf("%s: offset %d after %d", where, m.offset, got[i-1].offset)
		}
		if _, dup := pos[m.body]; dup {
			t.Fatalf("%s: %q at offsets %d and %d", where, m.body, got[pos[m.body]].offset, m.offset)
		}
		pos[m.body] = i
	}
	last := -1
	for _, b := range confirmed {
		i, ok := pos[b]
		if !ok {
			t.Fatalf("%s: confirmed %q not in the stream (%d records)", where, b, len(got))
		}
		if i < last {
			t.Fatalf("%s: confirmed %q before one published earlier", where, b)
		}
		last = i
	}
}

// streamLeader is the stream's leader as the management API of n shows
// it, "" if none yet.
func streamLeader(t *testing.T, n *clusterNode, q string) string {
	var v struct{ Leader string }
	(&api{t: t, url: n.api}).call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &v)
	return v.Leader
}

// TestStreamClusterReplicated: a stream declared on node 1 with
// x-initial-cluster-size 3; publishes confirmed on node 2 are read from
// "first" on node 3, at the same offsets; its leader stopped, publishes
// go on through the new leader and every confirmed record is on both
// survivors once, in order, at the same offsets; the old leader started
// again on its data serves them all too; deleted, the stream's files go
// from every node.
func TestStreamClusterReplicated(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 3)
	const q = "events"
	declareStreamOn(t, nodes[0].b.URL, q, 3)
	var leader int
	testutil.Eventually(t, 15*time.Second, func() bool {
		l := streamLeader(t, nodes[2], q)
		for i, n := range nodes {
			if n.name == l {
				leader = i
				return true
			}
		}
		return false
	}, "the stream has no leader on node 3's view")

	// A nack is allowed (a round whose leader changed before it answered,
	// on a loaded machine: its outcome unknown, it is refused rather than
	// risk a duplicate); what was confirmed must be there.
	var confirmed []string
	acked, nacked := publishStreamConfirmed(t, nodes[1].b.URL, q, "a", 500)
	if nacked > 0 {
		t.Logf("%d of 500 publishes nacked", nacked)
	}
	if len(acked) == 0 {
		t.Fatal("nothing confirmed, every node up")
	}
	confirmed = append(confirmed, acked...)
	got, err := readStream(nodes[2].b.URL, q, 500, 3*time.Second)
	must(t, err)
	if len(got) < len(acked) || got[0].offset != 0 {
		t.Fatalf("node 3 read %d records (first at offset %d), want %d or more from offset 0", len(got), got[0].offset, len(acked))
	}
	checkStream(t, "node 3", got, confirmed)

	// The leader goes; the others elect one and publishes go on.
	nodes[leader].stop()
	alive := []int{}
	for i := range nodes {
		if i != leader {
			alive = append(alive, i)
		}
	}
	pub := nodes[alive[0]]
	testutil.Eventually(t, 20*time.Second, func() bool {
		l := streamLeader(t, pub, q)
		return l != "" && l != nodes[leader].name
	}, "no new stream leader")
	acked, _ = publishStreamConfirmed(t, pub.b.URL, q, "b", 300) // a nack is allowed here: it is not counted as confirmed
	if len(acked) == 0 {
		t.Fatal("nothing confirmed by the new leader")
	}
	confirmed = append(confirmed, acked...)
	var copies [][]streamMsg
	for _, i := range alive {
		got, err := readStream(nodes[i].b.URL, q, 1<<30, 3*time.Second) // all it holds
		must(t, err)
		checkStream(t, nodes[i].name, got, confirmed)
		copies = append(copies, got)
	}
	sameCopies(t, copies)

	// The old leader, back on its data, catches up.
	nodes[leader] = nodes[leader].restart(t)
	testutil.Eventually(t, 30*time.Second, func() bool {
		got, err := readStream(nodes[leader].b.URL, q, len(copies[0]), 2*time.Second)
		return err == nil && len(got) >= len(copies[0])
	}, "the restarted node does not catch up")
	got, err = readStream(nodes[leader].b.URL, q, len(copies[0]), 5*time.Second)
	must(t, err)
	checkStream(t, nodes[leader].name+" (restarted)", got, confirmed)
	sameCopies(t, [][]streamMsg{copies[0], got})

	// Deleted on one node: every node's copy goes.
	c := dial(t, nodes[alive[1]].b.URL)
	ch, err := c.Channel()
	must(t, err)
	_, err = ch.QueueDelete(q, false, false, false)
	must(t, err)
	for _, n := range nodes {
		testutil.Eventually(t, 15*time.Second, func() bool {
			es, err := os.ReadDir(filepath.Join(n.dir, "streams"))
			return err == nil && len(es) == 0 || os.IsNotExist(err)
		}, "%s keeps the deleted stream's files", n.name)
	}
}

// sameCopies checks that copies of a stream hold the same records at
// the same offsets, as far as the shortest goes.
func sameCopies(t *testing.T, copies [][]streamMsg) {
	t.Helper()
	for k := 1; k < len(copies); k++ {
		for i := 0; i < len(copies[0]) && i < len(copies[k]); i++ {
			if copies[k][i] != copies[0][i] {
				t.Fatalf("copy %d has %+v where copy 0 has %+v", k, copies[k][i], copies[0][i])
			}
		}
		if len(copies[k]) != len(copies[0]) {
			t.Fatalf("copy %d holds %d records, copy 0 %d", k, len(copies[k]), len(copies[0]))
		}
	}
}

// TestStreamClusterSize: on four nodes, a stream declared without
// x-initial-cluster-size has every node as a member, RabbitMQ's default
// (rabbit_stream_queue.erl v4.0.0: initial_cluster_size(undefined) ->
// length(rabbit_nodes:list_members())); one declared with 2 has two
// members, and the other nodes, which follow its log without voting,
// serve its consumers too: published on one node, read on every node.
func TestStreamClusterSize(t *testing.T) {
	testutil.InProcess(t)
	nodes := startCluster(t, 4)
	members := func(n *clusterNode, q string) []string {
		var v struct{ Members []string }
		(&api{t: t, url: n.api}).call("GET", "/api/queues/%2F/"+q, "guest", "guest", nil, &v)
		return v.Members
	}
	declareQuorum(t, nodes[0].b.URL, "all", rmq.Table{"x-queue-type": "stream"})
	testutil.Eventually(t, 15*time.Second, func() bool { return len(members(nodes[0], "all")) == 4 },
		"a stream declared without x-initial-cluster-size has members %v, want all 4 nodes", members(nodes[0], "all"))
	declareStreamOn(t, nodes[0].b.URL, "two", 2)
	testutil.Eventually(t, 15*time.Second, func() bool { return len(members(nodes[0], "two")) == 2 },
		"a stream declared with x-initial-cluster-size 2 has members %v", members(nodes[0], "two"))
	acked, _ := publishStreamConfirmed(t, nodes[3].b.URL, "two", "m", 50)
	if len(acked) == 0 {
		t.Fatal("nothing confirmed")
	}
	for _, n := range nodes {
		var got []streamMsg
		testutil.Eventually(t, 15*time.Second, func() bool {
			var err error
			got, err = readStream(n.b.URL, "two", 50, 2*time.Second)
			return err == nil && len(got) >= len(acked)
		}, "%s serves %d of %d confirmed records", n.name, len(got), len(acked))
		checkStream(t, n.name, got, acked)
	}
}
