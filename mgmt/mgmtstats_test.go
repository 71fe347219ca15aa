package mgmt

import (
	"net/http/httptest"
	"testing"
	"time"
)

// TestHistoryRing: the ring keeps the last samples, returns those within
// the age asked, newest first, at least incr apart.
func TestHistoryRing(t *testing.T) {
	h := newHistory(time.Minute) // 10 samples
	if len(h.pts) != 10 {
		t.Fatalf("a 1 min interval keeps %d samples, want 10", len(h.pts))
	}
	base := int64(1_000_000) * int64(time.Second)
	for i := int64(0); i < 25; i++ {
		h.add(histPoint{at: base + i*int64(time.Minute), ready: i})
	}
	now := base + 24*int64(time.Minute)
	got := h.newest(now, 10*time.Minute, 0)
	if len(got) != 10 || got[0].ready != 24 || got[9].ready != 15 {
		t.Fatalf("newest(10m) = %d samples from %d to %d, want 10 from 24 to 15", len(got), got[0].ready, got[len(got)-1].ready)
	}
	if got := h.newest(now, 3*time.Minute, 0); len(got) != 4 {
		t.Errorf("newest(3m) = %d samples, want 4", len(got))
	}
	got = h.newest(now, 10*time.Minute, 2*time.Minute)
	if len(got) != 5 || got[1].ready != 22 {
		t.Errorf("newest(10m, every 2m) = %v, want 5 samples, 24, 22, ...", got)
	}
	if n := len(newHistory(time.Millisecond).pts); n != 3000 {
		t.Errorf("a 1 ms interval keeps %d samples, want the cap, 3000", n)
	}
}

func TestHistoryParams(t *testing.T) {
	for _, tc := range []struct {
		query     string
		age, incr time.Duration
		ok        bool
	}{
		{"", 0, 0, false},
		{"lengths_age=600&lengths_incr=5", 10 * time.Minute, 5 * time.Second, true},
		{"msg_rates_age=60&msg_rates_incr=10&lengths_age=30", time.Minute, 10 * time.Second, true},
		{"lengths_age=86400", historySpan, 0, true}, // no more than is kept
		{"lengths_age=x", 0, 0, false},
	} {
		r := httptest.NewRequest("GET", "/api/queues/%2F/q?"+tc.query, nil)
		age, incr, ok := historyParams(r)
		if age != tc.age || incr != tc.incr || ok != tc.ok {
			t.Errorf("%q: %v, %v, %v; want %v, %v, %v", tc.query, age, incr, ok, tc.age, tc.incr, tc.ok)
		}
	}
}
