package endpoint

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/seal"
	"github.com/outbox-relay/outbox-relay/signature"
)

// ErrInvalid is wrapped by every refusal of Validate.
var ErrInvalid = errors.New("invalid endpoint")

// Bounds the table's CHECK constraints also hold.
const (
	MaxIDLen       = 63
	MaxURLLen      = 2048
	MaxTenantLen   = 256
	MaxMetadataLen = 16384
	MaxBatchEvents = 10000
	MinBatchBytes  = 1024
	MaxBatchBytes  = 64 << 20
	MaxLingerMS    = 60000
	MaxRateLimit   = 1000000
	MaxInFlightCap = 10000
	// MinSpillAfterMS and MaxSpillAfterMS bound spill_after_ms (outbox_endpoints_spill_after_ms_check).
	MinSpillAfterMS = 100
	MaxSpillAfterMS = 7 * 24 * 3600 * 1000
	MaxReasonLen    = 1024
)

// NewID returns a generated endpoint id, of the form the table's default gives: "ep_" and 16
// random hex digits.
func NewID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate an endpoint id: %w", err)
	}
	return "ep_" + hex.EncodeToString(b[:]), nil
}

// CheckID checks an endpoint id: 1 to 63 of a-z, 0-9, '_', '.', '-', starting with a letter or
// digit (the table's outbox_endpoints_id_check).
func CheckID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: id is empty (leave it out to generate one)", ErrInvalid)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: id %q is %d characters long, more than %d", ErrInvalid, id, len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		lower := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !lower && (i == 0 || c != '_' && c != '.' && c != '-') {
			return fmt.Errorf("%w: id %q: use a-z, 0-9, '_', '.' and '-', starting with a letter or digit (e.g. acme-prod)", ErrInvalid, id)
		}
	}
	return nil
}

// CheckTenant checks a tenant id ("" is none): no spaces at either end, no control
// characters, at most MaxTenantLen bytes. Events and endpoints share the rule, so a tenant
// written by one matches the other.
func CheckTenant(t string) error {
	switch {
	case t == "":
		return nil
	case len(t) > MaxTenantLen:
		return fmt.Errorf("tenant id is %d bytes long, more than %d", len(t), MaxTenantLen)
	case !utf8.ValidString(t):
		return errors.New("tenant id is not valid UTF-8")
	case strings.TrimFunc(t, unicode.IsSpace) != t:
		return errors.New("tenant id starts or ends with a space")
	case strings.ContainsFunc(t, unicode.IsControl):
		return errors.New("tenant id contains a control character")
	}
	return nil
}

// CheckURL checks an endpoint URL: absolute http or https, a host, no user:password, no
// spaces or control characters, at most MaxURLLen bytes, and not what the guard refuses for
// Access a (Guard.AccessOf). g may be nil: the link-local and metadata rules still hold.
func CheckURL(raw string, g *Guard, a Access) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: url is empty: give the partner's absolute https:// URL", ErrInvalid)
	}
	if len(raw) > MaxURLLen {
		return nil, fmt.Errorf("%w: url is %d bytes long, more than %d", ErrInvalid, len(raw), MaxURLLen)
	}
	if !utf8.ValidString(raw) || strings.ContainsFunc(raw, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return nil, fmt.Errorf("%w: url contains a space or a control character: percent-encode it (%%20)", ErrInvalid)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.Opaque != "" {
		return nil, fmt.Errorf("%w: url %q is malformed: it must be an absolute http:// or https:// URL with a host "+
			"and no user:password, e.g. https://partner.example/webhooks", ErrInvalid, redact(raw))
	}
	if g == nil {
		g = &Guard{}
	}
	if err := g.CheckURL(u, a); err != nil {
		return nil, fmt.Errorf("%w: url %q: %w", ErrInvalid, u.Redacted(), err)
	}
	return u, nil
}

// redact hides whatever could be a password in a URL that did not parse.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if at := strings.LastIndex(raw, "@"); at >= 0 {
		return "…" + raw[at:]
	}
	return raw
}

// CheckPatterns checks an endpoint's event-type patterns: 1 to MaxPatterns, each accepted by
// ParsePattern.
func CheckPatterns(patterns []string) error {
	if len(patterns) == 0 {
		return fmt.Errorf("%w: event types are empty: give at least one pattern, * for every type", ErrInvalid)
	}
	if len(patterns) > MaxPatterns {
		return fmt.Errorf("%w: %d event-type patterns, more than %d", ErrInvalid, len(patterns), MaxPatterns)
	}
	for _, p := range patterns {
		if _, err := ParsePattern(p); err != nil {
			return fmt.Errorf("%w: event-type pattern %q %w", ErrInvalid, p, err)
		}
	}
	return nil
}

// CheckAggregateTypes checks an endpoint's aggregate types: nil for every type, else 1 to
// MaxPatterns names without spaces, commas or control characters.
func CheckAggregateTypes(types []string) error {
	if types == nil {
		return nil
	}
	if len(types) == 0 || len(types) > MaxPatterns {
		return fmt.Errorf("%w: %d aggregate types: give 1 to %d, or none for every type", ErrInvalid, len(types), MaxPatterns)
	}
	for _, a := range types {
		bad := strings.ContainsFunc(a, func(r rune) bool { return r == ',' || unicode.IsSpace(r) || unicode.IsControl(r) })
		if a == "" || bad || !utf8.ValidString(a) {
			return fmt.Errorf("%w: aggregate type %q: a type is a name without spaces, commas or control characters", ErrInvalid, a)
		}
	}
	return nil
}

// Validate checks everything the relay needs of a row, with the reason: what the table's CHECK
// constraints hold, and what SQL cannot check (a URL the guard g refuses, the shape of a
// secret for the scheme, a sealed secret's envelope). The relay runs it on every row it reads;
// the Go API and the CLI before every write. It does not open sealed secrets.
func (r *Row) Validate(g *Guard) error {
	if err := CheckID(r.ID); err != nil {
		return Field("id", err)
	}
	if err := r.checkEgress(g); err != nil {
		return err
	}
	scheme, err := signature.ParseScheme(r.Scheme)
	if err != nil || r.Scheme == "" {
		return Field("scheme", fmt.Errorf("%w: scheme %q: use x-signature or standard-webhooks", ErrInvalid, r.Scheme))
	}
	if err := r.checkSecrets(scheme); err != nil {
		return Field("secret", err)
	}
	if err := r.checkDelivery(); err != nil {
		return err
	}
	if err := CheckTenant(r.TenantID); err != nil {
		return Field("tenant_id", fmt.Errorf("%w: %w", ErrInvalid, err))
	}
	if err := CheckPatterns(r.EventTypes); err != nil {
		return Field("event_types", err)
	}
	if err := CheckAggregateTypes(r.AggregateTypes); err != nil {
		return Field("aggregate_types", err)
	}
	if err := r.checkState(); err != nil {
		return Field("state", err)
	}
	if err := CheckDescription(r.Description); err != nil {
		return Field("description", err)
	}
	return Field("metadata", checkMetadata(r.Metadata))
}

// checkEgress checks the URL against the guard for the row's Access, and the row's egress
// columns (deny_private, allow_private_url, egress_proxy).
func (r *Row) checkEgress(g *Guard) error {
	if r.DenyPrivate && r.AllowPrivateURL {
		return Field("allow_private_url", fmt.Errorf("%w: allow_private_url cannot be set on an endpoint whose URL a tenant gave (deny_private): "+
			"an operator clears deny_private first", ErrInvalid))
	}
	if _, err := CheckURL(r.URL, g, g.AccessOf(r.DenyPrivate, r.AllowPrivateURL)); err != nil {
		return Field("url", err)
	}
	return Field("egress_proxy", CheckProxy(r.EgressProxy))
}

// CheckProxy checks an endpoint's egress_proxy: empty (the relay's --egress-proxy), "direct"
// (none), or an absolute http:// or https:// URL of a host and port without user:password
// or path (credentials belong in --egress-proxy, which is not written to the table).
func CheckProxy(raw string) error {
	if raw == "" || raw == ProxyDirect {
		return nil
	}
	_, err := ParseProxy(raw)
	if err == nil && strings.Contains(raw, "@") {
		err = errors.New("it has user:password")
	}
	if err != nil {
		return fmt.Errorf("%w: egress proxy %q: %w: give http://host:port (credentials only in --egress-proxy), "+
			"direct for none, or nothing for the relay's --egress-proxy", ErrInvalid, redact(raw), err)
	}
	return nil
}

// ProxyDirect is the egress_proxy of an endpoint that connects directly, whatever the relay's
// --egress-proxy.
const ProxyDirect = "direct"

// ParseProxy parses an egress proxy URL: http:// or https://, a host, an optional port (80 or
// 443 by default), an optional user:password, no path, query or fragment.
func ParseProxy(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, errors.New("it is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("its scheme is not http or https")
	case u.Hostname() == "" || u.Opaque != "":
		return nil, errors.New("it has no host")
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "":
		return nil, errors.New("it has a path, a query or a fragment")
	case len(raw) > MaxURLLen:
		return nil, fmt.Errorf("it is longer than %d bytes", MaxURLLen)
	}
	return u, nil
}

func (r *Row) checkSecrets(scheme signature.Scheme) error {
	if len(r.Secrets) == 0 || len(r.Secrets) > MaxSecrets {
		return fmt.Errorf("%w: %d secrets: an endpoint has 1 to %d", ErrInvalid, len(r.Secrets), MaxSecrets)
	}
	permanent := false
	for i, s := range r.Secrets {
		permanent = permanent || s.ExpiresAt == nil
		if s.Fingerprint != "" && !isFingerprint(s.Fingerprint) {
			return fmt.Errorf("%w: secret #%d: fingerprint %q is not 8 lowercase hex digits (leave it out)", ErrInvalid, i+1, s.Fingerprint)
		}
		if seal.IsSealed(s.Value) {
			if _, ok := seal.ID(s.Value); !ok {
				return fmt.Errorf("%w: secret #%d looks sealed but is not sealed:v1:<key id>:<base64>", ErrInvalid, i+1)
			}
			continue
		}
		if err := CheckSecret(scheme, s.Value); err != nil {
			return fmt.Errorf("%w: secret #%d %s: %w", ErrInvalid, i+1, secretWord(scheme), err)
		}
	}
	if !permanent {
		return fmt.Errorf("%w: every secret expires: one secret must have no expiry (the newest, after a rotation)", ErrInvalid)
	}
	return nil
}

func isFingerprint(f string) bool {
	_, err := hex.DecodeString(f)
	return len(f) == 8 && err == nil && strings.ToLower(f) == f
}

func secretWord(s signature.Scheme) string {
	if s == signature.StandardWebhooks {
		return "(standard-webhooks)"
	}
	return "(x-signature)"
}

func (r *Row) checkDelivery() error {
	switch {
	case r.Format != FormatRaw && r.Format != FormatCloudEvents:
		return Field("format", fmt.Errorf("%w: format %q: use raw or cloudevents", ErrInvalid, r.Format))
	case r.BatchMaxEvents < 1 || r.BatchMaxEvents > MaxBatchEvents:
		return Field("batch_max_events", fmt.Errorf("%w: batch max events %d: use 1 (no batching) to %d", ErrInvalid, r.BatchMaxEvents, MaxBatchEvents))
	case r.BatchMaxBytes < MinBatchBytes || r.BatchMaxBytes > MaxBatchBytes:
		return Field("batch_max_bytes", fmt.Errorf("%w: batch max bytes %d: use %d to %d", ErrInvalid, r.BatchMaxBytes, MinBatchBytes, MaxBatchBytes))
	case r.BatchLingerMS < 0 || r.BatchLingerMS > MaxLingerMS:
		return Field("batch_linger_ms", fmt.Errorf("%w: batch linger %s: use 0 to 1m, in whole milliseconds", ErrInvalid, r.Linger()))
	case r.RateLimit < 0 || r.RateLimit > MaxRateLimit:
		return Field("rate_limit", fmt.Errorf("%w: rate limit %d: use 1 to %d requests per second, or 0 for no limit", ErrInvalid, r.RateLimit, MaxRateLimit))
	case r.MaxInFlight < 0 || r.MaxInFlight > MaxInFlightCap:
		return Field("max_in_flight", fmt.Errorf("%w: max in flight %d: use 1 to %d, or 0 for the pipeline's setting", ErrInvalid, r.MaxInFlight, MaxInFlightCap))
	case r.SpillAfterMS != 0 && (r.SpillAfterMS < MinSpillAfterMS || r.SpillAfterMS > MaxSpillAfterMS):
		return Field("spill_after_ms", fmt.Errorf("%w: spill after %dms: use 100ms to 168h, or 0 for the pipeline's --spill-after", ErrInvalid, r.SpillAfterMS))
	}
	return nil
}

func (r *Row) checkState() error {
	switch r.State {
	case Enabled, Paused, Disabled:
	default:
		return fmt.Errorf("%w: state %q: use enabled, paused or disabled", ErrInvalid, r.State)
	}
	paused, disabled := r.State == Paused, r.State == Disabled
	if paused != !r.PausedAt.IsZero() || disabled != !r.DisabledAt.IsZero() ||
		(!paused && r.PausedReason != "") || (!disabled && r.DisabledReason != "") {
		return fmt.Errorf("%w: state %s disagrees with paused_at/disabled_at or their reasons: set the time (and "+
			"optionally the reason) of the state the endpoint is in, and NULL for the other", ErrInvalid, r.State)
	}
	return nil
}

func checkMetadata(m json.RawMessage) error {
	if len(m) == 0 {
		return nil
	}
	_, err := NormalizeMetadata(m)
	return err
}

// NormalizeMetadata checks an endpoint's metadata (a JSON object of at most MaxMetadataLen
// bytes, compact) and returns it as it is stored: compact, with what PostgreSQL's jsonb refuses
// (a NUL character, a lone surrogate) refused or replaced, numbers kept exact. Empty is {}.
func NormalizeMetadata(m json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(m)) == 0 {
		return json.RawMessage("{}"), nil
	}
	d := json.NewDecoder(bytes.NewReader(m))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return nil, fmt.Errorf("%w: metadata is not valid JSON: give an object, e.g. {\"customer\": \"Acme\"}", ErrInvalid)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: metadata must be a JSON object, e.g. {\"customer\": \"Acme\"}", ErrInvalid)
	}
	if hasNUL(obj) {
		return nil, fmt.Errorf("%w: metadata contains a NUL character (\\u0000), which PostgreSQL's jsonb cannot store", ErrInvalid)
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: metadata: %w", ErrInvalid, err)
	}
	if len(out) > MaxMetadataLen {
		return nil, fmt.Errorf("%w: metadata is %d bytes of compact JSON, more than %d", ErrInvalid, len(out), MaxMetadataLen)
	}
	return out, nil
}

func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.IndexByte(v, 0) >= 0
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// MaxDescriptionLen bounds an endpoint's description (outbox_endpoints_description_check).
const MaxDescriptionLen = 1024

// CheckDescription checks an endpoint's description: text of at most MaxDescriptionLen bytes,
// valid UTF-8, without NUL.
func CheckDescription(d string) error {
	switch {
	case len(d) > MaxDescriptionLen:
		return fmt.Errorf("%w: description is %d bytes long, more than %d", ErrInvalid, len(d), MaxDescriptionLen)
	case !utf8.ValidString(d) || strings.IndexByte(d, 0) >= 0:
		return fmt.Errorf("%w: description is not valid UTF-8 text", ErrInvalid)
	}
	return nil
}

// CheckReason checks the reason of a pause or a disable: text of at most MaxReasonLen bytes,
// valid UTF-8, without NUL (which PostgreSQL's text cannot hold).
func CheckReason(r string) error {
	switch {
	case len(r) > MaxReasonLen:
		return fmt.Errorf("%w: reason is %d bytes long, more than %d", ErrInvalid, len(r), MaxReasonLen)
	case !utf8.ValidString(r) || strings.IndexByte(r, 0) >= 0:
		return fmt.Errorf("%w: reason is not valid UTF-8 text", ErrInvalid)
	}
	return nil
}
