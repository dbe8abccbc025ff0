package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/catalog"
)

// EventType is a type of the event-type catalog (package catalog): the column names.
type EventType = catalog.Type

// forbidTenant refuses a tenant on an operator's route: the catalog describes the whole
// application, not a tenant's part of it.
func forbidTenant(p principal, what string) error {
	if p.operator {
		return nil
	}
	return problem(http.StatusForbidden, typeForbidden, what+" is an operator's: a tenant token cannot change it")
}

func catalogError(err error, name string) error {
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return problem(http.StatusNotFound, typeNotFound, fmt.Sprintf("no event type %q: GET /api/v1/event-types lists them", name))
	case errors.Is(err, catalog.ErrInvalid):
		return problem(http.StatusUnprocessableEntity, typeInvalid, reasonOf(err, "catalog: "))
	}
	return err
}

func reasonOf(err error, prefix string) string {
	s := err.Error()
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

func (a *API) listEventTypes(w http.ResponseWriter, r *http.Request) error {
	if err := unknownParams(r); err != nil {
		return err
	}
	types, err := catalog.Catalog{Schema: a.cfg.Schema}.List(r.Context(), a.cfg.Pool)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page(types, ""))
	return nil
}

func (a *API) getEventType(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	t, err := catalog.Catalog{Schema: a.cfg.Schema}.Get(r.Context(), a.cfg.Pool, name)
	if err != nil {
		return catalogError(err, name)
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// putEventType serves PUT /api/v1/event-types/{name}: creates the type or replaces it (201 or
// 200). Operators only.
func (a *API) putEventType(w http.ResponseWriter, r *http.Request) error {
	p, name := principalOf(r.Context()), r.PathValue("name")
	if err := forbidTenant(p, "the event-type catalog"); err != nil {
		return err
	}
	b, err := a.readBody(w, r, []string{"description", "schema", "example", "deprecated", "replaced_by"}, true)
	if err != nil {
		return err
	}
	t := catalog.Type{Name: name}
	if _, err := b.field("description", &t.Description, "a string"); err != nil {
		return err
	}
	if _, err := b.field("deprecated", &t.Deprecated, "true or false"); err != nil {
		return err
	}
	if _, err := b.field("replaced_by", &t.ReplacedBy, "a string"); err != nil {
		return err
	}
	if b.has("schema") && !b.null("schema") {
		var obj map[string]json.RawMessage
		if _, err := b.field("schema", &obj, "a JSON Schema object"); err != nil {
			return err
		}
		t.Schema = b["schema"]
	}
	if b.has("example") && !b.null("example") {
		t.Example = b["example"]
	}
	return a.tx(r.Context(), func(tx pgx.Tx) error {
		out, created, err := catalog.Catalog{Schema: a.cfg.Schema}.Put(r.Context(), tx, t)
		if err != nil {
			return catalogError(err, name)
		}
		if err := a.audit(r.Context(), tx, p, "event_type.put", "", "", map[string]any{"name": name, "created": created}); err != nil {
			return err
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		writeJSON(w, status, out)
		return nil
	})
}

func (a *API) deleteEventType(w http.ResponseWriter, r *http.Request) error {
	p, name := principalOf(r.Context()), r.PathValue("name")
	if err := forbidTenant(p, "the event-type catalog"); err != nil {
		return err
	}
	return a.tx(r.Context(), func(tx pgx.Tx) error {
		if err := (catalog.Catalog{Schema: a.cfg.Schema}).Delete(r.Context(), tx, name); err != nil {
			return catalogError(err, name)
		}
		if err := a.audit(r.Context(), tx, p, "event_type.delete", "", "", map[string]any{"name": name}); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}
