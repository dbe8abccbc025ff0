package portal

import (
	"net/http"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/api"
)

// formData is the add and edit form: the values as typed (kept when the API refuses them, so
// nothing typed is lost), the catalog to choose event types from, and the refusal.
type formData struct {
	Edit           bool
	ID             string
	URL            string
	Description    string
	TenantID       string
	EventTypes     []string // the patterns chosen
	Other          string   // patterns typed that the catalog does not list, comma-separated
	Format, Scheme string
	Catalog        []api.EventType
	Key            string // the create's Idempotency-Key: sending the form twice makes one endpoint
}

// catalog reads the event-type catalog through the API.
func (p *Portal) catalog(r *http.Request, q req) ([]api.EventType, error) {
	var types api.Page[api.EventType]
	err := p.call.call(r.Context(), q.who(), "GET", "/event-types", nil, nil, &types)
	return types.Data, err
}

func (p *Portal) newEndpoint(w http.ResponseWriter, r *http.Request, q req) error {
	key, err := newSecret()
	if err != nil {
		return err
	}
	d := formData{Format: "raw", Scheme: "standard-webhooks", Key: key}
	if d.Catalog, err = p.catalog(r, q); err != nil {
		return err
	}
	p.render(w, http.StatusOK, "form", q.view("Add an endpoint", d))
	return nil
}

func (p *Portal) editEndpoint(w http.ResponseWriter, r *http.Request, q req) error {
	e, err := p.getEndpoint(r, q, r.PathValue("id"))
	if err != nil {
		return err
	}
	d := formData{Edit: true, ID: e.ID, URL: e.URL, Description: e.Description, Format: e.Format, Scheme: e.Scheme}
	if e.TenantID != nil {
		d.TenantID = *e.TenantID
	}
	if d.Catalog, err = p.catalog(r, q); err != nil {
		return err
	}
	d.EventTypes, d.Other = splitPatterns(e.EventTypes, d.Catalog)
	p.render(w, http.StatusOK, "form", q.view("Edit "+e.ID, d))
	return nil
}

// splitPatterns separates the patterns the catalog lists (and "*") from the others.
func splitPatterns(patterns []string, types []api.EventType) (chosen []string, other string) {
	var rest []string
	for _, pat := range patterns {
		if pat == "*" || slices.ContainsFunc(types, func(t api.EventType) bool { return t.Name == pat }) {
			chosen = append(chosen, pat)
		} else {
			rest = append(rest, pat)
		}
	}
	return chosen, strings.Join(rest, ", ")
}

// readForm reads the add and edit form.
func readForm(r *http.Request, q req) formData {
	d := formData{URL: strings.TrimSpace(r.PostFormValue("url")), Description: r.PostFormValue("description"),
		EventTypes: r.PostForm["event_types"], Other: r.PostFormValue("other_types"), Format: r.PostFormValue("format"),
		Scheme: r.PostFormValue("scheme"), Key: r.PostFormValue("key"), ID: strings.TrimSpace(r.PostFormValue("id"))}
	if q.operator {
		d.TenantID = strings.TrimSpace(r.PostFormValue("tenant_id"))
	}
	return d
}

// patterns are the form's event types: those ticked, then those typed.
func (d formData) patterns() []string {
	out := slices.Clone(d.EventTypes)
	for pat := range strings.SplitSeq(d.Other, ",") {
		if pat = strings.TrimSpace(pat); pat != "" && !slices.Contains(out, pat) {
			out = append(out, pat)
		}
	}
	return out
}

// body is the API request of the form: only what a partner sets here.
func (d formData) body(q req, create bool) map[string]any {
	b := map[string]any{"url": d.URL, "description": d.Description, "format": d.Format, "scheme": d.Scheme}
	if pats := d.patterns(); len(pats) > 0 || !create {
		b["event_types"] = pats
	}
	if create && d.ID != "" {
		b["id"] = d.ID
	}
	if q.operator && (create || d.TenantID != "") {
		if d.TenantID != "" {
			b["tenant_id"] = d.TenantID
		}
	}
	return b
}

// createdData is the page after a create: the endpoint, and its secret this once.
type createdData struct {
	E      api.Endpoint
	Secret string
	Rotate bool // the page follows a rotate-secret, not a create
}

func (p *Portal) createEndpoint(w http.ResponseWriter, r *http.Request, q req) error {
	d := readForm(r, q)
	var e api.Endpoint
	err := p.call.call(r.Context(), q.who(), "POST", "/endpoints", nil, d.body(q, true), &e, "Idempotency-Key", d.Key)
	if ae, ok := err.(*apiError); ok && ae.Status < 500 {
		return p.refusedForm(w, r, q, d, ae, "Add an endpoint")
	}
	if err != nil {
		return err
	}
	p.render(w, http.StatusCreated, "secret", q.view("Endpoint "+e.ID+" added", createdData{E: e, Secret: e.Secret}))
	return nil
}

func (p *Portal) updateEndpoint(w http.ResponseWriter, r *http.Request, q req) error {
	id := r.PathValue("id")
	d := readForm(r, q)
	d.Edit, d.ID = true, id
	err := p.call.call(r.Context(), q.who(), "PATCH", endpointPath(id), nil, d.body(q, false), nil)
	if ae, ok := err.(*apiError); ok && ae.Status < 500 && ae.Status != http.StatusNotFound {
		return p.refusedForm(w, r, q, d, ae, "Edit "+id)
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, q.base+endpointPath(id)+"?done=saved", http.StatusSeeOther)
	return nil
}

// refusedForm shows the form again with what was typed and the API's refusal beside its fields.
func (p *Portal) refusedForm(w http.ResponseWriter, r *http.Request, q req, d formData, ae *apiError, title string) error {
	var err error
	if d.Catalog, err = p.catalog(r, q); err != nil {
		return err
	}
	v := q.view(title, d)
	v.Error = ae
	p.render(w, http.StatusUnprocessableEntity, "form", v)
	return nil
}
