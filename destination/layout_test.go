package destination_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/golist"
)

const module = golist.Module

// goList runs go list with args and returns the fields of its output.
func goList(t *testing.T, args ...string) []string { t.Helper(); return golist.Fields(t, args...) }

// standard reports whether pkg is in the standard library (its first element has no dot).
func standard(pkg string) bool { return golist.Standard(pkg) }

// The contract is a leaf: a destination (and a program's own) that imports it links the message
// type and the standard library, nothing of the engine, the stream or the database.
func TestTheContractIsALeaf(t *testing.T) {
	deps := goList(t, "-deps", module+"/destination")
	if !slices.Contains(deps, module+"/envelope") || !slices.Contains(deps, "context") {
		t.Fatalf("destination links neither envelope nor context: this check would prove nothing (%v)", deps)
	}
	for _, pkg := range deps {
		if !standard(pkg) && pkg != module+"/envelope" && pkg != module+"/destination" {
			t.Errorf("destination links %s: the contract imports envelope and the standard library only", pkg)
		}
	}
}

// A destination works on an envelope.Message and answers a Result: it links neither the stream
// (cdc) nor pgx nor the relay's SQL (internal/state), nor the engine, whose transactions, queues
// and stores are its own business.
func TestDestinationsLinkNoStreamNoDatabase(t *testing.T) {
	forbidden := []string{module + "/cdc", module + "/publisher", module + "/internal/state", module + "/store",
		"github.com/jackc/pgx/v5", "github.com/jackc/pglogrepl"}
	for _, dest := range []string{"destination/webhook", "destination/natsdest", "destination/kafkadest"} {
		t.Run(dest, func(t *testing.T) {
			deps := goList(t, "-deps", module+"/"+dest)
			if !slices.Contains(deps, module+"/destination") {
				t.Fatalf("%s does not link destination: this check would prove nothing", dest)
			}
			for _, pkg := range deps {
				for _, f := range forbidden {
					if pkg == f || strings.HasPrefix(pkg, f+"/") {
						t.Errorf("%s links %s: a destination sees the message, never the stream or the database", dest, pkg)
					}
				}
			}
		})
	}
}

// The message type is a leaf too.
func TestEnvelopeIsALeaf(t *testing.T) {
	for _, pkg := range goList(t, "-deps", module+"/envelope") {
		if pkg != module+"/envelope" && !standard(pkg) {
			t.Errorf("envelope links %s: the message type must stay a leaf (standard library only)", pkg)
		}
	}
}
