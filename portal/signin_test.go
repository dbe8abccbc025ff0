package portal_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/portal"
)

// A link opens one session, once: the cookie is HttpOnly and SameSite, the redirect leads to an
// address without the token, and the same link opened again (by the same browser or another)
// signs nobody in.
func TestLinkOpensOneSessionOnce(t *testing.T) {
	e := newEnv(t)
	link := e.link("acme", time.Minute)
	b := e.browser()
	p := b.get(link)
	if p.status != http.StatusSeeOther {
		t.Fatalf("open: %d\n%s", p.status, p.body)
	}
	if loc := p.header.Get("Location"); loc != "/portal/" {
		t.Fatalf("redirect to %q, want /portal/ (no token)", loc)
	}
	cookie := p.header.Get("Set-Cookie")
	for _, want := range []string{"outbox_relay_portal=", "HttpOnly", "SameSite=Lax", "Path=/portal/"} {
		if !strings.Contains(cookie, want) {
			t.Errorf("Set-Cookie %q lacks %s", cookie, want)
		}
	}
	if strings.Contains(cookie, "Secure") {
		t.Errorf("Set-Cookie %q: Secure over plain HTTP would be dropped by the browser", cookie)
	}
	b.must(b.get("/portal/"), http.StatusOK, "Endpoints", "acme")

	again := e.browser()
	again.must(again.get(link), http.StatusUnauthorized, "This link was used already")
	again.must(again.get("/portal/"), http.StatusUnauthorized, "You are signed out")
	b.must(b.get(link), http.StatusUnauthorized, "used already")

	// Over TLS (as a proxy in front says), the cookie is Secure.
	req, _ := http.NewRequest("GET", e.link("acme", time.Minute), nil)
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err := e.browser().c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := resp.Header.Get("Set-Cookie"); !strings.Contains(c, "Secure") {
		t.Errorf("over TLS, Set-Cookie %q is not Secure", c)
	}
}

// An expired link, a tampered one, an API token in a link's place and a link without a token
// each show a page saying so, and sign nobody in; a link is no API token either.
func TestBadLinksShowAClearPage(t *testing.T) {
	e := newEnv(t)
	expired, err := e.keys.Mint(api.Token{Tenant: "acme", TTL: time.Second, Audience: api.AudiencePortal})
	if err != nil {
		t.Fatal(err)
	}
	good := e.link("acme", time.Minute)
	tok := strings.TrimPrefix(good, e.srv.URL+"/portal/sign-in?token=")
	apiTok, err := e.keys.Mint(api.Token{Tenant: "acme", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The token's exp is in whole seconds: past it by a second, it has expired whatever the rounding.
	for expiry := time.Now().Add(2 * time.Second); time.Now().Before(expiry); {
		time.Sleep(50 * time.Millisecond)
	}
	eb := e.browser()
	eb.must(eb.get("/portal/sign-in?token="+url.QueryEscape(expired)), http.StatusUnauthorized, "This link has expired",
		"open the webhooks portal again")
	eb.must(eb.get("/portal/"), http.StatusUnauthorized, "You are signed out")
	for _, link := range map[string]string{
		"tampered":  "/portal/sign-in?token=" + url.QueryEscape(tok[:len(tok)-2]+"AA"),
		"api token": "/portal/sign-in?token=" + url.QueryEscape(apiTok),
		"no token":  "/portal/sign-in",
	} {
		b := e.browser()
		b.must(b.get(link), http.StatusUnauthorized, "This link cannot be opened")
		b.must(b.get("/portal/"), http.StatusUnauthorized, "You are signed out")
	}
	// The link's token is no bearer token of the API; the API token is (the positive control).
	for tokn, want := range map[string]int{tok: http.StatusUnauthorized, apiTok: http.StatusOK} {
		req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/endpoints", nil)
		req.Header.Set("Authorization", "Bearer "+tokn)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("API with a token of audience %v: %d, want %d", tokn == apiTok, resp.StatusCode, want)
		}
	}
	// The good link still opens: the refusals above did not use it.
	b := e.browser()
	b.signIn("acme")
	_ = good
}

// A sign-out ends the session on the server: the cookie's value, replayed, signs nobody in.
func TestSignOutEndsTheSession(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.signIn("acme")
	u, _ := url.Parse(e.srv.URL + "/portal/")
	var value string
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == "outbox_relay_portal" {
			value = c.Value
		}
	}
	if value == "" {
		t.Fatal("no session cookie")
	}
	b.must(b.post("/portal/sign-out", nil), http.StatusOK, "You are signed out")
	replay := e.browser()
	replay.c.Jar.SetCookies(u, []*http.Cookie{{Name: "outbox_relay_portal", Value: value, Path: "/portal/"}})
	replay.must(replay.get("/portal/"), http.StatusUnauthorized, "You are signed out")
}

// Every page carries the strict policy: own script and style only, no inline, no framing
// unless configured.
func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	p := b.get("/portal/sign-in")
	csp := p.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'",
		"form-action 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %s", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q allows inline code", csp)
	}
	if p.header.Get("X-Frame-Options") != "DENY" || p.header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("headers %v", p.header)
	}
	framed := newEnv(t, func(c *portal.Config) { c.FrameAncestors = []string{"https://app.example"} })
	fb := framed.browser()
	p = fb.get("/portal/sign-in")
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors https://app.example") {
		t.Errorf("with FrameAncestors: CSP %q", csp)
	}
	if p.header.Get("X-Frame-Options") != "" {
		t.Errorf("with FrameAncestors, X-Frame-Options %q would forbid the frame", p.header.Get("X-Frame-Options"))
	}
}
