package inbox_test

import (
	"net/http"
	"testing"

	"github.com/outbox-relay/outbox-relay/inbox"
)

// TestAllowlist runs real requests from 127.0.0.1 through handlers with different allowlists:
// refused senders get 403 and leave nothing; X-Forwarded-For counts only behind a trusted proxy.
func TestAllowlist(t *testing.T) {
	e := newEnv(t)
	secrets := []string{"topsecret"}
	for _, c := range []struct {
		name string
		cfg  inbox.Config
		xff  string
		want int
	}{
		{"peer allowed", inbox.Config{AllowedNetworks: []string{"127.0.0.0/8"}}, "", http.StatusOK},
		{"peer outside", inbox.Config{AllowedNetworks: []string{"10.0.0.0/8"}}, "", http.StatusForbidden},
		{"xff without trusted proxies is ignored", inbox.Config{AllowedNetworks: []string{"10.0.0.0/8"}}, "10.1.2.3", http.StatusForbidden},
		{"behind a trusted proxy, allowed client",
			inbox.Config{AllowedNetworks: []string{"10.0.0.0/8"}, TrustedProxies: []string{"127.0.0.1"}}, "10.1.2.3", http.StatusOK},
		{"behind a trusted proxy, client outside, forged allowed entry on the left",
			inbox.Config{AllowedNetworks: []string{"10.0.0.0/8"}, TrustedProxies: []string{"127.0.0.1"}}, "10.1.2.3, 198.51.100.1", http.StatusForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.inboxRows(t)
			h, url := e.serve(t, secrets, recordEffect, c.cfg)
			d := newDelivery(`{"n":1}`)
			hd := d.header(t)
			if c.xff != "" {
				hd.Set("X-Forwarded-For", c.xff)
			}
			resp := send(t, http.MethodPost, url, hd, d.body)
			if resp.StatusCode != c.want {
				t.Fatalf("%s, want %d", resp.Status, c.want)
			}
			rows := e.inboxRows(t) - before
			if c.want == http.StatusForbidden {
				if rows != 0 || h.Stats().Rejected != 1 {
					t.Fatalf("refused sender left %d rows, stats %+v", rows, h.Stats())
				}
				// A bad signature from a refused sender is still 403: the allowlist comes first.
				hd.Set("X-Signature", "sha256=00")
				if resp := send(t, http.MethodPost, url, hd, d.body); resp.StatusCode != http.StatusForbidden {
					t.Fatalf("unsigned from a refused sender: %s", resp.Status)
				}
			} else if rows != 1 {
				t.Fatalf("%d rows, want 1", rows)
			}
		})
	}
	if _, err := inbox.New(e.pool, secrets, recordEffect, inbox.Config{AllowedNetworks: []string{"10.0.0.0/33"}}); err == nil {
		t.Fatal("New accepted a bad CIDR")
	}
}
