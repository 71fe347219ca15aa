package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestCodecRoundTrip(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 300)
	tests := []struct {
		name string
		enc  func(Enc) Enc
		dec  func(*Dec) any
		want any
	}{
		{"u8", func(b Enc) Enc { return b.U8(0xfe) }, func(d *Dec) any { return d.U8() }, byte(0xfe)},
		{"bool true", func(b Enc) Enc { return b.Bool(true) }, func(d *Dec) any { return d.Bool() }, true},
		{"bool false", func(b Enc) Enc { return b.Bool(false) }, func(d *Dec) any { return d.Bool() }, false},
		{"uvarint 0", func(b Enc) Enc { return b.Uvarint(0) }, func(d *Dec) any { return d.Uvarint() }, uint64(0)},
		{"uvarint max", func(b Enc) Enc { return b.Uvarint(math.MaxUint64) }, func(d *Dec) any { return d.Uvarint() }, uint64(math.MaxUint64)},
		{"varint -1", func(b Enc) Enc { return b.Varint(-1) }, func(d *Dec) any { return d.Varint() }, int64(-1)},
		{"varint min", func(b Enc) Enc { return b.Varint(math.MinInt64) }, func(d *Dec) any { return d.Varint() }, int64(math.MinInt64)},
		{"str", func(b Enc) Enc { return b.Str("héllo") }, func(d *Dec) any { return d.Str() }, "héllo"},
		{"str empty", func(b Enc) Enc { return b.Str("") }, func(d *Dec) any { return d.Str() }, ""},
		{"bytes long", func(b Enc) Enc { return b.Bytes(long) }, func(d *Dec) any { return d.Bytes() }, long},
		{"bytes empty is nil", func(b Enc) Enc { return b.Bytes([]byte{}) }, func(d *Dec) any { return d.Bytes() }, []byte(nil)},
		{"u32", func(b Enc) Enc { return b.U32(0xdeadbeef) }, func(d *Dec) any { return d.U32() }, uint32(0xdeadbeef)},
		{"u64", func(b Enc) Enc { return b.U64(1 << 60) }, func(d *Dec) any { return d.U64() }, uint64(1 << 60)},
		{"bytes32", func(b Enc) Enc { return b.Bytes32(long) }, func(d *Dec) any { return d.Bytes32() }, long},
		{"str32", func(b Enc) Enc { return b.Str32("q") }, func(d *Dec) any { return d.Str32() }, "q"},
		{"raw rest", func(b Enc) Enc { return b.Raw([]byte("tail")) }, func(d *Dec) any { return d.Rest() }, []byte("tail")},
	}
	buf := Enc(nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf = tt.enc(buf[:0]) // a reused buffer
			d := NewDec(buf)
			got := tt.dec(&d)
			if err := d.End(); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			// Every byte short of the whole fails, and does not panic.
			for n := 0; n < len(buf); n++ {
				if tt.name == "raw rest" {
					break
				}
				d := NewDec(buf[:n])
				tt.dec(&d)
				if d.End() == nil {
					t.Fatalf("%d of %d bytes decoded", n, len(buf))
				}
			}
		})
	}
}

func TestDecErrorIsSticky(t *testing.T) {
	d := NewDec(Enc(nil).U8(1).Str("abc"))
	if d.U8() != 1 || d.U64() != 0 || !errors.Is(d.Err(), ErrMalformed) {
		t.Fatalf("a short u64: %v", d.Err())
	}
	if s := d.Str(); s != "" || d.Len() != 0 {
		t.Fatalf("after an error: %q, %d left", s, d.Len())
	}
	// A uvarint that overflows; a count more than what follows holds.
	d = NewDec(bytes.Repeat([]byte{0xff}, 11))
	if d.Uvarint(); d.Err() == nil {
		t.Fatal("an overflowing uvarint decoded")
	}
	d = NewDec(Enc(nil).Uvarint(1 << 40).U8(0))
	if n := d.Count(1); n != 0 || d.Err() == nil {
		t.Fatalf("a count of 2^40 in 1 byte: %d, %v", n, d.Err())
	}
	d = NewDec(Enc(nil).U32(5).Raw(make([]byte, 39)))
	if n := d.Count32(8); n != 0 || d.Err() == nil {
		t.Fatalf("5 8-byte items in 39 bytes: %d, %v", n, d.Err())
	}
	d = NewDec(Enc(nil).U8(1).U8(2))
	d.U8()
	if d.End() == nil {
		t.Fatal("a byte left over passed End")
	}
}

func TestCodecAllocs(t *testing.T) {
	buf := make(Enc, 0, 256)
	body := []byte("body")
	allocs := testing.AllocsPerRun(100, func() {
		buf = buf[:0].U8(1).Uvarint(300).Str("vhost").Bytes(body).U64(7).Bytes32(body).Bool(true)
		d := NewDec(buf)
		d.U8()
		d.Uvarint()
		d.Bytes()
		d.Bytes()
		d.U64()
		d.Bytes32()
		d.Bool()
		if d.End() != nil {
			t.Fatal(d.Err())
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs", allocs)
	}
}

// The persisted formats written with the codec are the bytes they were
// before it (captured from the hand-written encoders it replaced): the
// quorum queues' Raft commands and the log store's entries. Old logs
// decode, and new ones are the same.
func TestPersistedFormatsUnchanged(t *testing.T) {
	m := Message{Exchange: "ex", RoutingKey: "rk", Props: []byte{1, 2, 3}, Body: []byte("hello"), TTL: 1500}
	cmds := []struct {
		c   Command
		hex string
	}{
		{Enqueue(1700000000123, m), "010000018bcfe5687b00000002657800000002726b000000030102030000000568656c6c6f00000000000005dc"},
		{Enqueue(0, Message{}), "010000000000000000000000000000000000000000000000000000000000000000"},
		{EnqueueBatch(42, []Message{m, {RoutingKey: "q", Body: []byte("x")}}), "09000000000000002a0000000200000002657800000002726b000000030102030000000568656c6c6f00000000000005dc0000000000000001710000000000000001780000000000000000"},
		{Checkout("ctag", 10), "02000000000000000000000004637461670000000a"},
		{Cancel("ctag"), "030000000000000000000000046374616700000000"},
		{Settle("ctag", 1, 2, 300), "04000000000000000000000004637461670000000300000000000000010000000000000002000000000000012c"},
		{Return("ctag", 7), "0500000000000000000000000463746167000000010000000000000007"},
		{Discard("ctag", 8, 9), "06000000000000000000000004637461670000000200000000000000080000000000000009"},
		{Release("ctag", 5), "0d00000000000000000000000463746167000000010000000000000005"},
		{Dequeue("node1/get", true), "0a0000000000000000000000096e6f6465312f67657401"},
		{Dequeue("node1/get", false), "0a0000000000000000000000096e6f6465312f67657400"},
		{Down("node2/", "node2/7/"), "0b0000000000000000000000066e6f6465322f000000086e6f6465322f372f"},
		{Purge(), "070000000000000000"},
		{Tick(99), "080000000000000063"},
		{Batch([]Command{Enqueue(5, m), Checkout("c", 2), Tick(5)}), "0c0000000000000000000000030000002d01000000000000000500000002657800000002726b000000030102030000000568656c6c6f00000000000005dc0000001202000000000000000000000001630000000200000009080000000000000005"},
	}
	for _, tc := range cmds {
		old, _ := hex.DecodeString(tc.hex)
		if got := tc.c.Encode(nil); !bytes.Equal(got, old) {
			t.Errorf("%d encodes to %x, was %s", tc.c.Kind, got, tc.hex)
		}
		c, err := DecodeCommand(old)
		if err != nil {
			t.Fatalf("%s: %v", tc.hex, err)
		}
		if !bytes.Equal(c.Encode(nil), old) {
			t.Errorf("%s decodes to %+v", tc.hex, c)
		}
	}
	// The random logs are made by applying them to a Fifo (which messages
	// a consumer settles depends on what it was given), so their hash
	// changes with the state machine's behaviour as well as with the
	// encoding. It changed with RabbitMQ 4.3's expiry at the head of the
	// returns and of each priority level, and its limits evaluated after
	// every command (a Down returning messages past x-max-length drops
	// heads): the 2,500 commands of the logs of before still decode and
	// encode to the same bytes.
	h := sha256.New()
	for seed := int64(1); seed <= 5; seed++ {
		for _, c := range randomLog(seed, 500) {
			h.Write(c.Encode(nil))
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != "24006a20fd2b188dca7cdc2ef8f45d3a0e089fbc0c1a110653be81ff31d2258e" {
		t.Errorf("random logs encode to %s", got)
	}
	logs := []struct {
		l   raft.Log
		hex string
	}{
		{raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("data"), Extensions: []byte("ext"), AppendedAt: time.Unix(0, 1700000000123456789)},
			"000000000000000100000000000000010017979cfe3d85cd15000000046461746100000003657874"},
		{raft.Log{Index: 1 << 40, Term: 7, Type: raft.LogConfiguration}, "000001000000000000000000000000070500000000000000000000000000000000"},
	}
	for _, tc := range logs {
		old, _ := hex.DecodeString(tc.hex)
		if got := encodeLog(&tc.l); !bytes.Equal(got, old) {
			t.Errorf("log %d encodes to %x, was %s", tc.l.Index, got, tc.hex)
		}
		var l raft.Log
		if err := decodeLog(old, &l); err != nil {
			t.Fatal(err)
		}
		if l.Index != tc.l.Index || l.Term != tc.l.Term || l.Type != tc.l.Type || !bytes.Equal(l.Data, tc.l.Data) ||
			!bytes.Equal(l.Extensions, tc.l.Extensions) || !l.AppendedAt.Equal(tc.l.AppendedAt) {
			t.Errorf("log %s decodes to %+v", tc.hex, l)
		}
	}
}

func testEffects() Effects {
	m := &Message{Exchange: "ex", RoutingKey: "rk", Props: []byte{9}, Body: []byte("body"), TTL: -1}
	return Effects{Accepted: true, Refused: []int{0, 3}, Purged: 2, Remaining: 7, Results: []Effects{
		{Accepted: true},
		{Duplicate: true}, // refused as a duplicate (fifo_dedup.go)
		{Got: true, Remaining: 1, Deliveries: []Delivery{{Consumer: "n1/get", ID: 42, Msg: m, Redelivered: true, Count: 2}}},
	}}
}

func TestEffectsRoundTrip(t *testing.T) {
	want := testEffects()
	p := encodeEffects(nil, &want)
	got, err := decodeEffects(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for n := 0; n < len(p); n++ {
		if _, err := decodeEffects(p[:n]); err == nil {
			t.Fatalf("%d of %d bytes decoded", n, len(p))
		}
	}
	// Results nested deeper than a batch's are refused.
	deep := Effects{Results: []Effects{{Results: []Effects{{}}}}}
	if _, err := decodeEffects(encodeEffects(nil, &deep)); err == nil {
		t.Fatal("nested results decoded")
	}
}

func TestMetaCmdRoundTrip(t *testing.T) {
	for _, c := range []metaCmd{
		{Op: metaPut, Key: "q/v/name", Val: []byte("def")},
		{Op: metaDelete, Key: "x/v/ex"},
		{Op: metaBatch, Ops: []Op{{Key: "a", Val: []byte("1")}, {Key: "b", Delete: true}}},
	} {
		p := appendMetaCmd(nil, &c)
		got, err := decodeMetaCmd(p)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("%+v: got %+v, %v", c, got, err)
		}
		for n := 0; n < len(p); n++ {
			if _, err := decodeMetaCmd(p[:n]); err == nil {
				t.Fatalf("%+v: %d of %d bytes decoded", c, n, len(p))
			}
		}
	}
	r := rpcReply{Index: 9, Err: "inequivalent", ErrCode: 406}
	if got, err := decodeReply(r.append(nil)); err != nil || got != r {
		t.Fatalf("reply: %+v, %v", got, err)
	}
}

// FuzzDec runs the decoder over any input with any sequence of field
// reads (ops picks them): it never panics, an error is sticky, and what
// a read decoded re-encodes to something that decodes the same.
func FuzzDec(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, []byte(Enc(nil).U8(7).Bool(true).Uvarint(300).Varint(-5).Str("s").Bytes([]byte("b")).U32(1).U64(2).Bytes32([]byte("c")).Str32("d").Uvarint(2).U8(1).U8(2)))
	f.Add([]byte{2, 2, 11}, []byte(Enc(nil).Uvarint(1<<62).Uvarint(0).Uvarint(4).Raw([]byte("abcd"))))
	f.Add([]byte{12, 5}, []byte{0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, ops, p []byte) {
		d := NewDec(p)
		var re Enc
		for _, op := range ops {
			before, failed := d.Len(), d.Err() != nil
			switch op % 13 {
			case 0:
				re = re.U8(d.U8())
			case 1:
				re = re.Bool(d.Bool())
			case 2:
				re = re.Uvarint(d.Uvarint())
			case 3:
				re = re.Varint(d.Varint())
			case 4:
				re = re.Str(d.Str())
			case 5:
				re = re.Bytes(d.Bytes())
			case 6:
				re = re.U32(d.U32())
			case 7:
				re = re.U64(d.U64())
			case 8:
				re = re.Bytes32(d.Bytes32())
			case 9:
				re = re.Str32(d.Str32())
			case 10:
				re = re.Raw(d.Take(uint64(op) / 13))
			case 11:
				re = re.Uvarint(uint64(d.Count(1 + int(op)%5)))
			case 12:
				re = re.Uvarint(uint64(d.Count32(1 + int(op)%5)))
			}
			if d.Len() > before {
				t.Fatal("a read grew what is left")
			}
			if failed && d.Err() == nil {
				t.Fatal("an error was forgotten")
			}
		}
		if d.Err() != nil {
			return
		}
		// What decoded re-encodes to bytes that decode the same (uvarints
		// may have been written longer than they need).
		d2 := NewDec(re)
		var re2 Enc
		for _, op := range ops {
			switch op % 13 {
			case 0:
				re2 = re2.U8(d2.U8())
			case 1:
				re2 = re2.Bool(d2.Bool())
			case 2, 11, 12:
				re2 = re2.Uvarint(d2.Uvarint())
			case 3:
				re2 = re2.Varint(d2.Varint())
			case 4:
				re2 = re2.Str(d2.Str())
			case 5:
				re2 = re2.Bytes(d2.Bytes())
			case 6:
				re2 = re2.U32(d2.U32())
			case 7:
				re2 = re2.U64(d2.U64())
			case 8:
				re2 = re2.Bytes32(d2.Bytes32())
			case 9:
				re2 = re2.Str32(d2.Str32())
			case 10:
				re2 = re2.Raw(d2.Take(uint64(op) / 13))
			}
		}
		if d2.End() != nil || !bytes.Equal(re, re2) {
			t.Fatalf("re-encoded %x decodes to %x (%v)", re, re2, d2.Err())
		}
	})
}

// FuzzDecodeEffects: a forwarded round's answer, whatever its bytes,
// decodes or fails without panicking; what decodes re-encodes and
// decodes the same.
func FuzzDecodeEffects(f *testing.F) {
	e := testEffects()
	f.Add([]byte(encodeEffects(nil, &e)))
	f.Add([]byte(encodeEffects(nil, &Effects{Accepted: true})))
	f.Fuzz(func(t *testing.T, p []byte) {
		e, err := decodeEffects(p)
		if err != nil {
			return
		}
		e2, err := decodeEffects(encodeEffects(nil, &e))
		if err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("re-encoded: %+v, %v; was %+v", e2, err, e)
		}
	})
}
