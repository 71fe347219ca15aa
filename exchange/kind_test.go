package exchange

import "testing"

func TestParseKind(t *testing.T) {
	tests := []struct {
		in   string
		want Kind
		ok   bool
	}{
		{"direct", Direct, true},
		{"fanout", Fanout, true},
		{"topic", Topic, true},
		{"headers", Headers, true},
		{"Direct", 0, false},
		{"x-consistent-hash", ConsistentHash, true}, // built in (issue #17)
		{"x-no-such-type", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := ParseKind(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("ParseKind(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
			if ok && got.String() != tt.in {
				t.Fatalf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
	if s := Kind(0).String(); s != "invalid" {
		t.Fatalf("Kind(0).String() = %q", s)
	}
}

func TestNewInvalidKindPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New with Kind(0) did not panic")
		}
	}()
	New("x", 0, false, false, false, nil)
}
