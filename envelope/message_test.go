package envelope

import "testing"

// The documented form: the commit LSN and the index as fixed-width uppercase hex.
func TestSequenceKnownAnswer(t *testing.T) {
	if got, want := Sequence(0x1538A30, 3), "0000000001538A30-00000003"; got != want {
		t.Fatalf("Sequence = %q, want %q", got, want)
	}
	if got := Sequence(^uint64(0), 0xFFFFFFFF); got != "FFFFFFFFFFFFFFFF-FFFFFFFF" || len(got) != SequenceLen {
		t.Fatalf("Sequence at the top = %q", got)
	}
	if got := string(AppendSequence([]byte("x:"), 0x10, 1)); got != "x:0000000000000010-00000001" {
		t.Fatalf("AppendSequence = %q", got)
	}
}

// Compared as strings, sequences rise with the commit LSN, then the index.
func TestSequenceRisesInCommitOrder(t *testing.T) {
	a, b, c := Sequence(0xFFFF, 9), Sequence(0x10000, 0), Sequence(0x10000, 10)
	if !(a < b && b < c) {
		t.Fatalf("%s %s %s not rising", a, b, c)
	}
}
