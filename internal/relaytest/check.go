package relaytest

import (
	"fmt"
	"sort"
)

// Report is the outcome of checking deliveries against what was committed.
type Report struct {
	Committed       int
	Delivered       int // distinct committed ids delivered
	Lost            []string
	Phantoms        []string // delivered ids from rolled-back transactions, or never written
	OrderViolations []string
	Duplicates      int // accepted requests beyond the first per id
}

// OK reports whether nothing was lost, no phantom arrived and order held.
func (r Report) OK() bool {
	return len(r.Lost) == 0 && len(r.Phantoms) == 0 && len(r.OrderViolations) == 0
}

func (r Report) String() string {
	return fmt.Sprintf("committed=%d delivered=%d lost=%d phantoms=%d order_violations=%d duplicates=%d",
		r.Committed, r.Delivered, len(r.Lost), len(r.Phantoms), len(r.OrderViolations), r.Duplicates)
}

// Check compares the receiver's log with what was produced: every committed event delivered,
// nothing else delivered, and per aggregate the first deliveries in commit order with no gaps.
func Check(produced Result, deliveries []Delivery) Report {
	rep := Report{Committed: len(produced.Committed)}
	committed := make(map[string]Committed, len(produced.Committed))
	for _, c := range produced.Committed {
		committed[c.ID] = c
	}
	seen := map[string]bool{}
	lastSeq := map[string]int{}
	for _, d := range deliveries {
		c, ok := committed[d.ID]
		if !ok {
			rep.Phantoms = append(rep.Phantoms, d.ID)
			continue
		}
		if seen[d.ID] {
			rep.Duplicates++
			continue
		}
		seen[d.ID] = true
		if c.Seq != lastSeq[c.Aggregate]+1 {
			rep.OrderViolations = append(rep.OrderViolations,
				fmt.Sprintf("%s: seq %d delivered after %d", c.Aggregate, c.Seq, lastSeq[c.Aggregate]))
		}
		lastSeq[c.Aggregate] = max(lastSeq[c.Aggregate], c.Seq)
	}
	for id := range committed {
		if !seen[id] {
			rep.Lost = append(rep.Lost, id)
		}
	}
	sort.Strings(rep.Lost)
	rep.Delivered = len(seen)
	return rep
}
