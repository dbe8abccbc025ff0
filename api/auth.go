package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/actor"
)

// OperatorToken is one operator's token: it sees and changes everything. Name is what the audit
// records say made a change (the token itself is never recorded).
type OperatorToken struct {
	Name  string
	Token string
}

// MinOperatorTokenLen bounds an operator token from below: it is a password that opens
// everything.
const MinOperatorTokenLen = 24

var tokenName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// ParseOperatorTokens reads operator tokens (--api-tokens-file, OUTBOX_RELAY_API_TOKENS): one per
// line or comma-separated, each "name:token" or the token alone (named token-<8 hex digits of
// its SHA-256>), blank lines and lines starting with # ignored. A token is at least
// MinOperatorTokenLen characters (openssl rand -base64 32 makes one). The error names the
// entry's place, never a token.
func ParseOperatorTokens(text string) ([]OperatorToken, error) {
	var out []OperatorToken
	names := map[string]bool{}
	for n, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for item := range strings.SplitSeq(line, ",") {
			if item = strings.TrimSpace(item); item == "" {
				continue
			}
			t := OperatorToken{Token: item}
			if name, tok, ok := strings.Cut(item, ":"); ok && tokenName.MatchString(name) {
				t = OperatorToken{Name: name, Token: tok}
			}
			if len(t.Token) < MinOperatorTokenLen || strings.ContainsFunc(t.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
				return nil, fmt.Errorf("api: operator token on line %d: %d characters or a space in it: use at least %d "+
					"printable characters (openssl rand -base64 32)", n+1, len(t.Token), MinOperatorTokenLen)
			}
			if t.Name == "" {
				sum := sha256.Sum256([]byte(t.Token))
				t.Name = "token-" + hex.EncodeToString(sum[:4])
			}
			if names[t.Name] {
				return nil, fmt.Errorf("api: operator token on line %d: the name %s is given twice: name each token once", n+1, t.Name)
			}
			names[t.Name] = true
			out = append(out, t)
		}
	}
	return out, nil
}

// principal is who a request acts for: an operator (by token name) or a tenant.
type principal struct {
	operator bool
	name     string // the operator token's name, or the tenant resolver's "resolver"/"token"
	tenant   string // the tenant of a tenant principal
}

// kind and actor are what the audit records say made a change.
func (p principal) kind() string {
	if p.operator {
		return "operator"
	}
	return "tenant"
}

func (p principal) actor() string {
	if p.operator {
		return p.name
	}
	return p.tenant
}

// key names the principal for idempotency keys: keys of different callers never meet.
func (p principal) key() string { return p.kind() + ":" + p.actor() }

// sees reports whether the principal may see an object of this tenant ("" for none): an
// operator sees everything, a tenant its own objects only.
func (p principal) sees(tenant string) bool { return p.operator || tenant == p.tenant }

type principalKey struct{}

func principalOf(ctx context.Context) principal {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p
}

var errUnauthorized = errors.New("unauthorized")

// operatorSet holds the operator tokens' hashes, compared in constant time.
type operatorSet struct {
	names  []string
	hashes [][sha256.Size]byte
}

func newOperatorSet(tokens []OperatorToken) operatorSet {
	var s operatorSet
	for _, t := range tokens {
		s.names = append(s.names, t.Name)
		s.hashes = append(s.hashes, sha256.Sum256([]byte(t.Token)))
	}
	return s
}

// match returns the name of the operator token equal to tok. It compares the SHA-256 of tok
// with every token's, always all of them, so the time taken says nothing of which matched.
func (s operatorSet) match(tok string) (string, bool) {
	h := sha256.Sum256([]byte(tok))
	found := -1
	for i := range s.hashes {
		if subtle.ConstantTimeCompare(h[:], s.hashes[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return s.names[found], true
}

// authenticate finds the principal of r: the application's tenant resolver first, if any,
// then the bearer token, an operator token or a tenant token.
func (a *API) authenticate(r *http.Request) (principal, error) {
	if in, ok := actor.From(r.Context()); ok { // signed in by package portal, calling in-process
		if !in.Operator && in.Tenant == "" {
			return principal{}, errUnauthorized
		}
		return principal{operator: in.Operator, name: in.Name, tenant: in.Tenant}, nil
	}
	if a.cfg.TenantResolver != nil {
		if tenant, ok := a.cfg.TenantResolver(r); ok {
			if tenant == "" {
				return principal{}, errUnauthorized
			}
			return principal{name: "resolver", tenant: tenant}, nil
		}
	}
	auth := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, errUnauthorized
	}
	tok = strings.TrimSpace(tok)
	if name, ok := a.operators.match(tok); ok {
		return principal{operator: true, name: name}, nil
	}
	if a.cfg.SigningKeys == nil {
		return principal{}, errUnauthorized
	}
	tenant, err := a.cfg.SigningKeys.Verify(tok, AudienceAPI)
	if err != nil {
		return principal{}, errUnauthorized
	}
	return principal{name: "token", tenant: tenant}, nil
}

// OperatorName reports whether token is one of Config.OperatorTokens, and its name: the
// operator console (package portal) signs an operator in with it. It compares in constant time,
// as every request's token is.
func (a *API) OperatorName(token string) (string, bool) {
	return a.operators.match(strings.TrimSpace(token))
}
