package main

import (
	"fmt"
	"testing"
	"time"
)

// A row left pending is excused only by a relay's death shortly after it settled (its done-mark
// dropped with the relay), or by one while the marks waited for PostgreSQL to come back.
func TestKillAfterExcusesOnlyAKillInTheMarksWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	kills := []killed{{Relay: 2, At: at(10), What: "relay-2 SIGKILLed"}, {Relay: 3, At: at(30), What: "relay-3 SIGKILLed"}}
	blocked := []span{{What: "pg-restart", From: at(25), To: at(27)}}
	for _, c := range []struct {
		name    string
		settled float64
		relay   int
		want    string
	}{
		{"the delivering relay killed within its window", 8.5, 2, "relay-2 SIGKILLed"},
		{"another relay killed within a second", 9.5, 3, "relay-2 SIGKILLed"},
		{"another relay killed later than a second", 8.5, 3, ""},
		{"the delivering relay killed long after", 5, 2, ""},
		{"a kill before the settle", 11, 2, ""},
		{"marks waiting for a pg-restart, then a kill", 24, 3, "relay-3 SIGKILLed (marks waiting since the pg-restart at 04:00:25.000000)"},
		{"settled long before the pg-restart", 20, 3, ""},
		{"settled during the pg-restart", 26, 3, "relay-3 SIGKILLed (marks waiting since the pg-restart at 04:00:25.000000)"},
	} {
		k, ok := killAfter(kills, blocked, at(c.settled), c.relay)
		if got := map[bool]string{true: k.What}[ok]; got != c.want {
			t.Errorf("%s: excused by %q, want %q", c.name, got, c.want)
		}
	}
}

// A row one relay delivered to every endpoint that got it is judged by that relay's last
// delivery; else by each relay's last, its own share of the row.
func TestRelaySettles(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	d := func(s float64, relay int, ep string) delivery {
		return delivery{ID: "e", At: t0.Add(time.Duration(s * float64(time.Second))), Relay: relay, Endpoint: ep}
	}
	got := func(ds []delivery) string {
		out := ""
		for _, d := range ds {
			out += fmt.Sprintf("%d@%.1f ", d.Relay, d.At.Sub(t0).Seconds())
		}
		return out
	}
	// Relay 4 delivered it to three endpoints and died; relay 3 sent it again to two (the third
	// held in a backlog relay 4 spilled): relay 4 had it all.
	if s := got(relaySettles([]delivery{d(1, 4, "a"), d(1.1, 4, "b"), d(1.5, 4, "c"), d(3, 3, "a"), d(3.1, 3, "b")})); s != "4@1.5 " {
		t.Errorf("the relay that had it all: %s", s)
	}
	// No relay had it all: each one's share.
	if s := got(relaySettles([]delivery{d(1, 4, "a"), d(3, 3, "b"), d(2, 4, "c")})); s != "4@2.0 3@3.0 " {
		t.Errorf("shares: %s", s)
	}
	// Relay 3 sent it again to every endpoint: only its last delivery counts.
	if s := got(relaySettles([]delivery{d(1, 4, "a"), d(1.5, 4, "b"), d(3, 3, "a"), d(3.1, 3, "b")})); s != "3@3.1 " {
		t.Errorf("a relay with every endpoint: %s", s)
	}
}
