package endpoints_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/catalog"
	"github.com/outbox-relay/outbox-relay/endpoints"
)

// With types in the catalog, Add and Update refuse a pattern that matches none (ErrInvalid, the
// nearest names, nothing written, the transaction usable), return a warning for a pattern of
// deprecated types only, and do not check again a pattern the endpoint already had.
func TestPatternsAreCheckedAgainstTheCatalog(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	var s endpoints.Store
	if _, err := s.Add(ctx, conn, endpoints.Endpoint{ID: "early", URL: "https://early.example/", EventTypes: []string{"legacy.thing"}}); err != nil {
		t.Fatalf("an empty catalog checks nothing: %v", err)
	}
	for _, ty := range []catalog.Type{{Name: "order.created"}, {Name: "order.canceled"},
		{Name: "order.cancelled", Deprecated: true, ReplacedBy: "order.canceled"}} {
		if _, _, err := (catalog.Catalog{}).Put(ctx, conn, ty); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = s.Add(ctx, tx, endpoints.Endpoint{ID: "typo", URL: "https://typo.example/", EventTypes: []string{"order.created", "ordr.canceled"}})
	var u *catalog.UnknownPatternError
	if !errors.Is(err, endpoints.ErrInvalid) || !errors.As(err, &u) || u.Pattern != "ordr.canceled" ||
		!strings.Contains(err.Error(), "did you mean order.canceled") {
		t.Fatalf("a pattern matching no type: %v", err)
	}
	got, err := s.Add(ctx, tx, endpoints.Endpoint{ID: "old", URL: "https://old.example/", EventTypes: []string{"order.cancelled"}})
	if err != nil || len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0], "use order.canceled") {
		t.Fatalf("a deprecated type: %v, warnings %q", err, got.Warnings)
	}
	if _, err := s.Get(ctx, tx, "typo"); !errors.Is(err, endpoints.ErrNotFound) {
		t.Fatalf("the refused endpoint was written: %v", err)
	}
	if _, err := s.Update(ctx, tx, "old", func(e *endpoints.Endpoint) error { e.EventTypes = []string{"order.*", "shipment.*"}; return nil }); !errors.Is(err, endpoints.ErrInvalid) {
		t.Fatalf("an update adding a pattern matching no type: %v", err)
	}
	got, err = s.Update(ctx, tx, "old", func(e *endpoints.Endpoint) error { e.EventTypes = []string{"order.*"}; return nil })
	if err != nil || len(got.Warnings) != 0 {
		t.Fatalf("an update to a live pattern: %v, warnings %q", err, got.Warnings)
	}
	if _, err := s.Update(ctx, tx, "early", func(e *endpoints.Endpoint) error { e.URL = "https://early.example/v2"; return nil }); err != nil {
		t.Fatalf("an update keeping a pattern added before the catalog: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the transaction is not usable after the refusals: %v", err)
	}
}

// DenyPrivate is stored and read back, refuses private URLs and allow_private_url beside it;
// Store.Egress refuses what the relay would under --egress-deny-private, with --egress-allow
// admitting a range; EgressProxy round-trips.
func TestDenyPrivateAndTheEgressPolicy(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	var s endpoints.Store
	ep := endpoints.Endpoint{ID: "tenant", URL: "http://10.0.0.8/hooks", DenyPrivate: true}
	if _, err := s.Add(ctx, conn, ep); !errors.Is(err, endpoints.ErrInvalid) || !strings.Contains(err.Error(), "10.0.0.8 is private") {
		t.Fatalf("a tenant's private URL: %v", err)
	}
	ep.URL, ep.EgressProxy = "https://partner.example/hooks", "http://proxy.internal:3128"
	got, err := s.Add(ctx, conn, ep)
	if err != nil || !got.DenyPrivate || got.EgressProxy != "http://proxy.internal:3128" {
		t.Fatalf("add: %+v, %v", got, err)
	}
	if _, err := s.Update(ctx, conn, "tenant", func(e *endpoints.Endpoint) error { e.AllowPrivateURL = true; return nil }); !errors.Is(err, endpoints.ErrInvalid) {
		t.Fatalf("allow_private_url beside deny_private: %v", err)
	}
	if _, err := conn.Exec(ctx, `UPDATE outbox_endpoints SET allow_private_url = true WHERE id = 'tenant'`); err == nil {
		t.Fatal("the table accepted allow_private_url beside deny_private")
	}
	if _, err := s.Add(ctx, conn, endpoints.Endpoint{ID: "op", URL: "http://10.0.0.8/hooks"}); err != nil {
		t.Fatalf("positive control, an operator's private URL without a policy: %v", err)
	}
	strict := endpoints.Store{Egress: endpoints.Egress{DenyPrivate: true}}
	if _, err := strict.Add(ctx, conn, endpoints.Endpoint{ID: "op2", URL: "http://10.0.0.8/hooks"}); !errors.Is(err, endpoints.ErrInvalid) {
		t.Fatalf("under Egress.DenyPrivate: %v", err)
	}
	strict.Egress.Allow = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}
	if _, err := strict.Add(ctx, conn, endpoints.Endpoint{ID: "op2", URL: "http://10.0.0.8/hooks"}); err != nil {
		t.Fatalf("under Egress.DenyPrivate with Allow: %v", err)
	}
}
