package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/endpoints"
)

// stateActions are the state changes, each the store's method of the same name.
var stateActions = map[string]func(s endpoints.Store, ctx context.Context, q endpoints.Querier, id, reason string) (endpoints.Endpoint, error){
	"pause": func(s endpoints.Store, ctx context.Context, q endpoints.Querier, id, r string) (endpoints.Endpoint, error) {
		return s.Pause(ctx, q, id, r)
	},
	"resume": func(s endpoints.Store, ctx context.Context, q endpoints.Querier, id, _ string) (endpoints.Endpoint, error) {
		return s.Resume(ctx, q, id)
	},
	"disable": func(s endpoints.Store, ctx context.Context, q endpoints.Querier, id, r string) (endpoints.Endpoint, error) {
		return s.Disable(ctx, q, id, r)
	},
	"enable": func(s endpoints.Store, ctx context.Context, q endpoints.Querier, id, _ string) (endpoints.Endpoint, error) {
		return s.Enable(ctx, q, id)
	},
}

// stateAction serves POST /api/v1/endpoints/{id}/<action>: pause and disable take an optional
// {"reason": "..."}; a repeat changes nothing and answers the endpoint as it is.
func (a *API) stateAction(action string) handler {
	do := stateActions[action]
	takesReason := action == "pause" || action == "disable"
	return func(w http.ResponseWriter, r *http.Request) error {
		p, id := principalOf(r.Context()), r.PathValue("id")
		var known []string
		if takesReason {
			known = []string{"reason"}
		}
		b, err := a.readBody(w, r, known, true)
		if err != nil {
			return err
		}
		var why string
		if _, err := b.field("reason", &why, "a string"); err != nil {
			return err
		}
		return a.tx(r.Context(), func(tx pgx.Tx) error {
			tenant, err := a.owned(r.Context(), tx, p, id, true)
			if err != nil {
				return err
			}
			e, err := do(a.store, r.Context(), tx, id, why)
			if err != nil {
				return storeError(err, id)
			}
			detail := map[string]any{}
			if why != "" {
				detail["reason"] = why
			}
			if err := a.audit(r.Context(), tx, p, "endpoint."+action, tenant, id, detail); err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, wireEndpoint(e))
			return nil
		})
	}
}

// rotateSecret serves POST /api/v1/endpoints/{id}/rotate-secret {"grace": "1h", "secret": ...}:
// a new secret first; the current ones keep signing beside it for grace (default 24h; "0s"
// stops them at once), each request then carrying a signature per secret.
func (a *API) rotateSecret(w http.ResponseWriter, r *http.Request) error {
	p, id := principalOf(r.Context()), r.PathValue("id")
	b, err := a.readBody(w, r, []string{"grace", "secret"}, true)
	if err != nil {
		return err
	}
	opts := endpoints.RotateOptions{KeepOld: DefaultGrace}
	var grace string
	if ok, err := b.field("grace", &grace, `a duration such as "1h" or "30m"`); err != nil {
		return err
	} else if ok {
		d, err := time.ParseDuration(grace)
		if err != nil || d < 0 || d > MaxGrace {
			return problem(http.StatusUnprocessableEntity, typeInvalid, "grace "+grace+" is refused",
				FieldIssue{Field: "grace", Detail: fmt.Sprintf(`a duration from "0s" (the old secrets stop at once) to %q, e.g. "1h"`, MaxGrace.String())})
		}
		opts.KeepOld = d
	}
	if _, err := b.field("secret", &opts.Secret, "a string"); err != nil {
		return err
	}
	return a.tx(r.Context(), func(tx pgx.Tx) error {
		tenant, err := a.owned(r.Context(), tx, p, id, true)
		if err != nil {
			return err
		}
		e, err := a.store.RotateSecret(r.Context(), tx, id, opts)
		if err != nil {
			return storeError(err, id)
		}
		detail := map[string]any{"grace": opts.KeepOld.String(), "fingerprint": e.Secrets[0].Fingerprint}
		if err := a.audit(r.Context(), tx, p, "endpoint.rotate-secret", tenant, id, detail); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wireEndpoint(e))
		return nil
	})
}
