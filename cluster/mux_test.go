package cluster

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/poll"
)

// fakeListener is a process without the cluster secret listening on a
// node's inter-node address: it plays the accepting side of the
// handshake as well as it can (a random challenge, then a random answer
// to whatever the dialler says) and keeps every byte it is sent.
type fakeListener struct {
	ln    net.Listener
	mu    sync.Mutex
	conns int
	got   [][]byte // per connection, what the dialler sent
	wg    sync.WaitGroup
}

func newFakeListener(t *testing.T, addr string) *fakeListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeListener{ln: ln}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *fakeListener) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		i := f.conns
		f.conns++
		f.got = append(f.got, nil)
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer c.Close()
			junk := make([]byte, challengeLen)
			_, _ = rand.Read(junk)
			if _, err := c.Write(junk); err != nil {
				return
			}
			buf := make([]byte, 4096)
			answered := false
			for {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, err := c.Read(buf)
				f.mu.Lock()
				f.got[i] = append(f.got[i], buf[:n]...)
				f.mu.Unlock()
				if err != nil {
					return
				}
				if !answered { // a made-up proof of its own
					answered = true
					_, _ = rand.Read(junk)
					_, _ = c.Write(junk)
				}
			}
		}()
	}
}

func (f *fakeListener) close() {
	f.ln.Close()
	f.wg.Wait()
}

// received is what the diallers sent: each connection's bytes, the most
// any one of them sent, and whether needle is among them.
func (f *fakeListener) received(needle []byte) (conns, most int, found bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range f.got {
		most = max(most, len(g))
		found = found || bytes.Contains(g, needle)
	}
	return f.conns, most, found
}

// TestFakeListenerGetsNothingBeyondTheHandshake: with one node of three
// down, a process without the secret listening on its address is dialled
// by the other two (raft's votes and appends, the links); it must get
// nothing past the dialler's half of the handshake (a nonce and a proof:
// dialProofLen bytes), no Raft byte, no group name and no definition.
// Before the handshake was mutual it received the challenge's answer,
// the group's name, and then raft's traffic in clear, the metadata log's
// entries with it.
func TestFakeListenerGetsNothingBeyondTheHandshake(t *testing.T) {
	peers := map[string]string{}
	for i := 0; i < 3; i++ {
		peers[fmt.Sprintf("rabbit%d", i)] = freeAddr(t)
	}
	fake := newFakeListener(t, peers["rabbit2"])
	var nodes []*Node
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("rabbit%d", i)
		nd, err := StartNode(NodeConfig{Name: name, Listen: peers[name], Peers: peers, Secret: []byte("cookie"), DataDir: t.TempDir(),
			HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, WriteTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, nd)
		defer nd.Close()
	}
	_, l := nodeLeader(t, nodes)
	secretish := []byte("a-user's-password-hash-0123456789")
	if err := l.Put("user/alice", secretish); err != nil {
		t.Fatal(err)
	}
	// Raft's leader keeps sending the missing follower its appends, and
	// the nodes dial it again and again: wait for a few connections.
	poll.Eventually(t, 15*time.Second, func() bool { n, _, _ := fake.received(nil); return n >= 3 }, "the nodes never dialled the fake listener")
	for _, nd := range nodes {
		_ = nd.Close()
	}
	fake.close()
	conns, most, found := fake.received(secretish)
	t.Logf("the fake listener was dialled %d times; the most one connection sent it was %d bytes", conns, most)
	if most > dialProofLen {
		t.Errorf("a dialler sent a listener that does not know the secret %d bytes, more than its half of the handshake (%d)", most, dialProofLen)
	}
	if found {
		t.Error("a definition reached the fake listener")
	}
}
