package endpoints

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/seal"
	"github.com/outbox-relay/outbox-relay/signature"
)

// newRow turns the endpoint given to Add into the row to insert, with its clear secret (given
// or generated), after every check.
func (e Store) newRow(ep Endpoint, now time.Time) (endpoint.Row, string, error) {
	r := endpoint.Row{ID: ep.ID}
	if r.ID == "" {
		id, err := endpoint.NewID()
		if err != nil {
			return r, "", err
		}
		r.ID = id
	}
	switch ep.State {
	case "", Enabled:
		r.State = endpoint.Enabled
	case Paused:
		r.State, r.PausedReason, r.PausedAt = endpoint.Paused, ep.PausedReason, now
		if r.PausedReason == "" {
			r.PausedReason = "added paused"
		}
	default:
		return r, "", endpoint.Field("state", fmt.Errorf("%w: an endpoint is added enabled or paused, not %q", ErrInvalid, ep.State))
	}
	if len(ep.EventTypes) == 0 {
		ep.EventTypes = []string{"*"}
	}
	if err := applyWritable(&r, ep); err != nil {
		return r, "", err
	}
	clear := ep.Secret
	if clear == "" {
		var err error
		if clear, err = endpoint.GenerateSecret(ep.Scheme); err != nil {
			return r, "", err
		}
	}
	if err := e.setSecret(&r, clear, now); err != nil {
		return r, "", err
	}
	if err := e.validate(&r); err != nil {
		return r, "", err
	}
	return r, clear, nil
}

// setSecret replaces the row's secrets with clear, after checking it for the row's scheme.
func (e Store) setSecret(r *endpoint.Row, clear string, now time.Time) error {
	if err := endpoint.CheckSecret(r.SignatureScheme(), clear); err != nil {
		return endpoint.Field("secret", fmt.Errorf("%w: secret (%s) %w", ErrInvalid, r.Scheme, err))
	}
	s, err := endpoint.NewSecret(e.Sealer.keyring(), r.ID, clear, now)
	if err != nil {
		return err
	}
	r.Secrets = []endpoint.Secret{s}
	return nil
}

func (e Store) validate(r *endpoint.Row) error {
	g, err := endpoint.NewGuard(e.RelayMetricsAddr)
	if err != nil {
		return fmt.Errorf("endpoints: Store.RelayMetricsAddr: %w", err)
	}
	g.Egress = endpoint.Egress(e.Egress)
	return r.Validate(g)
}

// applyWritable copies the fields an application writes from ep into r, with their defaults.
// Empty event types are left empty (Validate refuses them): only Add reads them as "*", so an
// update that empties the list never widens the subscription to every type.
func applyWritable(r *endpoint.Row, ep Endpoint) error {
	r.URL = ep.URL
	r.TenantID = ep.TenantID
	r.EventTypes = dedupe(ep.EventTypes)
	r.AggregateTypes = dedupe(ep.AggregateTypes)
	if len(r.AggregateTypes) == 0 {
		r.AggregateTypes = nil
	}
	if ep.Scheme != signature.XSignature && ep.Scheme != signature.StandardWebhooks {
		return endpoint.Field("scheme", fmt.Errorf("%w: scheme %d: use signature.XSignature or signature.StandardWebhooks", ErrInvalid, ep.Scheme))
	}
	r.Scheme = ep.Scheme.String()
	r.Format = ep.Format
	if r.Format == "" {
		r.Format = endpoint.FormatRaw
	}
	r.BatchMaxEvents = max(ep.BatchMaxEvents, 1)
	if ep.BatchMaxEvents < 0 {
		r.BatchMaxEvents = ep.BatchMaxEvents // refused by Validate, with the value
	}
	r.BatchMaxBytes = ep.BatchMaxBytes
	if r.BatchMaxBytes == 0 {
		r.BatchMaxBytes = endpoint.DefaultBatchMaxBytes
	}
	if ep.BatchLinger%time.Millisecond != 0 {
		return endpoint.Field("batch_linger_ms", fmt.Errorf("%w: batch linger %s: use whole milliseconds", ErrInvalid, ep.BatchLinger))
	}
	r.BatchLingerMS = int(ep.BatchLinger / time.Millisecond)
	r.RateLimit, r.MaxInFlight = ep.RateLimit, ep.MaxInFlight
	if ep.SpillAfter%time.Millisecond != 0 {
		return endpoint.Field("spill_after_ms", fmt.Errorf("%w: spill after %s: use whole milliseconds", ErrInvalid, ep.SpillAfter))
	}
	r.SpillAfterMS = int(ep.SpillAfter / time.Millisecond)
	r.AllowPrivateURL = ep.AllowPrivateURL
	r.DenyPrivate, r.EgressProxy, r.Description = ep.DenyPrivate, ep.EgressProxy, ep.Description
	m, err := endpoint.NormalizeMetadata(ep.Metadata)
	if err != nil {
		return endpoint.Field("metadata", err)
	}
	r.Metadata = m
	if err := endpoint.CheckReason(r.PausedReason); err != nil {
		return endpoint.Field("reason", err)
	}
	return nil
}

// dedupe drops repeated entries, keeping the first of each.
func dedupe(list []string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// public is the application's view of a row: everything but the secrets' values.
func public(r endpoint.Row) Endpoint {
	ep := Endpoint{
		ID: r.ID, URL: r.URL, TenantID: r.TenantID, EventTypes: r.EventTypes, AggregateTypes: r.AggregateTypes,
		Scheme: r.SignatureScheme(), Format: r.Format, BatchMaxEvents: r.BatchMaxEvents, BatchMaxBytes: r.BatchMaxBytes,
		BatchLinger: r.Linger(), RateLimit: r.RateLimit, MaxInFlight: r.MaxInFlight, AllowPrivateURL: r.AllowPrivateURL,
		DenyPrivate: r.DenyPrivate, EgressProxy: r.EgressProxy, Description: r.Description,
		SpillAfter: time.Duration(r.SpillAfterMS) * time.Millisecond,
		Metadata:   r.Metadata, State: State(r.State), PausedReason: r.PausedReason, PausedAt: r.PausedAt,
		DisabledReason: r.DisabledReason, DisabledAt: r.DisabledAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	for _, s := range r.Secrets {
		d := Secret{Fingerprint: s.Fingerprint}
		if seal.IsSealed(s.Value) {
			d.KeyID, _ = seal.ID(s.Value)
		} else if d.Fingerprint == "" {
			d.Fingerprint = endpoint.Fingerprint(s.Value)
		}
		if s.CreatedAt != nil {
			d.CreatedAt = *s.CreatedAt
		}
		if s.ExpiresAt != nil {
			d.ExpiresAt = *s.ExpiresAt
		}
		ep.Secrets = append(ep.Secrets, d)
	}
	return ep
}

// secretsJSON is the secrets column's value.
func secretsJSON(s []endpoint.Secret) string {
	b, _ := json.Marshal(s) // strings and times always marshal
	return string(b)
}
