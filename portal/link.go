package portal

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/actor"
)

// LinkOptions say whom a portal link signs in and where it leads.
type LinkOptions struct {
	// Tenant is the customer the link signs in: its pages show that tenant's endpoints only.
	// Required.
	Tenant string
	// TTL is how long the link can be opened, 1s to MaxLinkTTL. Zero: DefaultLinkTTL. The
	// session it opens lasts Config.SessionTTL from then.
	TTL time.Duration
	// BaseURL is where the customer's browser reaches the pages: the server's address with the
	// Config.Prefix the portal is mounted under, e.g. https://app.example or
	// https://app.example/webhooks. Required.
	BaseURL string
}

// Link returns a portal link: BaseURL + "/portal/sign-in?token=" + a token signed by the first
// of keys (the keys of tenant tokens), with the audience api.AudiencePortal, so that an API
// token is no link and a link no API token. Opening it once, before it expires, signs its
// browser in; the token then leaves the address bar. Give it to the customer at once (a
// redirect from the application's own settings page): a link mailed would be opened by a
// mail scanner first, and a link opens one session only.
func Link(keys *api.Keys, o LinkOptions) (string, error) {
	if keys == nil {
		return "", errors.New("portal: no signing keys: give the keys of tenant tokens (--api-signing-key-file, OUTBOX_RELAY_API_SIGNING_KEY)")
	}
	if o.TTL == 0 {
		o.TTL = DefaultLinkTTL
	}
	if o.TTL < time.Second || o.TTL > MaxLinkTTL {
		return "", fmt.Errorf("portal: link lifetime %s: use 1s to %s (a link is opened at once; the session it opens lasts longer)",
			o.TTL, MaxLinkTTL)
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("portal: base URL %q: give the address the customer's browser reaches the pages at, "+
			"e.g. https://app.example (with the path prefix they are mounted under, if any)", o.BaseURL)
	}
	tok, err := keys.Mint(api.Token{Tenant: o.Tenant, TTL: o.TTL, Audience: api.AudiencePortal})
	if err != nil {
		return "", fmt.Errorf("portal: %s", strings.TrimPrefix(err.Error(), "api: "))
	}
	return strings.TrimSuffix(o.BaseURL, "/") + "/portal/sign-in?token=" + url.QueryEscape(tok), nil
}

// openLink serves GET /portal/sign-in?token=: it exchanges a link's token for a session, once,
// and redirects to the portal's first page, an address without the token.
func (p *Portal) openLink(a area) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := r.URL.Query().Get("token")
		bad := func(title, detail string) {
			p.fail(w, r, a, http.StatusUnauthorized, title, detail+" Go back to the application and open the webhooks "+
				"portal again: it makes a new link, which opens once, within minutes.")
		}
		if tok == "" || p.cfg.SigningKeys == nil {
			bad("This link cannot be opened", "The address has no sign-in token.")
			return
		}
		tenant, err := p.cfg.SigningKeys.Verify(tok, api.AudiencePortal)
		if errors.Is(err, jwt.ErrTokenExpired) {
			bad("This link has expired", "Portal links are valid for a short time only, and this one's time is over.")
			return
		}
		if err != nil {
			bad("This link cannot be opened", "It is not a valid link to this portal (it may be incomplete, or altered).")
			return
		}
		exp := linkExpiry(tok)
		if c, err := r.Cookie(a.cookie); err == nil && c.Value != "" {
			if err := p.endSession(r.Context(), c.Value); err != nil { // a browser holds one session of an area
				p.failErr(w, r, a, err)
				return
			}
		}
		s, err := p.startSession(r.Context(), actor.Actor{Name: "portal", Tenant: tenant}, hash(tok), exp)
		if errors.Is(err, errUsed) {
			bad("This link was used already", "A portal link signs in once only.")
			return
		}
		if err != nil {
			p.failErr(w, r, a, err)
			return
		}
		p.setCookie(w, r, a, s.raw, int(p.cfg.SessionTTL.Seconds()))
		http.Redirect(w, r, a.base+"/", http.StatusSeeOther)
	}
}

// linkExpiry reads the expiry of a token Verify accepted; a day from now if it has none.
func linkExpiry(tok string) time.Time {
	var c jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &c); err == nil && c.ExpiresAt != nil {
		return c.ExpiresAt.Time
	}
	return time.Now().Add(MaxLinkTTL)
}

// signInForm serves GET /console/sign-in: a form that posts an operator token once (never in
// an address), with a token of its own against a sign-in from another site.
func (p *Portal) signInForm(a area) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p.renderSignIn(w, r, a, http.StatusOK, "")
	}
}

// signInCookie holds the sign-in form's token (double submit): a page of another site cannot
// read it, so it cannot sign a browser in with the attacker's token.
const signInCookie = "outbox_relay_sign_in"

func (p *Portal) renderSignIn(w http.ResponseWriter, r *http.Request, a area, status int, problem string) {
	tok, err := newSecret()
	if err != nil {
		p.failErr(w, r, a, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: tok, Path: a.base + "/sign-in", MaxAge: 3600, HttpOnly: true,
		Secure: secure(r), SameSite: http.SameSiteStrictMode})
	v := view{Area: a, Title: "Operator sign-in", CSRF: tok, Data: signInData{Next: safeNext(a, r.FormValue("next")), Problem: problem}}
	p.render(w, status, "signin", v)
}

type signInData struct {
	Next, Problem string
}

// safeNext keeps a next page only when it is a page of the console.
func safeNext(a area, next string) string {
	if strings.HasPrefix(next, a.base+"/") && !strings.HasPrefix(next, a.base+"/sign-in") && !strings.Contains(next, "//") &&
		!strings.ContainsAny(next, "\\\r\n") {
		return next
	}
	return a.base + "/"
}

// signIn serves POST /console/sign-in: an operator token of the API opens an operator session.
func (p *Portal) signIn(a area) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		c, err := r.Cookie(signInCookie)
		if err != nil || c.Value == "" || r.PostFormValue("csrf") != c.Value {
			p.renderSignIn(w, r, a, http.StatusForbidden, "The form had expired: enter the token again.")
			return
		}
		name, ok := p.cfg.API.OperatorName(r.PostFormValue("token"))
		if !ok {
			p.renderSignIn(w, r, a, http.StatusUnauthorized, "This is not an operator token of this relay: "+
				"use one of --api-tokens-file (or OUTBOX_RELAY_API_TOKENS).")
			return
		}
		s, err := p.startSession(r.Context(), actor.Actor{Operator: true, Name: name}, nil, time.Time{})
		if err != nil {
			p.failErr(w, r, a, err)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: signInCookie, Path: a.base + "/sign-in", MaxAge: -1})
		p.setCookie(w, r, a, s.raw, int(p.cfg.SessionTTL.Seconds()))
		http.Redirect(w, r, safeNext(a, r.PostFormValue("next")), http.StatusSeeOther)
	}
}
