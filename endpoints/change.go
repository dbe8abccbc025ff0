package endpoints

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/seal"
)

// Update changes an endpoint: change gets the endpoint as stored (Secret empty) and alters the
// fields an application writes (URL through EgressProxy); the result is checked as Add checks a
// new one and written in q's transaction, with the row locked FOR UPDATE meanwhile. Setting
// Secret replaces every secret with it (RotateSecret keeps old ones signing for a while);
// changing Scheme without a Secret generates a new secret, since a secret of one scheme is
// rarely one of the other. The result has Secret set when a secret was stored. change may run
// more than once (outside a transaction, when another writer got in between) and must not
// alter the read-only fields. An error of change is returned as it is, and nothing is written.
func (e Store) Update(ctx context.Context, q Querier, id string, change func(*Endpoint) error) (Endpoint, error) {
	var clear string
	var patterns []string // the patterns before the change
	r, err := e.modify(ctx, q, "update", id, func(r *endpoint.Row, now time.Time) (bool, error) {
		clear = ""
		patterns = r.EventTypes
		before := public(*r)
		ep := public(*r)
		if err := change(&ep); err != nil {
			return false, err
		}
		if err := sameReadOnly(before, ep); err != nil {
			return false, err
		}
		// Both sides in the form Add stores, so that only a real change writes.
		orig, next := *r, *r
		if err := applyWritable(&orig, before); err != nil {
			return false, err
		}
		if err := applyWritable(&next, ep); err != nil {
			return false, err
		}
		switch {
		case ep.Secret != "":
			clear = ep.Secret
		case next.Scheme != r.Scheme:
			var err error
			if clear, err = endpoint.GenerateSecret(ep.Scheme); err != nil {
				return false, err
			}
		}
		if clear != "" {
			if err := e.setSecret(&next, clear, now); err != nil {
				return false, err
			}
		}
		changed := !reflect.DeepEqual(next, orig)
		*r = next
		return changed, nil
	})
	if err != nil {
		return Endpoint{}, err
	}
	out := public(r)
	out.Secret = clear
	// The check before the write refused what the catalog does not hold; its warnings are
	// read again here, the write done, for the patterns the change added.
	out.Warnings, _ = e.checkCatalog(ctx, q, patterns, r.EventTypes)
	return out, nil
}

// sameReadOnly refuses a change of the fields Update does not write.
func sameReadOnly(before, after Endpoint) error {
	switch {
	case after.ID != before.ID:
		return endpoint.Field("id", fmt.Errorf("%w: an endpoint's id never changes: add a new endpoint and remove this one", ErrInvalid))
	case after.State != before.State || after.PausedReason != before.PausedReason || after.DisabledReason != before.DisabledReason ||
		!after.PausedAt.Equal(before.PausedAt) || !after.DisabledAt.Equal(before.DisabledAt):
		return fmt.Errorf("%w: the state changes with Pause, Resume, Disable and Enable, not Update",
			ErrInvalid)
	case !reflect.DeepEqual(after.Secrets, before.Secrets):
		return fmt.Errorf("%w: Secrets describe the stored secrets: set Secret, or use RotateSecret", ErrInvalid)
	case !after.CreatedAt.Equal(before.CreatedAt) || !after.UpdatedAt.Equal(before.UpdatedAt):
		return fmt.Errorf("%w: CreatedAt and UpdatedAt are the database's", ErrInvalid)
	}
	return nil
}

// Pause pauses an enabled endpoint: events routed to it from the pause's commit on are kept
// and delivered in order when it is resumed. Pausing a paused endpoint changes nothing; a
// disabled one is refused with ErrState. An empty reason is "paused".
func (e Store) Pause(ctx context.Context, q Querier, id, reason string) (Endpoint, error) {
	return e.setState(ctx, q, "pause", id, func(r *endpoint.Row, now time.Time) (bool, error) {
		switch r.State {
		case endpoint.Paused:
			return false, nil
		case endpoint.Disabled:
			return false, fmt.Errorf("%w: it is disabled (%s): enable it first", ErrState, r.DisabledReason)
		}
		if err := endpoint.CheckReason(reason); err != nil {
			return false, endpoint.Field("reason", err)
		}
		r.State, r.PausedReason, r.PausedAt = endpoint.Paused, reason, now
		return true, nil
	})
}

// Resume resumes a paused endpoint. Resuming an enabled endpoint changes nothing; a disabled
// one is refused with ErrState (EnableEndpoint enables it).
func (e Store) Resume(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return e.setState(ctx, q, "resume", id, func(r *endpoint.Row, _ time.Time) (bool, error) {
		switch r.State {
		case endpoint.Enabled:
			return false, nil
		case endpoint.Disabled:
			return false, fmt.Errorf("%w: it is disabled (%s), not paused: enable it", ErrState, r.DisabledReason)
		}
		r.State, r.PausedReason, r.PausedAt = endpoint.Enabled, "", time.Time{}
		return true, nil
	})
}

// Disable disables an endpoint, paused or not: it receives nothing until enabled. Disabling a
// disabled endpoint changes nothing (its reason and time stay). An empty reason is "disabled".
func (e Store) Disable(ctx context.Context, q Querier, id, reason string) (Endpoint, error) {
	ep, _, err := e.DisableOnce(ctx, q, id, reason)
	return ep, err
}

// DisableOnce is Disable that also reports whether this call disabled the endpoint: false when
// it was disabled already (by an operator, or by another relay or shard of the pipeline, whose
// call reported true). Of calls racing to disable it, exactly one reports true: the relay
// notifies the operator of an automatic disable only then, once, not once per shard.
func (e Store) DisableOnce(ctx context.Context, q Querier, id, reason string) (Endpoint, bool, error) {
	var changed bool
	ep, err := e.setState(ctx, q, "disable", id, func(r *endpoint.Row, now time.Time) (bool, error) {
		changed = false
		if r.State == endpoint.Disabled {
			return false, nil
		}
		if err := endpoint.CheckReason(reason); err != nil {
			return false, endpoint.Field("reason", err)
		}
		r.State, r.PausedReason, r.PausedAt = endpoint.Disabled, "", time.Time{}
		r.DisabledReason, r.DisabledAt = reason, now
		changed = true
		return true, nil
	})
	return ep, changed && err == nil, err
}

// Enable enables a disabled endpoint. Enabling an enabled endpoint changes nothing; a paused
// one is refused with ErrState (ResumeEndpoint resumes it).
func (e Store) Enable(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return e.setState(ctx, q, "enable", id, func(r *endpoint.Row, _ time.Time) (bool, error) {
		switch r.State {
		case endpoint.Enabled:
			return false, nil
		case endpoint.Paused:
			return false, fmt.Errorf("%w: it is paused (%s), not disabled: resume it", ErrState, r.PausedReason)
		}
		r.State, r.DisabledReason, r.DisabledAt = endpoint.Enabled, "", time.Time{}
		return true, nil
	})
}

func (e Store) setState(ctx context.Context, q Querier, what, id string, change func(*endpoint.Row, time.Time) (bool, error)) (Endpoint, error) {
	r, err := e.modify(ctx, q, what, id, change)
	if err != nil {
		return Endpoint{}, err
	}
	return public(r), nil
}

// RotateSecret stores a new secret (opts.Secret, or a generated one) first in the endpoint's
// list, and keeps the current ones signing for opts.KeepOld (or drops them, when it is zero).
// The result has Secret set to the new secret in clear.
func (e Store) RotateSecret(ctx context.Context, q Querier, id string, opts RotateOptions) (Endpoint, error) {
	if opts.KeepOld < 0 {
		return Endpoint{}, fmt.Errorf("endpoints: rotate the secret of endpoint %s: %w: keep-old %s is negative", id, ErrInvalid, opts.KeepOld)
	}
	var clear string
	r, err := e.modify(ctx, q, "rotate the secret of", id, func(r *endpoint.Row, now time.Time) (bool, error) {
		clear = opts.Secret
		if clear == "" {
			var err error
			if clear, err = endpoint.GenerateSecret(r.SignatureScheme()); err != nil {
				return false, err
			}
		}
		old := keepOld(r.Secrets, now, opts.KeepOld)
		if err := e.setSecret(r, clear, now); err != nil {
			return false, err
		}
		if len(old)+1 > endpoint.MaxSecrets {
			return false, fmt.Errorf("%w: %d secrets would sign at once, more than %d: rotate with a shorter keep-old, or without it",
				ErrInvalid, len(old)+1, endpoint.MaxSecrets)
		}
		r.Secrets = append(r.Secrets, old...)
		return true, nil
	})
	if err != nil {
		return Endpoint{}, err
	}
	out := public(r)
	out.Secret = clear
	return out, nil
}

// keepOld returns the secrets that keep signing after a rotation: with keep > 0, each active
// one until now+keep or its own expiry, if sooner.
func keepOld(secrets []endpoint.Secret, now time.Time, keep time.Duration) []endpoint.Secret {
	if keep <= 0 {
		return nil
	}
	until := now.Add(keep)
	var out []endpoint.Secret
	for _, s := range secrets {
		if !s.Active(now) {
			continue
		}
		if s.ExpiresAt == nil || until.Before(*s.ExpiresAt) {
			u := until
			s.ExpiresAt = &u
		}
		out = append(out, s)
	}
	return out
}

// Reseal seals the endpoint's secrets with the Sealer's first key: clear ones, and those sealed
// with another of its keys (after a key rotation). It reports whether it changed anything.
// It needs a Sealer holding every key the secrets were sealed with.
func (e Store) Reseal(ctx context.Context, q Querier, id string) (bool, error) {
	ring := e.Sealer.keyring()
	if ring == nil {
		return false, fmt.Errorf("endpoints: reseal endpoint %s: no Sealer: set Store.Sealer to the secrets keys", id)
	}
	changed := false
	_, err := e.modify(ctx, q, "reseal", id, func(r *endpoint.Row, _ time.Time) (bool, error) {
		changed = false
		for i, s := range r.Secrets {
			if kid, ok := seal.ID(s.Value); ok && kid == ring.ID() {
				continue
			}
			clear, err := endpoint.Clear(ring, r.ID, s.Value)
			if err != nil {
				return false, fmt.Errorf("secret #%d: %w", i+1, err)
			}
			v, err := ring.Seal(r.ID, clear)
			if err != nil {
				return false, err
			}
			if s.Fingerprint == "" {
				r.Secrets[i].Fingerprint = endpoint.Fingerprint(clear)
			}
			r.Secrets[i].Value, changed = v, true
		}
		return changed, nil
	})
	return changed, err
}
