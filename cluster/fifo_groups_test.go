package cluster

import (
	"fmt"
	"math/rand"
	"runtime"
	"strings"
	"testing"
)

// grpKey is a test GroupKey: the group is the message's props, if any.
func grpKey(props []byte) ([]byte, bool) { return props, len(props) > 0 }

func gmsg(group, body string) Message {
	return Message{RoutingKey: "q", Props: []byte(group), Body: []byte(body)}
}

func newGrouped(cfg FifoConfig) *Fifo {
	f := NewFifo(cfg)
	f.grp.arg = grpKey
	f.setGroupKey(grpKey)
	return f
}

// bodyList lists the deliveries' bodies.
func bodyList(ds []Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Msg.Body)
	}
	return out
}

// byConsumer lists the bodies each consumer got.
func byConsumer(ds []Delivery) map[string][]string {
	out := map[string][]string{}
	for _, d := range ds {
		out[d.Consumer] = append(out[d.Consumer], string(d.Msg.Body))
	}
	return out
}

// TestFifoGroupsOrderAndHolder: the messages of a group go to one
// consumer at a time, in order; different groups go to competing
// consumers in parallel; a message without the header is in no group.
func TestFifoGroupsOrderAndHolder(t *testing.T) {
	f := newGrouped(FifoConfig{DeliveryLimit: -1})
	for _, m := range []Message{gmsg("A", "a1"), gmsg("A", "a2"), gmsg("B", "b1"), gmsg("B", "b2"), gmsg("", "n1"), gmsg("", "n2")} {
		f.Apply(Enqueue(1, m))
	}
	var ds []Delivery
	ds = append(ds, f.Apply(Checkout("c1", 10)).Deliveries...)
	// c1 alone takes everything, in group turns.
	if got := fmt.Sprint(bodyList(ds)); got != "[a1 b1 n1 a2 b2 n2]" {
		t.Fatalf("one consumer got %s, want the groups in turn", got)
	}
	for _, d := range ds {
		f.Apply(Settle("c1", d.ID))
	}
	// Two consumers: each group with one of them.
	f.Apply(Checkout("c2", 10))
	for _, m := range []Message{gmsg("A", "a3"), gmsg("B", "b3"), gmsg("A", "a4"), gmsg("B", "b4"), gmsg("A", "a5")} {
		ds = append(ds, f.Apply(Enqueue(2, m)).Deliveries...)
	}
	got := byConsumer(ds[6:])
	if fmt.Sprint(got["c1"]) != "[a3 a4 a5]" || fmt.Sprint(got["c2"]) != "[b3 b4]" {
		t.Fatalf("two consumers got %v, want A's with c1, B's with c2", got)
	}
	if h := f.GroupHolder([]byte("A")); h != "c1" {
		t.Fatalf("A held by %q", h)
	}
	if f.Groups() != 2 {
		t.Fatalf("%d groups kept, want 2", f.Groups())
	}
}

// TestFifoGroupsRelease: a group is released when its last checked-out
// message is settled, returned (back at its group's head), or its
// consumer goes (Down); a cancelled consumer's group waits for its
// messages to be settled.
func TestFifoGroupsRelease(t *testing.T) {
	f := newGrouped(FifoConfig{DeliveryLimit: -1})
	for i := 1; i <= 4; i++ {
		f.Apply(Enqueue(1, gmsg("A", fmt.Sprint("a", i))))
	}
	d1 := f.Apply(Checkout("c1", 1)).Deliveries
	if fmt.Sprint(bodyList(d1)) != "[a1]" {
		t.Fatalf("c1 got %v", bodyList(d1))
	}
	// c2 gets nothing while c1 holds A.
	if d := f.Apply(Checkout("c2", 1)).Deliveries; len(d) != 0 {
		t.Fatalf("c2 got %v while c1 holds A", bodyList(d))
	}
	// Settled: c1 had room again first? It has room now, and so has c2:
	// the group is free and goes to the next consumer in turn.
	d := f.Apply(Settle("c1", d1[0].ID)).Deliveries
	if len(d) != 1 || string(d[0].Msg.Body) != "a2" {
		t.Fatalf("after settle: %v", bodyList(d))
	}
	holder := d[0].Consumer
	// Returned: back at the group's head, the group free.
	d = f.Apply(Return(holder, d[0].ID)).Deliveries
	if len(d) != 1 || string(d[0].Msg.Body) != "a2" || !d[0].Redelivered {
		t.Fatalf("after return: %+v", d)
	}
	holder = d[0].Consumer
	// Down: its consumer's messages return, the other takes the group on.
	d = f.Apply(Down(holder, "")).Deliveries
	other := map[string]string{"c1": "c2", "c2": "c1"}[holder]
	if len(d) != 1 || string(d[0].Msg.Body) != "a2" || d[0].Consumer != other {
		t.Fatalf("after down of %s: %+v", holder, d)
	}
	// Cancel: the group stays with the cancelled consumer's message.
	f.Apply(Checkout("c3", 1))
	if d := f.Apply(Cancel(other)).Deliveries; len(d) != 0 {
		t.Fatalf("after cancel: %v went out while %s's a2 is unsettled", bodyList(d), other)
	}
	d = f.Apply(Settle(other, d[0].ID)).Deliveries
	if len(d) != 1 || string(d[0].Msg.Body) != "a3" || d[0].Consumer != "c3" {
		t.Fatalf("after the cancelled consumer's settle: %+v", d)
	}
	// A got message holds its group too.
	f.Apply(Cancel("c3"))
	f.Apply(Settle("c3", d[0].ID))
	g := f.Apply(Dequeue("get", false)).Deliveries
	if len(g) != 1 || string(g[0].Msg.Body) != "a4" {
		t.Fatalf("get: %v", bodyList(g))
	}
	f.Apply(Enqueue(3, gmsg("A", "a5")))
	if d := f.Apply(Dequeue("get2", false)).Deliveries; len(d) != 0 {
		t.Fatalf("a second get took %v while A is held by the first", bodyList(d))
	}
	f.Apply(Settle("get", g[0].ID))
	if d := f.Apply(Dequeue("get2", true)).Deliveries; len(d) != 1 || string(d[0].Msg.Body) != "a5" {
		t.Fatalf("get after settle: %v", bodyList(d))
	}
	if f.Groups() != 0 || f.Len() != 0 {
		t.Fatalf("drained: %d groups, %d messages", f.Groups(), f.Len())
	}
}

// TestFifoGroupsReturnOrder: with prefetch above 1, a returned message
// goes back ahead of its group's later ready ones; a delayed retry holds
// its group back until it is due.
func TestFifoGroupsReturnOrder(t *testing.T) {
	f := newGrouped(FifoConfig{DeliveryLimit: -1})
	for i := 1; i <= 5; i++ {
		f.Apply(Enqueue(1, gmsg("A", fmt.Sprint("a", i))))
	}
	d := f.Apply(Checkout("c1", 2)).Deliveries // a1, a2
	f.Apply(Cancel("c1"))
	f.Apply(Checkout("c2", 10))
	// c1 returns a2, then a1: they come back in order, ahead of a3.
	f.Apply(Return("c1", d[1].ID))
	got := f.Apply(Return("c1", d[0].ID)).Deliveries
	if fmt.Sprint(bodyList(got)) != "[a1 a2 a3 a4 a5]" {
		t.Fatalf("after returns: %v", bodyList(got))
	}
	// A delayed retry of a1: the rest of A waits until it is due.
	f.Apply(Modify("c2", false, 100, got[0].ID))
	for _, x := range got[1:] {
		f.Apply(Return("c2", x.ID))
	}
	f.Apply(Cancel("c2"))
	if d := f.Apply(Checkout("c3", 10)).Deliveries; len(d) != 0 {
		t.Fatalf("while a1 waits for its retry, c3 got %v", bodyList(d))
	}
	if d := f.Apply(Tick(100)).Deliveries; fmt.Sprint(bodyList(d)) != "[a1 a2 a3 a4 a5]" {
		t.Fatalf("after the retry delay: %v", bodyList(d))
	}
}

// TestFifoGroupsFair: groups are served in turn, one message per turn: a
// group with a backlog does not hold up 50 groups of one message behind
// it.
func TestFifoGroupsFair(t *testing.T) {
	f := newGrouped(FifoConfig{DeliveryLimit: -1})
	for i := 0; i < 1000; i++ {
		f.Apply(Enqueue(1, gmsg("big", fmt.Sprint("big", i))))
	}
	for i := 0; i < 50; i++ {
		f.Apply(Enqueue(1, gmsg(fmt.Sprint("s", i), fmt.Sprint("s", i))))
	}
	ds := f.Apply(Checkout("c1", 0)).Deliveries
	if len(ds) != 1050 {
		t.Fatalf("%d delivered", len(ds))
	}
	// big0, then each single's turn, then big's backlog.
	for i, d := range ds[:60] {
		want := "big0"
		switch {
		case i >= 1 && i <= 50:
			want = fmt.Sprint("s", i-1)
		case i > 50:
			want = fmt.Sprint("big", i-50)
		}
		if string(d.Msg.Body) != want {
			t.Fatalf("delivery %d is %s, want %s (the groups in turn)", i, d.Msg.Body, want)
		}
	}
}

// TestFifoGroupsStateDrops: 10,000 groups that came and went leave no
// state behind. It logs what an active group costs beyond its messages
// (the heap of a grouped state less a plain one's, same messages).
func TestFifoGroupsStateDrops(t *testing.T) {
	heap := func(grouped bool) (uint64, *Fifo) {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		f := NewFifo(FifoConfig{DeliveryLimit: -1})
		if grouped {
			f.setGroupKey(grpKey)
		}
		for i := 0; i < 10000; i++ {
			f.Apply(Enqueue(1, gmsg(fmt.Sprint("g", i), "x")))
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		return m1.HeapAlloc - m0.HeapAlloc, f
	}
	plain, pf := heap(false)
	grouped, gf := heap(true)
	t.Logf("an active group costs about %d bytes beyond its message", (int64(grouped)-int64(plain))/10000)
	runtime.KeepAlive(pf)
	runtime.KeepAlive(gf)

	f := newGrouped(FifoConfig{DeliveryLimit: -1})
	for i := 0; i < 10000; i++ {
		f.Apply(Enqueue(1, gmsg(fmt.Sprint("g", i), "x")))
	}
	if f.Groups() != 10000 {
		t.Fatalf("%d groups", f.Groups())
	}
	f.Apply(Checkout("c", 100))
	for f.Len() > 0 {
		var ids []uint64
		for _, d := range f.CheckedOut("c") {
			ids = append(ids, d.ID)
		}
		f.Apply(Settle("c", ids...))
	}
	gs := f.ready.g
	if f.Groups() != 0 || gs.ring.n != 0 || gs.ring.buf != nil || gs.peak > 1024 {
		t.Fatalf("drained: %d groups, ring %d (buf %d), peak %d", f.Groups(), gs.ring.n, len(gs.ring.buf), gs.peak)
	}
}

// randomGroupLog is randomLog's grouped counterpart: messages of 6
// groups and none, consumers of several prefetches, settles, returns,
// delayed retries, gets, purges, downs, ticks.
func randomGroupLog(seed int64, n int, cfg FifoConfig, policy bool) []Command {
	rnd := rand.New(rand.NewSource(seed))
	var log []Command
	f := newGrouped(cfg)
	if policy {
		f = newPolicyGrouped(cfg)
	}
	now := int64(0)
	for len(log) < n {
		now += int64(rnd.Intn(20))
		var c Command
		tag := fmt.Sprintf("c%d", rnd.Intn(4))
		grp := []string{"", "A", "B", "C", "D", "E", "F"}[rnd.Intn(7)]
		if policy {
			grp += "|" + []string{"", "X", "Y", "Z"}[rnd.Intn(4)]
		}
		switch k := rnd.Intn(16); {
		case k < 4:
			c = Enqueue(now, Message{RoutingKey: "q", Props: []byte(grp), Body: []byte(fmt.Sprint(len(log))), TTL: int64(rnd.Intn(4)/3) * 300})
		case k == 4:
			c = Checkout(tag, rnd.Intn(4))
		case k == 5:
			c = Cancel(tag)
		case k == 6:
			c = Tick(now)
		case k == 7:
			c = Dequeue(tag, rnd.Intn(2) == 0)
		case k == 8:
			c = Down(tag, "")
		case k == 9 && rnd.Intn(20) == 0:
			c = Purge()
		case k == 10 && policy && rnd.Intn(10) == 0:
			c = GroupHeader([]string{"", "first", "second"}[rnd.Intn(3)])
		default:
			out := f.CheckedOut(tag)
			out = append(out, f.Orphans(tag)...)
			if len(out) == 0 {
				continue
			}
			id := out[rnd.Intn(len(out))].ID
			c = []Command{Settle(tag, id), Return(tag, id), Discard(tag, id), Release(tag, id), Modify(tag, false, now+int64(rnd.Intn(50)), id)}[rnd.Intn(5)]
		}
		f.Apply(c)
		log = append(log, c)
	}
	return log
}

// checkGroups asserts the group rule on f after a command whose effects
// are e: no group has checked-out messages with two tags, and no
// message delivered has a message of its group ready or held with a
// lower id.
func checkGroups(t *testing.T, f *Fifo, e *Effects, holders bool, where string) {
	t.Helper()
	if f.ready.g == nil {
		return
	}
	key := func(p []byte) string {
		k, ok := f.ready.g.key(p)
		if !ok {
			return ""
		}
		return string(k)
	}
	holder := map[string]string{}
	for _, m := range f.msgs {
		if m.Consumer == "" || m.Reason != "" || key(m.Props) == "" {
			continue
		}
		if h, ok := holder[key(m.Props)]; holders && ok && h != m.Consumer {
			t.Fatalf("%s: group %s held by %s and %s", where, m.Props, h, m.Consumer)
		}
		holder[key(m.Props)] = m.Consumer
	}
	for _, d := range e.Deliveries {
		if key(d.Msg.Props) == "" {
			continue
		}
		for _, m := range f.msgs {
			if m.Consumer == "" && m.Reason == "" && m.ID < d.ID && key(m.Props) == key(d.Msg.Props) {
				t.Fatalf("%s: %d of group %s delivered before %d", where, d.ID, d.Msg.Props, m.ID)
			}
		}
	}
}

// TestFifoGroupsDeterministic: the group rule holds at every step of
// random logs, and members applying the same log reach the same state
// with the same effects, one restored from a snapshot midway too (the
// groups rebuilt from its messages and the image's rotation).
func TestFifoGroupsDeterministic(t *testing.T) {
	cfg := FifoConfig{DeliveryLimit: 3, MaxLength: 40}
	for seed := int64(1); seed <= 40; seed++ {
		policy := seed > 30 // groups from GroupHeader commands, changing
		log := randomGroupLog(seed, 3000, cfg, policy)
		a, b := newGrouped(cfg), newGrouped(cfg)
		if policy {
			a, b = newPolicyGrouped(cfg), newPolicyGrouped(cfg)
		}
		var restored *Fifo
		for i, c := range log {
			dc, err := DecodeCommand(c.Encode(nil))
			if err != nil {
				t.Fatalf("seed %d entry %d: %v", seed, i, err)
			}
			ea, eb := a.Apply(c), b.Apply(dc)
			// A header changed while messages are out may find a group
			// with two holders (until they are settled): the order only.
			checkGroups(t, a, &ea, !policy, fmt.Sprintf("seed %d entry %d", seed, i))
			sa := fmt.Sprint(byConsumer(ea.Deliveries), reasons(ea.DeadLetters), ea.Accepted)
			if sa != fmt.Sprint(byConsumer(eb.Deliveries), reasons(eb.DeadLetters), eb.Accepted) {
				t.Fatalf("seed %d entry %d: effects differ", seed, i)
			}
			if restored != nil {
				er := restored.Apply(dc)
				if fmt.Sprint(byConsumer(ea.Deliveries), reasons(ea.DeadLetters)) != fmt.Sprint(byConsumer(er.Deliveries), reasons(er.DeadLetters)) {
					t.Fatalf("seed %d entry %d: the restored member's effects differ: %v vs %v", seed, i, byConsumer(ea.Deliveries), byConsumer(er.Deliveries))
				}
			}
			if i == len(log)/2 {
				restored = restoreCopy(t, a)
				restored.restoreGroups(a.grp)
			}
		}
		if !sameState(t, a, restored) || a.Groups() != restored.Groups() {
			t.Fatalf("seed %d: the restored member's final state differs", seed)
		}
	}
}

// TestFifoGroupsRestoreKeepsHolder: a member restored from a snapshot
// (QueueFSM.Restore) keeps who holds each group and each group's order.
func TestFifoGroupsRestoreKeepsHolder(t *testing.T) {
	f := newGrouped(FifoConfig{DeliveryLimit: -1})
	for i := 1; i <= 3; i++ {
		f.Apply(Enqueue(1, gmsg("A", fmt.Sprint("a", i))))
		f.Apply(Enqueue(1, gmsg("B", fmt.Sprint("b", i))))
	}
	d := f.Apply(Checkout("c1", 1)).Deliveries // a1
	r := restoreCopy(t, f)
	r.setGroupKey(grpKey)
	if r.GroupHolder([]byte("A")) != "c1" || r.Groups() != 2 {
		t.Fatalf("restored: A held by %q, %d groups", r.GroupHolder([]byte("A")), r.Groups())
	}
	got := r.Apply(Checkout("c2", 10)).Deliveries
	if fmt.Sprint(bodyList(got)) != "[b1 b2 b3]" {
		t.Fatalf("restored, c2 got %v, want B's only", bodyList(got))
	}
	got = r.Apply(Settle("c1", d[0].ID)).Deliveries
	if fmt.Sprint(byConsumer(got)) != "map[c1:[a2]]" && fmt.Sprint(byConsumer(got)) != "map[c2:[a2 a3]]" {
		t.Fatalf("restored, after settle: %v", byConsumer(got))
	}
}

// newPolicyGrouped is a state grouped by GroupHeader commands: header
// "first" groups by the props' part before '|' (as grpKey does for props
// without one), "second" by the part after it.
func newPolicyGrouped(cfg FifoConfig) *Fifo {
	f := NewFifo(cfg)
	f.grp.keyFor = func(h string) func([]byte) ([]byte, bool) {
		return func(p []byte) ([]byte, bool) {
			a, b, _ := strings.Cut(string(p), "|")
			if h == "second" {
				a = b
			}
			return []byte(a), a != ""
		}
	}
	return f
}

// TestFifoGroupsPolicyHeader: a GroupHeader command (a policy's
// message-group-header) groups a running queue by its header, regroups
// it by another, and ungroups it, in log order; it survives encoding and
// a snapshot; a queue grouped by its argument ignores it.
func TestFifoGroupsPolicyHeader(t *testing.T) {
	c := GroupHeader("second")
	if dc, err := DecodeCommand(c.Encode(nil)); err != nil || dc.Kind != cmdGroupHeader || dc.Consumer != "second" {
		t.Fatalf("decoded %+v, %v", dc, err)
	}
	f := newPolicyGrouped(FifoConfig{DeliveryLimit: -1})
	for _, m := range []Message{gmsg("A|X", "1"), gmsg("A|Y", "2"), gmsg("B|X", "3"), gmsg("B|Y", "4")} {
		f.Apply(Enqueue(1, m))
	}
	f.Apply(GroupHeader("first"))
	if f.Groups() != 2 || f.PolicyGroupHeader() != "first" {
		t.Fatalf("by first: %d groups", f.Groups())
	}
	d := f.Apply(Checkout("c1", 1)).Deliveries // 1 (A|X): holds A
	if fmt.Sprint(bodyList(d)) != "[1]" {
		t.Fatalf("c1 got %v", bodyList(d))
	}
	if d := f.Apply(Checkout("c2", 10)).Deliveries; fmt.Sprint(bodyList(d)) != "[3 4]" {
		t.Fatalf("by first, c2 got %v, want B's", bodyList(d))
	}
	// By second: 1 (X) is out with c1, so X is c1's; Y's 2 goes to c2...
	// c2 has 3 (X) and 4 (Y) out: X is held twice over, as the new
	// header finds it; Y by c2.
	r := restoreCopy(t, f)
	r.restoreGroups(f.grp)
	for _, x := range []*Fifo{f, r} {
		if e := x.Apply(GroupHeader("second")); len(e.Deliveries) != 1 || string(e.Deliveries[0].Msg.Body) != "2" || e.Deliveries[0].Consumer != "c2" {
			t.Fatalf("by second: %+v", e.Deliveries)
		}
	}
	if g := restoreCopy(t, f); g.PolicyGroupHeader() != "second" {
		t.Fatalf("snapshot lost the header: %q", g.PolicyGroupHeader())
	}
	// Ungrouped: a group's messages go to anyone with room.
	f.Apply(Settle("c1", 1))
	if f.Apply(GroupHeader("")); f.Groups() != 0 || f.Grouped() {
		t.Fatalf("ungrouped: %d groups", f.Groups())
	}
	d1 := f.Apply(Enqueue(2, gmsg("A|Y", "5"))).Deliveries
	d2 := f.Apply(Enqueue(2, gmsg("A|Y", "6"))).Deliveries
	if len(d1) != 1 || len(d2) != 1 || d1[0].Consumer == d2[0].Consumer {
		t.Fatalf("ungrouped: %v then %v, want both consumers", byConsumer(d1), byConsumer(d2))
	}
	// The argument wins.
	g := newGrouped(FifoConfig{DeliveryLimit: -1})
	g.Apply(GroupHeader("second"))
	if g.PolicyGroupHeader() != "" || !g.Grouped() {
		t.Fatal("a GroupHeader command changed a queue grouped by its argument")
	}
}
