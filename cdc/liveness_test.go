package cdc

import (
	"testing"
	"time"
)

func TestSilenceProbesThenDeclaresDead(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := silence{timeout: 4 * time.Second}
	s.heard(t0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		name       string
		at         time.Duration
		probe      bool
		dead       bool
		next       time.Duration
		sendsProbe bool
	}{
		{name: "just heard", at: 0, next: time.Second},
		{name: "before a quarter", at: 999 * time.Millisecond, next: time.Second},
		{name: "a quarter: first probe", at: time.Second, probe: true, sendsProbe: true, next: 2 * time.Second},
		{name: "between probes", at: 1500 * time.Millisecond, next: 2 * time.Second},
		{name: "second probe", at: 2 * time.Second, probe: true, sendsProbe: true, next: 3 * time.Second},
		{name: "third probe", at: 3 * time.Second, probe: true, sendsProbe: true, next: 4 * time.Second},
		{name: "whole timeout", at: 4 * time.Second, probe: true, dead: true},
	}
	for _, st := range steps {
		now := at(st.at)
		if got := s.probeDue(now); got != st.probe {
			t.Fatalf("%s: probeDue = %v, want %v", st.name, got, st.probe)
		}
		if got := s.dead(now); got != st.dead {
			t.Fatalf("%s: dead = %v, want %v", st.name, got, st.dead)
		}
		if st.sendsProbe {
			s.probed = now
		}
		if !st.dead {
			if got := s.next(); !got.Equal(at(st.next)) {
				t.Fatalf("%s: next = %s after the start, want %s", st.name, got.Sub(t0), st.next)
			}
		}
	}
	s.heard(at(4500 * time.Millisecond)) // the answer to a probe
	if s.dead(at(5*time.Second)) || s.probeDue(at(5*time.Second)) {
		t.Fatal("a message restarts the wait: no probe, not dead, half a second later")
	}
}

func TestBackoffGrowsAndResetsAfterAHealthySession(t *testing.T) {
	const maxWait = 10 * time.Second
	cur := backoffMin
	var waits []time.Duration
	for i := 0; i < 9; i++ { // sessions that never streamed, or only briefly
		var w time.Duration
		w, cur = nextBackoff(cur, 5*time.Second, maxWait)
		waits = append(waits, w)
	}
	if waits[0] != backoffMin || waits[1] != 2*backoffMin || waits[8] != maxWait {
		t.Fatalf("waits %v: want 100ms doubling up to %s", waits, maxWait)
	}
	w, cur := nextBackoff(cur, backoffReset, maxWait)
	if w != backoffMin || cur != 2*backoffMin {
		t.Fatalf("after a session that streamed %s: wait %s then %s, want %s then %s", backoffReset, w, cur,
			backoffMin, 2*backoffMin)
	}
}
