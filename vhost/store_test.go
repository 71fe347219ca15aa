package vhost

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
	"github.com/railmq/railmq/queue"
)

// A part of 65,535 bytes or more does not wrap DefName's 16-bit length
// (it took a 70,000-byte part as 4,464 bytes long, and split the rest as
// further parts); a shorter part is written as it always was.
func TestDefNameLongPartDoesNotWrap(t *testing.T) {
	for _, n := range []int{0xfffe, 0xffff, 70000} {
		parts := []string{"/", strings.Repeat("p", n), "q"}
		got, err := SplitDefName(DefName(parts...))
		if err != nil || !reflect.DeepEqual(got, parts) {
			t.Fatalf("a %d-byte part: split into %d parts, %v", n, len(got), err)
		}
	}
	if got := hex.EncodeToString(DefName("/", "q")); got != "00012f000171" {
		t.Fatalf("DefName(/, q) = %s", got)
	}
	if _, err := SplitDefName([]byte{0xff, 0xff, 0, 0}); err == nil {
		t.Fatal("a truncated long part accepted")
	}
}

// bindingForTest is the binding q gets from x in these tests.
func bindingForTest(key string, args amqp.Table) exchange.Binding {
	return exchange.Binding{Dest: exchange.Dest{Name: "q"}, Key: key, Args: args}
}

// The key format of a binding the store could hold before bindings with
// long keys were hashed is unchanged (golden bytes), so what a store
// holds is read, and deleted, as it was: a binding written in that
// format (the value without its routing key) is recovered, and an unbind
// removes it for good. A binding whose key would be over the store's
// limit is stored under the hash of its routing key and arguments, and
// recovered with both from its value.
func TestBindingKeyFormat(t *testing.T) {
	// 'v' 'x' 'q' 'q' 'k', then {"a": "b"} as canonicalArgs: the table
	// (length 8: key "a" after its length, type 'S', length 1, "b"),
	// each part after its 16-bit length.
	const golden = "0001760001780001710001710001" + "6b" + "000c" + "00000008" + "0161" + "53" + "00000001" + "62"
	if got := hex.EncodeToString(bindingName("v", "x", bindingForTest("k", amqp.Table{"a": "b"}))); got != golden {
		t.Fatalf("binding key %s, want %s", got, golden)
	}
	oldKey, _ := hex.DecodeString(golden)

	dir := t.TempDir()
	s, v := openStoreVHost(t, dir, nil)
	if err := v.DeclareExchange(ExchangeDecl{Name: "x", Type: "direct", Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := v.DeclareQueue(QueueDecl{Name: "q", Durable: true}, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	old := &persist.Batch{}
	old.PutDef(persist.DefBinding, oldKey, encodeDef(amqp.Table{"arguments": amqp.Table{"a": "b"}}))
	if err := s.CommitSync(old); err != nil {
		t.Fatal(err)
	}
	big := amqp.Table{"big": strings.Repeat("a", 70000)}
	longKey := strings.Repeat("r", 70000)
	if err := v.Bind(0, "q", false, "x", "k2", big); err != nil {
		t.Fatal(err)
	}
	if err := v.Bind(0, "q", false, "x", longKey, nil); err != nil {
		t.Fatal(err)
	}
	reopen := func() {
		t.Helper()
		v.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, v = openStoreVHost(t, dir, nil)
		if err := v.Recover(queue.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	defer func() {
		v.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	has := func(b exchange.Binding) bool {
		for _, got := range v.Exchange("x").Bindings() {
			if got.Dest == b.Dest && got.Key == b.Key && canonicalArgs(got.Args) == canonicalArgs(b.Args) {
				return true
			}
		}
		return false
	}
	for _, b := range []exchange.Binding{bindingForTest("k", amqp.Table{"a": "b"}), bindingForTest("k2", big), bindingForTest(longKey, nil)} {
		if !has(b) {
			t.Fatalf("binding with a %d-byte key and %d-byte arguments not recovered", len(b.Key), len(canonicalArgs(b.Args)))
		}
	}
	var keys [][]byte
	if err := s.Definitions(func(kind byte, name, val []byte) error {
		if kind == persist.DefBinding {
			keys = append(keys, bytes.Clone(name))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	hashed := 0
	for _, k := range keys {
		if len(k)+2 > persist.MaxKeySize {
			t.Fatalf("a binding key of %d bytes", len(k)+2)
		}
		if parts, err := SplitDefName(k); err == nil && len(parts) == 6 && strings.HasPrefix(parts[5], hashedArgs) {
			hashed++
			if len(parts[5]) != 1+32 || parts[4] != "" {
				t.Fatalf("hashed binding key parts %q %x", parts[4], parts[5])
			}
		}
	}
	if len(keys) != 3 || hashed != 2 {
		t.Fatalf("%d binding keys stored, %d of them hashed; want 3 and 2", len(keys), hashed)
	}
	for _, b := range []exchange.Binding{bindingForTest("k", amqp.Table{"a": "b"}), bindingForTest("k2", big), bindingForTest(longKey, nil)} {
		if err := v.Unbind(0, "q", false, "x", b.Key, b.Args); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	if bs := v.Exchange("x").Bindings(); len(bs) != 0 {
		t.Fatalf("%d unbound bindings back after a restart", len(bs))
	}
}
