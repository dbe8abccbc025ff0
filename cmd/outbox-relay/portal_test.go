package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// portal-link prints a link that `outbox-relay api` opens once, into a session of that tenant;
// with --portal=false the same server answers the API and no page; bad input exits 2 saying
// what to set.
func TestPortalLinkOpensThePortalOfTheAPI(t *testing.T) {
	dsn, _ := migratedDB(t)
	env := []string{"DB_DSN=" + dsn, apiTokensEnv + "=" + testOpToken, apiKeyEnv + "=" + testSigningKey}
	serve := func(args ...string) string {
		addr := freeAddr(t)
		cmd := cliCommand(t, env, append([]string{"api", "--addr", addr, "--log-level", "error"}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		relaytest.WaitFor(t, 30*time.Second, "api answers /healthz", func() bool {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
		return "http://" + addr
	}
	base := serve("--portal-frame-ancestors", "https://app.example")
	out, stderr, code := execCLI(t, env, "portal-link", "--tenant", "acme", "--ttl", "1m", "--base-url", base)
	if code != 0 {
		t.Fatalf("portal-link: exit %d %s", code, stderr)
	}
	link := strings.TrimSpace(out)
	if !strings.HasPrefix(link, base+"/portal/sign-in?token=") {
		t.Fatalf("link %q", link)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	open := func(u string) *http.Response {
		resp, err := noRedirect.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := open(link)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/portal/" {
		t.Fatalf("open the link: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors https://app.example") {
		t.Errorf("--portal-frame-ancestors: CSP %q", csp)
	}
	if resp := open(link); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the link opened twice: %d", resp.StatusCode)
	}
	if resp := open(base + "/console/sign-in"); resp.StatusCode != http.StatusOK {
		t.Errorf("the console's sign-in: %d", resp.StatusCode)
	}

	apiOnly := serve("--portal=false")
	link2, _, _ := execCLI(t, env, "portal-link", "--tenant", "acme", "--base-url", apiOnly)
	if resp := open(strings.TrimSpace(link2)); resp.StatusCode != http.StatusNotFound {
		t.Errorf("--portal=false: the link answers %d, want 404", resp.StatusCode)
	}
	if code, _ := httpDo(t, "GET", apiOnly+"/api/v1/endpoints", strings.TrimPrefix(testOpToken, "ops:"), nil); code != 200 {
		t.Errorf("--portal=false: the API answers %d", code)
	}

	for _, tt := range []struct {
		env  []string
		args []string
		says string
	}{
		{nil, []string{"--tenant", "acme", "--base-url", base}, "no signing key"},
		{env, []string{"--base-url", base}, "--tenant is required"},
		{env, []string{"--tenant", "acme"}, "--base-url is required"},
		{env, []string{"--tenant", "acme", "--base-url", "app.example"}, "base URL"},
		{env, []string{"--tenant", "acme", "--base-url", base, "--ttl", "48h"}, "use 1s to"},
	} {
		_, stderr, code := execCLI(t, tt.env, append([]string{"portal-link"}, tt.args...)...)
		if code != 2 || !strings.Contains(stderr, tt.says) {
			t.Errorf("portal-link %v: exit %d %q, want 2 saying %q", tt.args, code, stderr, tt.says)
		}
	}
}
