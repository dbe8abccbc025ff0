package relay

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/signature"
)

// The relay signs with Standard Webhooks and two secrets (a rotation); an inbox that knows only
// the new secret accepts every event and applies each once.
func TestStandardWebhooksRotationIntoTheInbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	oldSecret, newSecret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kLXNlY3JldC1rZXktZm9yLXJvdGF0aW9u"
	if _, err := e.pool.Exec(ctx, `CREATE TABLE applied (event_id uuid PRIMARY KEY, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	h, err := inbox.New(e.pool, []string{newSecret}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO applied VALUES ($1, 1) ON CONFLICT (event_id) DO UPDATE SET n = applied.n + 1`, ev.ID)
		return err
	}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	e.start(func(c *Config) {
		c.WebhookURL = srv.URL
		c.Scheme = signature.StandardWebhooks
		c.Secrets = []string{oldSecret, newSecret}
	})
	res := e.produce(relaytest.Workload{Events: 300, Aggregates: 10, MaxTxSize: 5})
	var applied, twice int
	waitFor(t, 30*time.Second, "every event applied", func() bool {
		_ = e.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n > 1) FROM applied`).Scan(&applied, &twice)
		return applied == len(res.Committed)
	})
	if twice != 0 {
		t.Fatalf("%d events applied more than once", twice)
	}
	if s := h.Stats(); s.Rejected != 0 {
		t.Fatalf("the inbox rejected %d deliveries", s.Rejected)
	}
}
