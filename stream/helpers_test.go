package stream

import (
	"fmt"
	"testing"
	"time"
)

// appendWait appends recs and waits for the callback.
func appendWait(t testing.TB, l *Log, recs []Record) uint64 {
	t.Helper()
	type res struct {
		first uint64
		err   error
	}
	ch := make(chan res, 1)
	l.Append(recs, func(first uint64, err error) { ch <- res{first, err} })
	r := <-ch
	if r.err != nil {
		t.Fatalf("append: %v", r.err)
	}
	return r.first
}

// recs makes n records numbered from i, with timestamps ts, ts+1, ...
func mkRecs(i, n int, ts int64, filter string) []Record {
	out := make([]Record, n)
	for k := range out {
		out[k] = Record{Timestamp: ts + int64(k), Filter: filter, Data: fmt.Appendf(nil, "rec-%d", i+k)}
	}
	return out
}

// readAll reads what r selects until it has read every durable record.
func readAll(t testing.TB, r *Reader) []Entry {
	t.Helper()
	var out []Entry
	for {
		e, ok, err := r.Next()
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if !ok {
			return out
		}
		e.Data = append([]byte(nil), e.Data...)
		out = append(out, e)
	}
}

func openT(t testing.TB, dir string, o Options) *Log {
	t.Helper()
	l, err := Open(dir, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

func checkData(t testing.TB, es []Entry, from uint64) {
	t.Helper()
	for k, e := range es {
		want := from + uint64(k)
		if e.Offset != want || string(e.Data) != fmt.Sprintf("rec-%d", want) {
			t.Fatalf("entry %d: offset %d data %q, want offset %d", k, e.Offset, e.Data, want)
		}
	}
}

var ms0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
