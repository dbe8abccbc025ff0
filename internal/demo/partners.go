package demo

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/signature"
)

// The partners pipeline: one slot fanned out to partner endpoints, rows of outbox_endpoints,
// each with its own tenant, event types, secret and receiver.
const (
	pipelinePartners = "demo_partners"
	// PartnersSlot and PartnersPublication are the partners pipeline's.
	PartnersSlot        = "outbox_relay_demo_partners"
	PartnersPublication = "outbox_relay_demo_partners"
)

// partner is one endpoint of the demo, and what its receiver has seen.
type partner struct {
	id             string
	tenant         string   // "": every tenant
	eventTypes     []string // patterns
	aggregateTypes []string // nil: every type
	scheme         signature.Scheme
	secret         string // whsec_<base64> for Standard Webhooks

	mu       sync.Mutex
	seen     map[string]bool // event ids received, so a redelivery counts once
	received atomic.Int64    // distinct events
	badSig   atomic.Int64    // requests whose signature did not verify with this partner's secret
}

// newPartners are the demo's endpoints: three tenants' own (initech's signed the Standard
// Webhooks way, the others with X-Signature) and one of every tenant's orders. Each receives
// only what its subscription selects, and every one of them receives something.
func newPartners() []*partner {
	return []*partner{
		{id: "acme", tenant: "acme", eventTypes: []string{"order.*"}},
		{id: "globex", tenant: "globex", eventTypes: []string{"order.created"}, aggregateTypes: []string{"order"}},
		{id: "ledger", eventTypes: []string{"order.created"}},
		{id: "initech", tenant: "initech", eventTypes: []string{"order.*"}, scheme: signature.StandardWebhooks},
	}
}

// tenantOf is the tenant an order's customer belongs to ("" for none: such an order goes only
// to the partners without a tenant).
func tenantOf(customer string) string {
	switch customer {
	case "ada", "grace", "linus":
		return "acme"
	case "barbara", "ken":
		return "globex"
	case "margaret", "dennis":
		return "initech"
	}
	return ""
}

// expected is how many of the orders written the partner should receive: tenants counts the
// orders written per tenant ("" for none), total all of them.
func (p *partner) expected(tenants map[string]int64, total int64) int64 {
	if !p.subscribesToOrders() {
		return 0
	}
	if p.tenant == "" {
		return total
	}
	return tenants[p.tenant]
}

func (p *partner) subscribesToOrders() bool {
	for _, t := range p.eventTypes {
		if t == "*" || t == "order.created" || t == "order.*" {
			return true
		}
	}
	return false
}

// subscription describes what the partner receives, for the header.
func (p *partner) subscription() string {
	s := "tenant " + p.tenant
	if p.tenant == "" {
		s = "every tenant"
	}
	s += ", " + strings.Join(p.eventTypes, ",")
	if p.aggregateTypes != nil {
		s += ", aggregate " + strings.Join(p.aggregateTypes, ",")
	}
	if p.scheme == signature.StandardWebhooks {
		s += ", Standard Webhooks"
	}
	return s
}

// ServeHTTP verifies the signature with the partner's own secret and counts each event once.
func (p *partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if !p.verify(r, body) {
		p.badSig.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	id := r.Header.Get("X-Event-Id")
	p.mu.Lock()
	if !p.seen[id] {
		p.seen[id] = true
		p.received.Add(1)
	}
	p.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// verify checks the request's signature in the partner's scheme, with the partner's secret.
func (p *partner) verify(r *http.Request, body []byte) bool {
	keys, err := signature.Keys(p.scheme, []string{p.secret})
	if err != nil {
		return false
	}
	if p.scheme == signature.StandardWebhooks {
		return signature.VerifyStandard(keys, r.Header.Get(signature.HeaderWebhookID), r.Header.Get(signature.HeaderWebhookTimestamp),
			body, r.Header.Values(signature.HeaderWebhookSignature)...)
	}
	return signature.VerifyX(keys, r.Header.Get(signature.HeaderXTimestamp), body, r.Header.Values(signature.HeaderXSignature)...)
}

// startPartners serves every partner's receiver on one local port (a path each) until
// teardown, and adds their endpoints, each with a secret of its own.
func (d *demo) startPartners(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("partner receivers: %w", err)
	}
	mux := http.NewServeMux()
	d.partners = newPartners()
	for _, p := range d.partners {
		if p.secret, err = newSecret(); err != nil {
			ln.Close()
			return err
		}
		if p.scheme == signature.StandardWebhooks {
			p.secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte(p.secret))
		}
		p.seen = map[string]bool{}
		mux.Handle("POST /partners/"+p.id, p)
	}
	d.partnersAddr = ln.Addr().String()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	d.spawn(ctx, "stop the partner receivers", func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			_ = srv.Close()
		}()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return d.addEndpoints(ctx)
}

// addEndpoints writes the partners' rows, replacing the rows of an earlier run in a database
// the demo was given.
func (d *demo) addEndpoints(ctx context.Context) error {
	var eps endpoints.Store
	for _, p := range d.partners {
		if err := eps.Remove(ctx, d.pool, p.id); err != nil && !errors.Is(err, endpoints.ErrNotFound) {
			return fmt.Errorf("remove the demo's endpoint %s: %w", p.id, err)
		}
		_, err := eps.Add(ctx, d.pool, endpoints.Endpoint{ID: p.id, URL: d.partnerURL(p), Secret: p.secret,
			TenantID: p.tenant, EventTypes: p.eventTypes, AggregateTypes: p.aggregateTypes, Scheme: p.scheme})
		if err != nil {
			return fmt.Errorf("add the demo's endpoint %s: %w", p.id, err)
		}
	}
	return nil
}

// removeEndpoints removes the partners' rows from a database the demo was given.
func (d *demo) removeEndpoints(ctx context.Context) error {
	var errs []error
	var eps endpoints.Store
	for _, p := range d.partners {
		if err := eps.Remove(ctx, d.pool, p.id); err != nil && !errors.Is(err, endpoints.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (d *demo) partnerURL(p *partner) string { return "http://" + d.partnersAddr + "/partners/" + p.id }

// partnerCounts is what each partner received and should have, in the partners' order.
type partnerCounts struct {
	ids                []string
	received, expected []int64
	badSig             int64
}

// countPartners reads the receivers against the orders written so far (read last, so received
// is never ahead of expected).
func (d *demo) countPartners() partnerCounts {
	var c partnerCounts
	for _, p := range d.partners {
		c.ids = append(c.ids, p.id)
		c.received = append(c.received, p.received.Load())
		c.badSig += p.badSig.Load()
	}
	tenants, total := d.writer.byTenant()
	for _, p := range d.partners {
		c.expected = append(c.expected, p.expected(tenants, total))
	}
	return c
}

// caughtUp reports whether every partner received what it should.
func (c partnerCounts) caughtUp() bool {
	for i := range c.ids {
		if c.received[i] < c.expected[i] {
			return false
		}
	}
	return true
}

// line is the partners' part of a progress line: acme=12/12 globex=9/9 ...
func (c partnerCounts) line() string {
	var b strings.Builder
	for i, id := range c.ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d/%d", id, c.received[i], c.expected[i])
	}
	return b.String()
}

// short is the partners' line of the status screen, under 60 columns for thousands of orders:
// what each received, and how many deliveries are still due.
func (c partnerCounts) short() string {
	var b strings.Builder
	for i, id := range c.ids {
		fmt.Fprintf(&b, "%s %d  ", id, c.received[i])
	}
	received, expected := c.totals()
	if received >= expected {
		b.WriteString("(all in)")
	} else {
		fmt.Fprintf(&b, "(%d due)", expected-received)
	}
	return b.String()
}

// totals sums what the partners received and should have.
func (c partnerCounts) totals() (received, expected int64) {
	for i := range c.ids {
		received, expected = received+c.received[i], expected+c.expected[i]
	}
	return received, expected
}

// partnerLines say, at the end, what each partner received against its subscription.
func (d *demo) partnerLines(c partnerCounts) []string {
	var out []string
	for i, p := range d.partners {
		out = append(out, fmt.Sprintf("demo: partner %-8s (%s) received %d of the %d orders it subscribes to",
			p.id, p.subscription(), c.received[i], c.expected[i]))
	}
	if c.badSig > 0 {
		out = append(out, fmt.Sprintf("demo: partners refused %d requests whose signature was not theirs", c.badSig))
	}
	return out
}
