package main

import (
	"strings"
	"testing"
)

// A change the manager makes from a version the relay's disable left (Lo set) is placed by its
// own lock, not by that window.
func TestRecordClearsTheRelaysWindow(t *testing.T) {
	m := &epManager{tl: timeline{}, cur: map[string]epVersion{}, stats: changeStats{Committed: map[string]int{}}}
	m.record(epChange{Op: opEnable, ID: "ep-001", V: epVersion{Exists: true, State: stEnabled, Lo: 0x100, After: 0x200}},
		at(1), 0x300, 0x310, false)
	if v := m.tl["ep-001"][0]; v.Lo != 0 || v.Before != 0x300 || v.After != 0x310 {
		t.Fatalf("recorded %+v, want Lo 0 and the change's own bounds", v)
	}
}

// The hook runs once per episode, before its first 410 leaves, and not for an endpoint that
// answers normally.
func TestGoneHookRunsBeforeTheFirst410(t *testing.T) {
	r := &receiver{}
	var calls []string
	hook := func(id string) { calls = append(calls, id) }
	r.goneHook.Store(&hook)
	if r.goneAnswer("ep-001") {
		t.Fatal("answers 410 before setGone")
	}
	r.setGone("ep-001", true)
	for range 3 {
		if !r.goneAnswer("ep-001") {
			t.Fatal("does not answer 410 after setGone")
		}
	}
	if !r.setGone("ep-001", false) {
		t.Fatal("the episode that answered 410 says it answered none")
	}
	r.setGone("ep-001", true)
	if r.setGone("ep-001", false) {
		t.Fatal("an episode that answered nothing says it answered")
	}
	r.setGone("ep-001", true)
	r.goneAnswer("ep-001")
	if strings.Join(calls, ",") != "ep-001,ep-001" {
		t.Fatalf("hook calls %v, want one per episode", calls)
	}
}
