package outbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The deprecated endpoint names delegate to package endpoints: what one writes the other reads,
// their errors are the same values, and outbox.Endpoints' Schema reaches the store.
func TestDeprecatedEndpointNamesDelegate(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	if _, err := migrations.UpWith(ctx, dsn, migrations.Options{Schema: "app"}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	old := outbox.Endpoints{Schema: "app"}
	added, err := old.Add(ctx, conn, outbox.Endpoint{ID: "acme", URL: "https://acme.example/", TenantID: "acme"})
	if err != nil || added.Secret == "" {
		t.Fatalf("add through outbox.Endpoints: %+v, %v", added, err)
	}
	got, err := endpoints.Store{Schema: "app"}.Get(ctx, conn, "acme")
	if err != nil || got.URL != "https://acme.example/" {
		t.Fatalf("read back through endpoints.Store: %+v, %v", got, err)
	}
	if _, err := old.Add(ctx, conn, outbox.Endpoint{ID: "acme", URL: "https://acme.example/"}); !errors.Is(err, outbox.ErrEndpointExists) ||
		!errors.Is(err, endpoints.ErrExists) {
		t.Fatalf("a taken id: %v, want both names of the error", err)
	}
	if _, err := old.Pause(ctx, conn, "acme", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Enable(ctx, conn, "acme"); !errors.Is(err, outbox.ErrEndpointState) {
		t.Fatalf("enable a paused endpoint: %v, want ErrEndpointState", err)
	}
	// The schema reached the store: the search_path's (public) has no such table.
	if _, err := outbox.GetEndpoint(ctx, conn, "acme"); err == nil {
		t.Fatal("GetEndpoint found acme outside schema app")
	}
}
