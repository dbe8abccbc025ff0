package endpoints_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/signature"
)

const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // 24 bytes, the Standard Webhooks example

func partner(id string) endpoints.Endpoint {
	return endpoints.Endpoint{ID: id, URL: "https://" + id + ".example/webhooks", TenantID: id, EventTypes: []string{"order.*"}}
}

func endpointCount(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) int {
	t.Helper()
	var n int
	if err := q.QueryRow(context.Background(), "SELECT count(*) FROM outbox_endpoints").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Every refusal of bad input says why, before anything reaches the database: nothing is
// written, and the application's transaction stays usable (the next statement in it works).
func TestAddEndpointRefusesBadInputWithTheReason(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		change func(*endpoints.Endpoint)
		reason string
	}{
		{"id with capitals", func(e *endpoints.Endpoint) { e.ID = "Acme" }, `id "Acme": use a-z, 0-9`},
		{"id starting with a dash", func(e *endpoints.Endpoint) { e.ID = "-acme" }, "starting with a letter or digit"},
		{"id too long", func(e *endpoints.Endpoint) { e.ID = strings.Repeat("a", 64) }, "more than 63"},
		{"no url", func(e *endpoints.Endpoint) { e.URL = "" }, "url is empty"},
		{"relative url", func(e *endpoints.Endpoint) { e.URL = "/webhooks" }, "must be an absolute http:// or https:// URL"},
		{"ftp url", func(e *endpoints.Endpoint) { e.URL = "ftp://acme.example/x" }, "must be an absolute http:// or https:// URL"},
		{"url with a password", func(e *endpoints.Endpoint) { e.URL = "https://u:hunter2@acme.example/" }, "no user:password"},
		{"url with a space", func(e *endpoints.Endpoint) { e.URL = "https://acme.example/a b" }, "contains a space"},
		{"url without host", func(e *endpoints.Endpoint) { e.URL = "https://:443/x" }, "with a host"},
		{"metadata address", func(e *endpoints.Endpoint) { e.URL = "http://169.254.169.254/latest/meta-data/" }, "is link-local"},
		{"metadata name", func(e *endpoints.Endpoint) { e.URL = "http://metadata.google.internal/" }, "cloud metadata service"},
		{"link-local v6", func(e *endpoints.Endpoint) { e.URL = "http://[fe80::1]/" }, "is link-local"},
		{"unknown scheme", func(e *endpoints.Endpoint) { e.Scheme = signature.Scheme(7) }, "scheme 7: use signature.XSignature"},
		{"short secret", func(e *endpoints.Endpoint) { e.Secret = "short" }, "secret (x-signature) is 5 characters long; a secret is 16 to 1024"},
		{"secret with a control character", func(e *endpoints.Endpoint) { e.Secret = "0123456789abcdef\x01" }, "contains a control character"},
		{"secret that looks sealed", func(e *endpoints.Endpoint) { e.Secret = "sealed:v1:0123abcd:xyzxyzxyzxyz" }, "marks a sealed secret"},
		{"standard-webhooks secret without whsec_", func(e *endpoints.Endpoint) {
			e.Scheme, e.Secret = signature.StandardWebhooks, "0123456789abcdef0123"
		}, "must look like whsec_<base64>"},
		{"standard-webhooks secret not base64", func(e *endpoints.Endpoint) {
			e.Scheme, e.Secret = signature.StandardWebhooks, "whsec_!!!!"
		}, "not valid standard base64"},
		{"standard-webhooks key too short", func(e *endpoints.Endpoint) {
			e.Scheme, e.Secret = signature.StandardWebhooks, "whsec_c2hvcnQ="
		}, "holds a 5-byte key"},
		{"empty pattern", func(e *endpoints.Endpoint) { e.EventTypes = []string{"order.*", ""} }, `pattern "" is empty`},
		{"pattern ending with a dot", func(e *endpoints.Endpoint) { e.EventTypes = []string{"order."} }, "did you mean order.*?"},
		{"star first", func(e *endpoints.Endpoint) { e.EventTypes = []string{"*.created"} }, "not a whole last segment"},
		{"double star", func(e *endpoints.Endpoint) { e.EventTypes = []string{"a**"} }, "not a whole last segment"},
		{"comma in a pattern", func(e *endpoints.Endpoint) { e.EventTypes = []string{"a,b"} }, "contains a comma"},
		{"aggregate type with a space", func(e *endpoints.Endpoint) { e.AggregateTypes = []string{"order line"} }, `aggregate type "order line"`},
		{"tenant with spaces around", func(e *endpoints.Endpoint) { e.TenantID = " acme" }, "tenant id starts or ends with a space"},
		{"unknown format", func(e *endpoints.Endpoint) { e.Format = "xml" }, `format "xml": use raw or cloudevents`},
		{"negative batch", func(e *endpoints.Endpoint) { e.BatchMaxEvents = -1 }, "batch max events -1"},
		{"huge batch", func(e *endpoints.Endpoint) { e.BatchMaxEvents = 20000 }, "batch max events 20000"},
		{"tiny batch bytes", func(e *endpoints.Endpoint) { e.BatchMaxBytes = 10 }, "batch max bytes 10"},
		{"sub-millisecond linger", func(e *endpoints.Endpoint) { e.BatchLinger = 1500 * time.Microsecond }, "whole milliseconds"},
		{"linger over a minute", func(e *endpoints.Endpoint) { e.BatchLinger = 2 * time.Minute }, "batch linger 2m0s"},
		{"negative rate limit", func(e *endpoints.Endpoint) { e.RateLimit = -5 }, "rate limit -5"},
		{"negative in flight", func(e *endpoints.Endpoint) { e.MaxInFlight = -1 }, "max in flight -1"},
		{"metadata not an object", func(e *endpoints.Endpoint) { e.Metadata = json.RawMessage(`[1,2]`) }, "metadata must be a JSON object"},
		{"metadata not JSON", func(e *endpoints.Endpoint) { e.Metadata = json.RawMessage(`{"a":`) }, "metadata is not valid JSON"},
		{"metadata with NUL", func(e *endpoints.Endpoint) { e.Metadata = json.RawMessage(`{"a":"\u0000"}`) }, "NUL character"},
		{"added disabled", func(e *endpoints.Endpoint) { e.State = endpoints.Disabled }, "added enabled or paused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			ep := partner("acme")
			tt.change(&ep)
			if err := plain.Validate(ep); !errors.Is(err, endpoints.ErrInvalid) || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("Validate: %v, want the reason %q", err, tt.reason)
			}
			_, err = plain.Add(ctx, tx, ep)
			if !errors.Is(err, endpoints.ErrInvalid) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("AddEndpoint: %v\nwant ErrInvalidEndpoint with the reason %q", err, tt.reason)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error shows the URL's password: %v", err)
			}
			if n := endpointCount(t, tx); n != 0 {
				t.Fatalf("%d endpoints after a refusal, want 0", n)
			}
			// Positive control: the same transaction takes a good endpoint.
			if _, err := plain.Add(ctx, tx, partner("acme")); err != nil {
				t.Fatalf("after the refusal the transaction does not take a good endpoint: %v", err)
			}
		})
	}
}

func TestAddEndpointStoresEveryField(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	in := endpoints.Endpoint{
		ID: "acme-prod", URL: "https://acme.example/hooks?x=1", TenantID: "acme",
		EventTypes: []string{"order.*", "invoice.paid", "order.*"}, AggregateTypes: []string{"order", "invoice"},
		Scheme: signature.StandardWebhooks, Secret: whsec, Format: "cloudevents", BatchMaxEvents: 50, BatchMaxBytes: 4096,
		BatchLinger: 20 * time.Millisecond, RateLimit: 100, MaxInFlight: 8, Metadata: json.RawMessage(`{"customer": "Acme", "n": 12345678901234567890}`),
	}
	got, err := plain.Add(ctx, conn, in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Secret != whsec {
		t.Fatalf("Add returned the secret %q, want the one stored", got.Secret)
	}
	if b, _ := json.Marshal(got); strings.Contains(fmt.Sprintf("%v %+v %s", got, got, b), whsec) {
		t.Fatal("printing or JSON-encoding the endpoint shows its secret")
	}
	read, err := plain.Get(ctx, conn, "acme-prod")
	if err != nil {
		t.Fatal(err)
	}
	if read.Secret != "" {
		t.Fatal("GetEndpoint returned the secret")
	}
	want := in
	want.EventTypes = []string{"order.*", "invoice.paid"} // the repeat is dropped
	want.Secret, want.Metadata = "", nil
	read.Metadata = nil
	want.State = endpoints.Enabled
	if len(read.Secrets) != 1 || read.Secrets[0].Fingerprint != fingerprint(whsec) || read.Secrets[0].KeyID != "" ||
		read.Secrets[0].CreatedAt.IsZero() || !read.Secrets[0].ExpiresAt.IsZero() {
		t.Fatalf("secrets %+v: want one clear secret with fingerprint %s", read.Secrets, fingerprint(whsec))
	}
	if read.CreatedAt.IsZero() || !read.UpdatedAt.Equal(read.CreatedAt) {
		t.Fatalf("created %v updated %v", read.CreatedAt, read.UpdatedAt)
	}
	read.Secrets, read.CreatedAt, read.UpdatedAt = nil, time.Time{}, time.Time{}
	if !reflect.DeepEqual(read, want) {
		t.Fatalf("stored\n%#v\nwant\n%#v", read, want)
	}
	var meta string
	if err := conn.QueryRow(ctx, `SELECT metadata->>'n' FROM outbox_endpoints WHERE id = 'acme-prod'`).Scan(&meta); err != nil || meta != "12345678901234567890" {
		t.Fatalf("metadata number %q (%v): want it exact", meta, err)
	}
}

// An endpoint added without an id or a secret gets both generated: the id in the table's
// format, the secret strong and in the scheme's format (it signs and verifies).
func TestAddEndpointGeneratesIDAndSecret(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	for _, scheme := range []signature.Scheme{signature.XSignature, signature.StandardWebhooks} {
		got, err := plain.Add(ctx, conn, endpoints.Endpoint{URL: "https://p.example/", Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got.ID, "ep_") || len(got.ID) != 19 {
			t.Fatalf("generated id %q: want ep_ and 16 hex digits", got.ID)
		}
		if len(got.EventTypes) != 1 || got.EventTypes[0] != "*" || got.AggregateTypes != nil {
			t.Fatalf("default subscription %v %v: want every event type and aggregate type", got.EventTypes, got.AggregateTypes)
		}
		keys, err := signature.Keys(scheme, []string{got.Secret})
		if err != nil || len(keys[0]) < 32 {
			t.Fatalf("generated %s secret: %v, %d key bytes; want 32", scheme, err, len(keys[0]))
		}
		if scheme == signature.StandardWebhooks && !strings.HasPrefix(got.Secret, "whsec_") {
			t.Fatalf("generated standard-webhooks secret %q has no whsec_", got.Secret)
		}
		if got.Secrets[0].Fingerprint != fingerprint(got.Secret) {
			t.Fatal("the stored fingerprint is not the generated secret's")
		}
	}
	other, _ := plain.Add(ctx, conn, endpoints.Endpoint{URL: "https://p.example/"})
	again, _ := plain.Add(ctx, conn, endpoints.Endpoint{URL: "https://p.example/"})
	if other.Secret == again.Secret || other.ID == again.ID {
		t.Fatal("two generated endpoints share an id or a secret")
	}
}

func TestAddEndpointDuplicateIDKeepsTheTransaction(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	first, err := plain.Add(ctx, tx, partner("acme"))
	if err != nil {
		t.Fatal(err)
	}
	dup := partner("acme")
	dup.URL = "https://other.example/"
	_, err = plain.Add(ctx, tx, dup)
	if !errors.Is(err, endpoints.ErrExists) {
		t.Fatalf("second add: %v, want ErrEndpointExists", err)
	}
	got, err := plain.Get(ctx, tx, "acme")
	if err != nil || got.URL != first.URL {
		t.Fatalf("after the duplicate: %+v %v; want the first endpoint untouched, the transaction usable", got, err)
	}
}

// Two applications add the same id at once, each in its own transaction: one wins, every
// other gets ErrEndpointExists (not a unique-violation that aborts its transaction).
func TestConcurrentAddsOfOneID(t *testing.T) {
	dsn, conn := migratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const n = 6
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				<-start
				ep := partner("acme")
				ep.URL = fmt.Sprintf("https://p%d.example/", i)
				if _, err := plain.Add(ctx, tx, ep); err != nil {
					// The transaction is still usable: prove it before rolling back.
					var one int
					if qerr := tx.QueryRow(ctx, "SELECT 1").Scan(&one); qerr != nil {
						return fmt.Errorf("after %w the transaction is broken: %v", err, qerr)
					}
					return err
				}
				return nil
			})
		}()
	}
	close(start)
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, endpoints.ErrExists):
			t.Errorf("a losing add: %v, want ErrEndpointExists", err)
		}
	}
	if won != 1 || endpointCount(t, conn) != 1 {
		t.Fatalf("%d adds won, %d endpoints stored; want exactly 1", won, endpointCount(t, conn))
	}
}

// An endpoint registered in the application's transaction exists if and only if the
// transaction commits.
func TestEndpointInARolledBackTransactionLeavesNothing(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE customers (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	register := func(id string, commit bool) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO customers VALUES ($1)`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := plain.Add(ctx, tx, partner(id)); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	register("acme", false)
	if _, err := plain.Get(ctx, conn, "acme"); !errors.Is(err, endpoints.ErrNotFound) {
		t.Fatalf("after a rollback: %v, want ErrEndpointNotFound", err)
	}
	register("globex", true) // positive control
	if _, err := plain.Get(ctx, conn, "globex"); err != nil {
		t.Fatalf("after a commit: %v", err)
	}
	if n := endpointCount(t, conn); n != 1 {
		t.Fatalf("%d endpoints, want the committed one", n)
	}
}

func TestEndpointsThroughDatabaseSQL(t *testing.T) {
	dsn, _ := migratedDB(t)
	ctx := context.Background()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := endpoints.SQL(tx)
	if _, err := plain.Add(ctx, q, partner("acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Add(ctx, q, partner("acme")); !errors.Is(err, endpoints.ErrExists) {
		t.Fatalf("duplicate through database/sql: %v", err)
	}
	if _, err := plain.Pause(ctx, q, "acme", "maintenance"); err != nil {
		t.Fatal(err)
	}
	list, err := plain.List(ctx, q, endpoints.Filter{})
	if err != nil || len(list) != 1 || list[0].State != endpoints.Paused {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestEndpointStates(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	if _, err := plain.Add(ctx, conn, partner("acme")); err != nil {
		t.Fatal(err)
	}
	step := func(name string, f func() (endpoints.Endpoint, error), state endpoints.State, wantErr error) endpoints.Endpoint {
		t.Helper()
		got, err := f()
		if !errors.Is(err, wantErr) {
			t.Fatalf("%s: %v, want %v", name, err, wantErr)
		}
		now, _ := plain.Get(ctx, conn, "acme")
		if now.State != state {
			t.Fatalf("%s: state %s, want %s", name, now.State, state)
		}
		return got
	}
	p := step("pause", func() (endpoints.Endpoint, error) { return plain.Pause(ctx, conn, "acme", "partner maintenance") }, endpoints.Paused, nil)
	if p.PausedReason != "partner maintenance" || p.PausedAt.IsZero() {
		t.Fatalf("paused: %+v", p)
	}
	again := step("pause again", func() (endpoints.Endpoint, error) { return plain.Pause(ctx, conn, "acme", "other") }, endpoints.Paused, nil)
	if !again.UpdatedAt.Equal(p.UpdatedAt) || again.PausedReason != "partner maintenance" {
		t.Fatal("pausing a paused endpoint wrote the row")
	}
	step("enable a paused one", func() (endpoints.Endpoint, error) { return plain.Enable(ctx, conn, "acme") }, endpoints.Paused, endpoints.ErrState)
	step("resume", func() (endpoints.Endpoint, error) { return plain.Resume(ctx, conn, "acme") }, endpoints.Enabled, nil)
	step("pause", func() (endpoints.Endpoint, error) { return plain.Pause(ctx, conn, "acme", "") }, endpoints.Paused, nil)
	d := step("disable a paused one", func() (endpoints.Endpoint, error) { return plain.Disable(ctx, conn, "acme", "410 Gone") }, endpoints.Disabled, nil)
	if d.DisabledReason != "410 Gone" || d.DisabledAt.IsZero() || !d.PausedAt.IsZero() || d.PausedReason != "" {
		t.Fatalf("disabled: %+v", d)
	}
	step("resume a disabled one", func() (endpoints.Endpoint, error) { return plain.Resume(ctx, conn, "acme") }, endpoints.Disabled, endpoints.ErrState)
	step("pause a disabled one", func() (endpoints.Endpoint, error) { return plain.Pause(ctx, conn, "acme", "") }, endpoints.Disabled, endpoints.ErrState)
	e := step("enable", func() (endpoints.Endpoint, error) { return plain.Enable(ctx, conn, "acme") }, endpoints.Enabled, nil)
	if !e.DisabledAt.IsZero() || e.DisabledReason != "" {
		t.Fatalf("enabled: %+v", e)
	}
	for name, f := range map[string]func() error{
		"pause":   func() error { _, err := plain.Pause(ctx, conn, "nobody", ""); return err },
		"resume":  func() error { _, err := plain.Resume(ctx, conn, "nobody"); return err },
		"disable": func() error { _, err := plain.Disable(ctx, conn, "nobody", ""); return err },
		"enable":  func() error { _, err := plain.Enable(ctx, conn, "nobody"); return err },
		"get":     func() error { _, err := plain.Get(ctx, conn, "nobody"); return err },
		"rotate": func() error {
			_, err := plain.RotateSecret(ctx, conn, "nobody", endpoints.RotateOptions{})
			return err
		},
		"update": func() error {
			_, err := plain.Update(ctx, conn, "nobody", func(*endpoints.Endpoint) error { return nil })
			return err
		},
		"remove": func() error { return plain.Remove(ctx, conn, "nobody") },
	} {
		if err := f(); !errors.Is(err, endpoints.ErrNotFound) {
			t.Errorf("%s of a missing endpoint: %v, want ErrEndpointNotFound", name, err)
		}
	}
	if err := plain.Remove(ctx, conn, "acme"); err != nil {
		t.Fatal(err)
	}
	if n := endpointCount(t, conn); n != 0 {
		t.Fatalf("%d endpoints after remove", n)
	}
}

func TestUpdateEndpoint(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	added, err := plain.Add(ctx, conn, partner("acme"))
	if err != nil {
		t.Fatal(err)
	}
	same, err := plain.Update(ctx, conn, "acme", func(e *endpoints.Endpoint) error { return nil })
	if err != nil || !same.UpdatedAt.Equal(added.UpdatedAt) || same.Secret != "" {
		t.Fatalf("an update that changes nothing: %v, updated %v (was %v)", err, same.UpdatedAt, added.UpdatedAt)
	}
	got, err := plain.Update(ctx, conn, "acme", func(e *endpoints.Endpoint) error {
		e.URL, e.EventTypes, e.TenantID, e.RateLimit = "https://new.acme.example/", []string{"*"}, "", 10
		return nil
	})
	if err != nil || got.URL != "https://new.acme.example/" || got.TenantID != "" || got.RateLimit != 10 || got.Secret != "" {
		t.Fatalf("update: %+v %v", got, err)
	}
	if got.Secrets[0].Fingerprint != added.Secrets[0].Fingerprint {
		t.Fatal("an update of the URL changed the secret")
	}
	// A new scheme needs a secret of that scheme: one is generated and returned.
	sw, err := plain.Update(ctx, conn, "acme", func(e *endpoints.Endpoint) error { e.Scheme = signature.StandardWebhooks; return nil })
	if err != nil || !strings.HasPrefix(sw.Secret, "whsec_") || sw.Secrets[0].Fingerprint != fingerprint(sw.Secret) {
		t.Fatalf("scheme change: %v, secret %q", err, sw.Secret)
	}
	for name, tt := range map[string]struct {
		change func(*endpoints.Endpoint) error
		want   error
		says   string
	}{
		"bad url":       {func(e *endpoints.Endpoint) error { e.URL = "nope"; return nil }, endpoints.ErrInvalid, "malformed"},
		"no patterns":   {func(e *endpoints.Endpoint) error { e.EventTypes = nil; return nil }, endpoints.ErrInvalid, "event types are empty"},
		"id":            {func(e *endpoints.Endpoint) error { e.ID = "other"; return nil }, endpoints.ErrInvalid, "id never changes"},
		"state":         {func(e *endpoints.Endpoint) error { e.State = endpoints.Paused; return nil }, endpoints.ErrInvalid, "with Pause, Resume"},
		"secret shape":  {func(e *endpoints.Endpoint) error { e.Secret = "not-a-whsec-secret"; return nil }, endpoints.ErrInvalid, "whsec_"},
		"caller refuse": {func(e *endpoints.Endpoint) error { return context.Canceled }, context.Canceled, "canceled"},
	} {
		_, err := plain.Update(ctx, conn, "acme", tt.change)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v, want %v saying %q", name, err, tt.want, tt.says)
		}
	}
	after, _ := plain.Get(ctx, conn, "acme")
	if after.URL != "https://new.acme.example/" || after.State != endpoints.Enabled {
		t.Fatalf("a refused update changed the row: %+v", after)
	}
}

// Updates of one endpoint outside any transaction, at once: none is lost, through a pool (each
// update in its own transaction) or through database/sql's *sql.DB (which cannot begin one for
// us: the write checks the row is the one read, and starts over when it is not).
func TestConcurrentUpdatesLoseNothing(t *testing.T) {
	dsn, conn := migratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for name, q := range map[string]endpoints.Querier{"pool": pool, "database/sql": endpoints.SQL(db)} {
		t.Run(name, func(t *testing.T) {
			ep := partner("acme-" + strings.ReplaceAll(name, "/", "-"))
			ep.AggregateTypes = []string{"a0"}
			if _, err := plain.Add(ctx, conn, ep); err != nil {
				t.Fatal(err)
			}
			const n = 8
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 1; i <= n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := plain.Update(ctx, q, ep.ID, func(e *endpoints.Endpoint) error {
						e.AggregateTypes = append(e.AggregateTypes, fmt.Sprintf("a%d", i))
						return nil
					})
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			got, _ := plain.Get(ctx, conn, ep.ID)
			if len(got.AggregateTypes) != n+1 {
				t.Fatalf("aggregate types %v: want all %d appends kept", got.AggregateTypes, n+1)
			}
		})
	}
}

func TestRotateEndpointSecret(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	added, err := plain.Add(ctx, conn, partner("acme"))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := plain.RotateSecret(ctx, conn, "acme", endpoints.RotateOptions{KeepOld: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if kept.Secret == "" || kept.Secret == added.Secret || len(kept.Secrets) != 2 {
		t.Fatalf("rotation with keep-old: secret %q, %d secrets", kept.Secret, len(kept.Secrets))
	}
	newest, old := kept.Secrets[0], kept.Secrets[1]
	if newest.Fingerprint != fingerprint(kept.Secret) || !newest.ExpiresAt.IsZero() || old.Fingerprint != fingerprint(added.Secret) {
		t.Fatalf("secrets %+v: want the new one first, without expiry, then the old one", kept.Secrets)
	}
	if d := time.Until(old.ExpiresAt); d < 23*time.Hour || d > 25*time.Hour {
		t.Fatalf("the old secret expires in %s, want about 24h", d)
	}
	given := "a-secret-the-partner-chose-1234"
	now, err := plain.RotateSecret(ctx, conn, "acme", endpoints.RotateOptions{Secret: given})
	if err != nil || now.Secret != given || len(now.Secrets) != 1 || now.Secrets[0].Fingerprint != fingerprint(given) {
		t.Fatalf("rotation without keep-old: %+v %v; want only the new secret", now.Secrets, err)
	}
	if _, err := plain.RotateSecret(ctx, conn, "acme", endpoints.RotateOptions{Secret: "short"}); !errors.Is(err, endpoints.ErrInvalid) {
		t.Fatalf("a short secret: %v", err)
	}
	for i := 0; i < 9; i++ {
		if _, err := plain.RotateSecret(ctx, conn, "acme", endpoints.RotateOptions{KeepOld: time.Hour}); err != nil {
			t.Fatalf("rotation %d: %v", i+2, err)
		}
	}
	_, err = plain.RotateSecret(ctx, conn, "acme", endpoints.RotateOptions{KeepOld: time.Hour})
	if !errors.Is(err, endpoints.ErrInvalid) || !strings.Contains(err.Error(), "11 secrets would sign at once") {
		t.Fatalf("an 11th kept secret: %v", err)
	}
}

// ListEndpoints pages by id in order, filters by tenant and state, and needs only QueryRow.
func TestListEndpointsPages(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	const n = 250
	tx, _ := conn.Begin(ctx)
	for i := range n {
		ep := partner(fmt.Sprintf("p%03d", i))
		ep.TenantID = []string{"acme", "globex"}[i%2]
		if _, err := plain.Add(ctx, tx, ep); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Pause(ctx, conn, "p007", ""); err != nil {
		t.Fatal(err)
	}
	var ids []string
	after := ""
	for pages := 0; ; pages++ {
		page, err := plain.List(ctx, conn, endpoints.Filter{After: after, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			ids = append(ids, e.ID)
		}
		if len(page) < 100 {
			if pages != 2 {
				t.Fatalf("%d full pages, want 2 then a short one", pages)
			}
			break
		}
		after = page[len(page)-1].ID
	}
	if len(ids) != n || ids[0] != "p000" || ids[n-1] != fmt.Sprintf("p%03d", n-1) {
		t.Fatalf("listed %d endpoints from %s to %s", len(ids), ids[0], ids[len(ids)-1])
	}
	for i := 1; i < len(ids); i++ {
		if ids[i-1] >= ids[i] {
			t.Fatalf("not sorted at %d: %s, %s", i, ids[i-1], ids[i])
		}
	}
	acme, _ := plain.List(ctx, conn, endpoints.Filter{TenantID: "globex", Limit: 1000})
	paused, _ := plain.List(ctx, conn, endpoints.Filter{State: endpoints.Paused})
	if len(acme) != n/2 || len(paused) != 1 || paused[0].ID != "p007" {
		t.Fatalf("filters: %d of tenant globex (want %d), paused %v", len(acme), n/2, paused)
	}
	if _, err := plain.List(ctx, conn, endpoints.Filter{Limit: 5000}); !errors.Is(err, endpoints.ErrInvalid) {
		t.Fatalf("limit 5000: %v", err)
	}
}

func TestEndpointFunctionsNameTheMissingTable(t *testing.T) {
	conn, err := pgx.Connect(context.Background(), pgtestDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = plain.Add(context.Background(), conn, partner("acme"))
	if err == nil || !strings.Contains(err.Error(), "run `outbox-relay migrate`") {
		t.Fatalf("add without the table: %v", err)
	}
}

// The URL guard's refusal of the relay's metrics address, and the explicit allowance that is
// recorded in the row for the relay to honour when dialling.
func TestEndpointURLGuard(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	eps := endpoints.Store{RelayMetricsAddr: ":9187"}
	ep := partner("local")
	ep.URL = "http://127.0.0.1:9187/metrics"
	if _, err := eps.Add(ctx, conn, ep); !errors.Is(err, endpoints.ErrInvalid) || !strings.Contains(err.Error(), "relay's own metrics address") {
		t.Fatalf("metrics address: %v", err)
	}
	ep.URL = "http://127.0.0.1:9188/hooks" // positive control: another port
	if _, err := eps.Add(ctx, conn, ep); err != nil {
		t.Fatal(err)
	}
	meta := partner("meta")
	meta.URL, meta.AllowPrivateURL = "http://169.254.169.254/", true
	got, err := eps.Add(ctx, conn, meta)
	if err != nil || !got.AllowPrivateURL {
		t.Fatalf("allowed explicitly: %+v %v", got, err)
	}
	if _, err := eps.Update(ctx, conn, "meta", func(e *endpoints.Endpoint) error { e.AllowPrivateURL = false; return nil }); !errors.Is(err, endpoints.ErrInvalid) {
		t.Fatalf("withdrawing the allowance of a metadata URL: %v", err)
	}
	var allowed bool
	if err := conn.QueryRow(ctx, `SELECT allow_private_url FROM outbox_endpoints WHERE id = 'meta'`).Scan(&allowed); err != nil || !allowed {
		t.Fatalf("allow_private_url in the row: %v %v", allowed, err)
	}
}

// fingerprint is the partner's computation: printf %s "$SECRET" | sha256sum | cut -c1-8.
func fingerprint(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])[:8]
}

func pgtestDB(t *testing.T) string { return pgtest.NewDB(t) }

// Store{Schema: "app"} reads and writes app.outbox_endpoints whatever the search_path; a
// same-named table in public (on the search_path) is never touched, and a schema without the
// table is named in the error.
func TestEndpointsInANamedSchema(t *testing.T) {
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
	if _, err := conn.Exec(ctx, `CREATE TABLE public.outbox_endpoints (LIKE app.outbox_endpoints INCLUDING ALL)`); err != nil {
		t.Fatal(err)
	}
	app := endpoints.Store{Schema: "app"}
	if _, err := app.Add(ctx, conn, partner("acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Update(ctx, conn, "acme", func(ep *endpoints.Endpoint) error { ep.RateLimit = 5; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Pause(ctx, conn, "acme", "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.RotateSecret(ctx, conn, "acme", endpoints.RotateOptions{KeepOld: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Add(ctx, conn, partner("globex")); err != nil {
		t.Fatal(err)
	}
	if err := app.Remove(ctx, conn, "globex"); err != nil {
		t.Fatal(err)
	}
	got, err := app.List(ctx, conn, endpoints.Filter{})
	if err != nil || len(got) != 1 || got[0].ID != "acme" || got[0].State != endpoints.Paused || got[0].RateLimit != 5 ||
		len(got[0].Secrets) != 2 {
		t.Fatalf("app's endpoints: %v, %v; want acme, paused, rate limit 5, two secrets", got, err)
	}
	// The positive control: the zero Store follows the search_path, into the decoy.
	if _, err := plain.Add(ctx, conn, partner("initech")); err != nil {
		t.Fatal(err)
	}
	ids := func(table string) (ids []string) {
		rows, err := conn.Query(ctx, `SELECT id FROM `+table+` ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if a, p := ids("app.outbox_endpoints"), ids("public.outbox_endpoints"); !reflect.DeepEqual(a, []string{"acme"}) ||
		!reflect.DeepEqual(p, []string{"initech"}) {
		t.Fatalf("app holds %v, public %v; want [acme] and [initech]", a, p)
	}
	_, err = endpoints.Store{Schema: "nope"}.Get(ctx, conn, "acme")
	if err == nil || !strings.Contains(err.Error(), `does not exist in schema "nope"`) {
		t.Fatalf("get in a schema without the table: %v; want the schema named", err)
	}
}

// Of several relays (or shards) that disable an endpoint at once, exactly one is told it did
// (DisableOnce reports true), so that exactly one notifies the operator; the row keeps the
// winner's reason. A disable of a disabled endpoint reports false.
func TestDisableOnceHasOneWinner(t *testing.T) {
	dsn, conn := migratedDB(t)
	ctx := context.Background()
	if _, err := plain.Add(ctx, conn, partner("acme")); err != nil {
		t.Fatal(err)
	}
	const racers = 4
	start := make(chan struct{})
	won := make(chan string, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close(ctx)
			<-start
			reason := fmt.Sprintf("410 Gone at shard %d", i)
			if _, ok, err := plain.DisableOnce(ctx, c, "acme", reason); err != nil {
				t.Error(err)
			} else if ok {
				won <- reason
			}
		}()
	}
	close(start)
	wg.Wait()
	close(won)
	var winners []string
	for r := range won {
		winners = append(winners, r)
	}
	got, err := plain.Get(ctx, conn, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(winners) != 1 || got.State != endpoints.Disabled || got.DisabledReason != winners[0] {
		t.Fatalf("winners %q, endpoint %s (%q): want one winner, whose reason the row keeps", winners, got.State, got.DisabledReason)
	}
	if _, ok, err := plain.DisableOnce(ctx, conn, "acme", "again"); err != nil || ok {
		t.Fatalf("disabling a disabled endpoint: %v, %v; want false, nil", ok, err)
	}
}
