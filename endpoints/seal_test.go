package endpoints_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/pgcluster"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/seal"
	"github.com/outbox-relay/outbox-relay/signature"
)

func newKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// storedRow reads an endpoint's row as the relay sees it.
func storedRow(t *testing.T, conn *pgx.Conn, id string) endpoint.Row {
	t.Helper()
	var doc []byte
	if err := conn.QueryRow(context.Background(), `SELECT to_jsonb(e) FROM outbox_endpoints e WHERE id = $1`, id).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	var r endpoint.Row
	if err := json.Unmarshal(doc, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// secretForms are the strings that would give a secret away: the secret as stored by the
// partner and, for standard-webhooks, the base64 of its key.
func secretForms(secret string) []string {
	forms := []string{secret}
	if k, ok := strings.CutPrefix(secret, "whsec_"); ok {
		forms = append(forms, k)
	}
	return forms
}

// A sealed secret is nowhere in clear: not in the row, not in a dump of the table, not in the
// WAL a slot decodes; yet the relay, holding the key, signs with it, and the partner, holding
// the clear secret, verifies the signature. An endpoint stored without a sealer is the control:
// its secret shows in all three, so the checks can see a secret when there is one.
func TestSealedSecretSignsAndIsNotInClear(t *testing.T) {
	dsn, conn := migratedDB(t)
	ctx := context.Background()
	for _, stmt := range []string{
		`CREATE PUBLICATION endpoints_pub FOR TABLE outbox_endpoints`,
		`SELECT pg_create_logical_replication_slot('endpoints_slot', 'pgoutput')`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	keyText := newKey(t)
	sealer, err := endpoints.NewSealer(keyText)
	if err != nil {
		t.Fatal(err)
	}
	sealed := endpoints.Store{Sealer: sealer}
	var added []endpoints.Endpoint
	for _, ep := range []endpoints.Endpoint{
		{ID: "acme", URL: "https://acme.example/", Scheme: signature.XSignature},
		{ID: "globex", URL: "https://globex.example/", Scheme: signature.StandardWebhooks},
	} {
		got, err := sealed.Add(ctx, conn, ep)
		if err != nil {
			t.Fatal(err)
		}
		added = append(added, got)
	}
	rotated, err := sealed.RotateSecret(ctx, conn, "acme", endpoints.RotateOptions{KeepOld: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clearEP, err := plain.Add(ctx, conn, endpoints.Endpoint{ID: "control", URL: "https://control.example/"})
	if err != nil {
		t.Fatal(err)
	}

	var table string
	if err := conn.QueryRow(ctx, `SELECT string_agg(e::text, E'\n') FROM outbox_endpoints e`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	dump := pgDump(t, dsn)
	wal := walBytes(t, conn)
	where := map[string]string{"the table": table, "pg_dump": dump, "the WAL": string(wal)}
	for name, text := range where {
		if !strings.Contains(text, clearEP.Secret) {
			t.Fatalf("control: the clear secret is not in %s, so this check could not see one", name)
		}
		for _, secret := range []string{added[0].Secret, added[1].Secret, rotated.Secret} {
			for _, form := range secretForms(secret) {
				if strings.Contains(text, form) {
					t.Errorf("a sealed secret is in clear in %s", name)
				}
			}
		}
		if !strings.Contains(text, "sealed:v1:"+sealer.KeyID()+":") {
			t.Errorf("%s holds no sealed secret", name)
		}
	}

	// The relay's view: the row's secrets opened with the same key sign; the partner's clear
	// secret verifies.
	ring, err := seal.Parse(keyText)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"order_id":42}`)
	ts := time.Now().Unix()
	for _, tt := range []struct {
		id      string
		partner []string // the clear secrets the partner holds
	}{
		{"acme", []string{rotated.Secret}},  // the new secret verifies...
		{"acme", []string{added[0].Secret}}, // ...and the old one, kept for an hour
		{"globex", []string{added[1].Secret}},
	} {
		row := storedRow(t, conn, tt.id)
		keys, next, err := row.Keys(ring, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if tt.id == "acme" && (len(keys) != 2 || next.IsZero()) {
			t.Fatalf("acme signs with %d keys until %v; want the new and the kept old one, with the old one's expiry", len(keys), next)
		}
		partnerKeys, err := signature.Keys(row.SignatureScheme(), tt.partner)
		if err != nil {
			t.Fatal(err)
		}
		s := signature.NewSigner(keys)
		var ok bool
		if row.SignatureScheme() == signature.StandardWebhooks {
			sig := s.AppendStandard(nil, "evt-1", ts, body)
			ok = signature.VerifyStandard(partnerKeys, "evt-1", itoa(ts), body, string(sig))
		} else {
			sig := s.AppendX(nil, ts, body)
			ok = signature.VerifyX(partnerKeys, itoa(ts), body, string(sig))
		}
		if !ok {
			t.Fatalf("%s: the signature made with the unsealed secret does not verify with the partner's secret", tt.id)
		}
		// Negative control: another secret does not verify.
		if other, _ := signature.Keys(signature.XSignature, []string{"not-the-partners-secret"}); signature.VerifyX(other, itoa(ts), body,
			string(s.AppendX(nil, ts, body))) {
			t.Fatal("a wrong secret verifies: the check above proves nothing")
		}
		if clear, err := sealer.Unseal(tt.id, row.Secrets[0].Value); err != nil || (tt.id == "acme" && clear != rotated.Secret) {
			t.Fatalf("Sealer.Unseal: %v", err)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A sealed secret is bound to its endpoint: copied into another endpoint's row (by someone with
// write access to the table but not the key) it does not open, so it cannot sign that
// endpoint's deliveries to a URL of the copier's choosing.
func TestSealedSecretDoesNotOpenInAnotherRow(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	keyText := newKey(t)
	sealer, _ := endpoints.NewSealer(keyText)
	eps := endpoints.Store{Sealer: sealer}
	for _, id := range []string{"victim", "copier"} {
		if _, err := eps.Add(ctx, conn, endpoints.Endpoint{ID: id, URL: "https://" + id + ".example/"}); err != nil {
			t.Fatal(err)
		}
	}
	ring, _ := seal.Parse(keyText)
	copier := storedRow(t, conn, "copier")
	if _, _, err := copier.Keys(ring, time.Now()); err != nil {
		t.Fatalf("control: the copier's own secret does not open: %v", err)
	}
	if _, err := conn.Exec(ctx, `UPDATE outbox_endpoints SET secrets = (SELECT secrets FROM outbox_endpoints WHERE id = 'victim')
		WHERE id = 'copier'`); err != nil {
		t.Fatal(err)
	}
	copier = storedRow(t, conn, "copier")
	if _, _, err := copier.Keys(ring, time.Now()); !errors.Is(err, seal.ErrOpen) {
		t.Fatalf("the victim's sealed secret in the copier's row: %v, want ErrOpen", err)
	}
	victim := storedRow(t, conn, "victim")
	if _, _, err := victim.Keys(nil, time.Now()); err == nil || !strings.Contains(err.Error(), "OUTBOX_RELAY_SECRETS_KEY") {
		t.Fatalf("a sealed secret without a key: %v, want the setting to name", err)
	}
}

// Key rotation: with the new key first and the old one kept, Reseal moves every secret (and
// the clear ones) to the new key; then the new key alone opens them all.
func TestResealMovesSecretsToTheNewKey(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	oldKey, newKey := newKey(t), newKey(t)
	oldSealer, _ := endpoints.NewSealer(oldKey)
	a, err := endpoints.Store{Sealer: oldSealer}.Add(ctx, conn, endpoints.Endpoint{ID: "a", URL: "https://a.example/"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := plain.Add(ctx, conn, endpoints.Endpoint{ID: "b", URL: "https://b.example/"}) // in clear
	if err != nil {
		t.Fatal(err)
	}
	both, _ := endpoints.NewSealer(newKey + "\n" + oldKey)
	eps := endpoints.Store{Sealer: both}
	for _, id := range []string{"a", "b"} {
		changed, err := eps.Reseal(ctx, conn, id)
		if err != nil || !changed {
			t.Fatalf("reseal %s: %v, changed %v", id, err, changed)
		}
		if changed, err := eps.Reseal(ctx, conn, id); err != nil || changed {
			t.Fatalf("reseal %s again: %v, changed %v; want nothing to do", id, err, changed)
		}
	}
	onlyNew, _ := seal.Parse(newKey)
	for id, secret := range map[string]string{"a": a.Secret, "b": b.Secret} {
		got, err := plain.Get(ctx, conn, id)
		if err != nil || got.Secrets[0].KeyID != both.KeyID() || got.Secrets[0].Fingerprint != fingerprint(secret) {
			t.Fatalf("%s after reseal: %+v %v", id, got.Secrets, err)
		}
		r := storedRow(t, conn, id)
		if clear, err := endpoint.Clear(onlyNew, id, r.Secrets[0].Value); err != nil || clear != secret {
			t.Fatalf("%s does not open with the new key alone: %v", id, err)
		}
	}
	if _, err := (endpoints.Store{}).Reseal(ctx, conn, "a"); err == nil {
		t.Fatal("reseal without a sealer did something")
	}
	newOnly, _ := endpoints.NewSealer(oldKey) // the old key alone cannot open what the new one sealed
	if _, err := (endpoints.Store{Sealer: newOnly}).Reseal(ctx, conn, "a"); !errors.Is(err, seal.ErrUnknownKey) {
		t.Fatalf("reseal with a key file lacking the secret's key: %v", err)
	}
}

// pgDump returns pg_dump's data-only text of outbox_endpoints.
func pgDump(t *testing.T, dsn string) string {
	t.Helper()
	tool := pgcluster.ClientTool(pgtest.Shared(t).BinDir, "pg_dump")
	out, err := exec.Command(tool, "--data-only", "--table=outbox_endpoints", "--dbname="+dsn).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("outbox_endpoints")) {
		t.Fatalf("pg_dump printed no outbox_endpoints:\n%s", out)
	}
	return string(out)
}

// walBytes returns every change the slot decodes for outbox_endpoints, as pgoutput sends them.
func walBytes(t *testing.T, conn *pgx.Conn) []byte {
	t.Helper()
	var all []byte
	rows, err := conn.Query(context.Background(), `SELECT data FROM pg_logical_slot_peek_binary_changes('endpoints_slot', NULL, NULL,
		'proto_version', '1', 'publication_names', 'endpoints_pub')`)
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	if _, err := pgx.ForEachRow(rows, []any{&data}, func() error { all = append(all, data...); return nil }); err != nil {
		t.Fatal(err)
	}
	return all
}
