package stream

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"
)

// The recovery measurement (bench/stream-recovery.sh), gated by
// environment variables: TestRecoveryWrite fills STREAM_RECOVERY_DIR to
// STREAM_RECOVERY_SIZE bytes, writes a file "ready" beside it and goes on
// appending until the script kills it with SIGKILL;
// TestRecoveryOpen then times Open and the first reads.

func TestRecoveryWrite(t *testing.T) {
	dir := os.Getenv("STREAM_RECOVERY_DIR")
	if dir == "" {
		t.Skip("STREAM_RECOVERY_DIR not set (bench/stream-recovery.sh)")
	}
	size, err := strconv.ParseInt(os.Getenv("STREAM_RECOVERY_SIZE"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{'x'}, 1024)
	sem := make(chan struct{}, 8)
	ready := false
	t0 := time.Now()
	for {
		recs := make([]Record, 256)
		now := time.Now().UnixMilli()
		for i := range recs {
			recs[i] = Record{Timestamp: now, Data: data}
		}
		sem <- struct{}{}
		l.Append(recs, func(_ uint64, err error) {
			if err != nil {
				panic(err)
			}
			<-sem
		})
		if !ready && l.Stats().Bytes >= size {
			ready = true
			st := l.Stats()
			fmt.Printf("filled %d bytes, %d records, %d segments in %v\n", st.Bytes, st.Next, st.Segments, time.Since(t0).Round(time.Millisecond))
			if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "ready"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestRecoveryOpen(t *testing.T) {
	dir := os.Getenv("STREAM_RECOVERY_DIR")
	if dir == "" {
		t.Skip("STREAM_RECOVERY_DIR not set (bench/stream-recovery.sh)")
	}
	zl, _ := zap.NewDevelopment()
	t0 := time.Now()
	l, err := Open(dir, Options{Log: zl})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tOpen := time.Since(t0)
	read := func(s Spec) uint64 {
		r, err := l.NewReader(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		e, ok, err := r.Next()
		if err != nil || !ok {
			t.Fatalf("first read: %v %v", ok, err)
		}
		return e.Offset
	}
	_, next := l.Bounds()
	oLast := read(Spec{Kind: Last})
	tLast := time.Since(t0)
	oFirst := read(Spec{Kind: First})
	tFirst := time.Since(t0)
	oMid := read(Spec{Kind: Offset, Offset: next / 2})
	tMid := time.Since(t0)
	st := l.Stats()
	fmt.Printf("{\"bytes\":%d,\"segments\":%d,\"records\":%d,\"open_ms\":%.1f,\"open_read_last_ms\":%.1f,\"then_read_first_ms\":%.1f,\"then_read_middle_ms\":%.1f,\"last\":%d,\"first\":%d,\"middle\":%d}\n",
		st.Bytes, st.Segments, st.Next, ms(tOpen), ms(tLast), ms(tFirst), ms(tMid), oLast, oFirst, oMid)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
