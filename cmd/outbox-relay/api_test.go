package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

const (
	testSigningKey = "mG8cZk3mYF1yq0oQb5QhM0m3hXhR9S3Zf2w0lRk6x2U="
	testOpToken    = "ops:op-token-0123456789abcdefghij"
)

// api-token prints a token the API verifies for that tenant (and no other key does); bad
// input exits 2 saying what to set.
func TestAPITokenPrintsATokenTheAPIVerifies(t *testing.T) {
	out, stderr, code := execCLI(t, []string{apiKeyEnv + "=" + testSigningKey}, "api-token", "--tenant", "acme", "--ttl", "2h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	keys, err := api.ParseKeys(testSigningKey)
	if err != nil {
		t.Fatal(err)
	}
	if tenant, err := keys.Verify(strings.TrimSpace(out), ""); err != nil || tenant != "acme" {
		t.Fatalf("the printed token verifies as %q, %v; want acme", tenant, err)
	}
	other, _ := api.ParseKeys("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	if _, err := other.Verify(strings.TrimSpace(out), ""); err == nil {
		t.Fatal("another key verifies the token: the check proves nothing")
	}
	for _, tt := range []struct {
		env  []string
		args []string
		says string
	}{
		{nil, []string{"--tenant", "acme"}, "no signing key"},
		{[]string{apiKeyEnv + "=" + testSigningKey}, nil, "--tenant is required"},
		{[]string{apiKeyEnv + "=" + testSigningKey}, []string{"--tenant", "acme", "--ttl", "2000h"}, "use 1s to"},
		{[]string{apiKeyEnv + "=short"}, []string{"--tenant", "acme"}, "OUTBOX_RELAY_API_SIGNING_KEY: API signing key on line 1"},
	} {
		_, stderr, code := execCLI(t, tt.env, append([]string{"api-token"}, tt.args...)...)
		if code != 2 || !strings.Contains(stderr, tt.says) {
			t.Errorf("api-token %v: exit %d %q, want 2 saying %q", tt.args, code, stderr, tt.says)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpDo(t *testing.T, method, url, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// run --api-addr serves the API from the relay: an endpoint created through it receives the
// events committed after it, signed with the secret the create answered. `outbox-relay api`
// serves the same API alone, with a tenant token of api-token, and stops cleanly on SIGTERM.
func TestRunAndAPIServeTheAPI(t *testing.T) {
	dsn, pool := migratedDB(t)
	ctx := context.Background()
	recv := relaytest.NewReceiver("partner-secret-0123456789")
	t.Cleanup(recv.Close)
	slot := fmt.Sprintf("slot_%d", rand.Uint32())
	addr := freeAddr(t)
	env := []string{"DB_DSN=" + dsn, apiTokensEnv + "=" + testOpToken, apiKeyEnv + "=" + testSigningKey}
	relayCmd := cliCommand(t, env, "run", "--endpoints", "--api-addr", addr, "--metrics-addr", "", "--slot", slot,
		"--publication", "pub_"+slot, "--retry-min", "10ms", "--log-level", "error")
	var relayErr relaytest.SyncBuffer
	relayCmd.Stderr = &relayErr
	if err := relayCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relayCmd.Process.Kill(); _ = relayCmd.Wait() })
	base := "http://" + addr + "/api/v1"
	op := strings.TrimPrefix(testOpToken, "ops:")
	relaytest.WaitFor(t, 30*time.Second, "run serves the API", func() bool {
		code, _ := httpDo(t, "GET", base+"/endpoints", op, nil)
		return code == 200
	})
	code, created := httpDo(t, "POST", base+"/endpoints", op, map[string]any{"id": "partner", "url": recv.URL, "secret": recv.Secret})
	if code != 201 {
		t.Fatalf("create through run's API: %d %v\n%s", code, created, relayErr.String())
	}
	relaytest.WaitFor(t, 30*time.Second, "slot active", func() bool {
		var active bool
		_ = pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return active
	})
	id, err := outbox.Enqueue(ctx, pool, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created",
		Payload: map[string]int{"id": 1}})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 30*time.Second, "the endpoint created through the API receives the event", func() bool {
		return recv.Has(id.String())
	})
	if recv.BadSignatures() != 0 {
		t.Fatalf("%d requests signed with another secret", recv.BadSignatures())
	}

	apiAddr := freeAddr(t)
	apiCmd := cliCommand(t, env, "api", "--addr", apiAddr, "--log-level", "error")
	if err := apiCmd.Start(); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 30*time.Second, "api answers /healthz", func() bool {
		resp, err := http.Get("http://" + apiAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	tok, _, code := execCLI(t, env, "api-token", "--tenant", "acme")
	if code != 0 {
		t.Fatal("api-token failed")
	}
	if code, m := httpDo(t, "GET", "http://"+apiAddr+"/api/v1/endpoints/partner", strings.TrimSpace(tok), nil); code != 404 {
		t.Fatalf("a tenant reading an endpoint of none: %d %v, want 404", code, m)
	}
	if code, m := httpDo(t, "GET", "http://"+apiAddr+"/api/v1/endpoints/partner", op, nil); code != 200 || m["id"] != "partner" {
		t.Fatalf("the operator reading it through api: %d %v", code, m)
	}
	if err := apiCmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := apiCmd.Wait(); err != nil {
		t.Fatalf("api after SIGTERM: %v, want exit 0", err)
	}
}
