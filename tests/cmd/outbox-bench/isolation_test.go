package main

import (
	"testing"
	"time"
)

// The isolation row's verdict on retained WAL: a slot held for the whole blackout grows at the
// write rate (MISS); one that confirms on, with its saw-tooth of restart_lsn jumps, does not.
func TestIsolationWALSlope(t *testing.T) {
	const rate = 1 << 20 // WAL bytes/s
	held, spilled := isolationRun{From: 10 * time.Second, To: 90 * time.Second}, isolationRun{From: 10 * time.Second, To: 90 * time.Second}
	for s := 0; s <= 100; s += 2 {
		at := time.Duration(s) * time.Second
		written := int64(s) * rate
		held.Samples = append(held.Samples, walSample{At: at, Retained: written, Written: written})
		spilled.Samples = append(spilled.Samples, walSample{At: at, Retained: int64(s%16) * rate, Written: written})
	}
	h, sp := held.wal(held.From, held.To), spilled.wal(spilled.From, spilled.To)
	if !h.HaveSlope || h.Slope < (1-targetIsolationSlope)*h.WrittenSlope {
		t.Fatalf("held slot: slope %.0f against %.0f written, want about equal", h.Slope, h.WrittenSlope)
	}
	if !sp.HaveSlope || sp.Slope >= targetIsolationSlope*sp.WrittenSlope {
		t.Fatalf("spilling slot: slope %.0f against %.0f written, want under %.0f%%", sp.Slope, sp.WrittenSlope, 100*targetIsolationSlope)
	}
	if h.Max != 90*rate || h.End != 90*rate {
		t.Fatalf("held slot: max %d, end %d, want %d", h.Max, h.End, 90*rate)
	}
}
