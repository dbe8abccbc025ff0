package portal

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/outbox-relay/outbox-relay/api"
)

var doneOf = map[string]string{"pause": "paused", "resume": "resumed", "enable": "enabled"}

// stateAction serves POST .../pause|resume|enable and goes back to the endpoint's page.
func (p *Portal) stateAction(action string) page {
	return func(w http.ResponseWriter, r *http.Request, q req) error {
		id := r.PathValue("id")
		var body any
		if reason := r.PostFormValue("reason"); reason != "" && action == "pause" {
			body = map[string]string{"reason": reason}
		}
		if err := p.call.call(r.Context(), q.who(), "POST", endpointPath(id)+"/"+action, nil, body, nil); err != nil {
			return err
		}
		http.Redirect(w, r, q.base+endpointPath(id)+"?done="+doneOf[action], http.StatusSeeOther)
		return nil
	}
}

// deleteData is the confirmation of a delete: what the endpoint still holds, and, after a first
// refusal, the API's words on what a forced delete drops.
type deleteData struct {
	E     api.Endpoint
	Stats api.Stats
	Held  string // the API's refusal when the endpoint holds events; "" before
}

func (p *Portal) confirmDelete(w http.ResponseWriter, r *http.Request, q req) error {
	id := r.PathValue("id")
	d := deleteData{}
	var err error
	if d.E, err = p.getEndpoint(r, q, id); err != nil {
		return err
	}
	if err := p.call.call(r.Context(), q.who(), "GET", endpointPath(id)+"/stats", nil, nil, &d.Stats); err != nil {
		return err
	}
	p.render(w, http.StatusOK, "delete", q.view("Delete "+id, d))
	return nil
}

// deleteEndpoint deletes without force first: when the endpoint still holds events the API
// refuses, saying what it holds, and the page asks again with that, the second time forcing.
func (p *Portal) deleteEndpoint(w http.ResponseWriter, r *http.Request, q req) error {
	id := r.PathValue("id")
	query := url.Values{}
	if r.PostFormValue("force") == "true" {
		query.Set("force", "true")
	}
	err := p.call.call(r.Context(), q.who(), "DELETE", endpointPath(id), query, nil, nil)
	if ae, ok := err.(*apiError); ok && ae.Status == http.StatusConflict {
		d := deleteData{Held: ae.Detail}
		if d.E, err = p.getEndpoint(r, q, id); err != nil {
			return err
		}
		if err := p.call.call(r.Context(), q.who(), "GET", endpointPath(id)+"/stats", nil, nil, &d.Stats); err != nil {
			return err
		}
		p.render(w, http.StatusConflict, "delete", q.view("Delete "+id, d))
		return nil
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, q.base+"/?done=deleted", http.StatusSeeOther)
	return nil
}

// testData is the test page: the types to send, and the last attempt's answer.
type testData struct {
	E       api.Endpoint
	Catalog []api.EventType
	Type    string
	Result  *api.TestResult
}

func (p *Portal) testForm(w http.ResponseWriter, r *http.Request, q req) error {
	d := testData{}
	var err error
	if d.E, err = p.getEndpoint(r, q, r.PathValue("id")); err != nil {
		return err
	}
	if d.Catalog, err = p.catalog(r, q); err != nil {
		return err
	}
	p.render(w, http.StatusOK, "test", q.view("Send a test event", d))
	return nil
}

// sendTest sends the test event and shows the endpoint's answer on the same page.
func (p *Portal) sendTest(w http.ResponseWriter, r *http.Request, q req) error {
	id := r.PathValue("id")
	d := testData{Type: r.PostFormValue("event_type")}
	body := map[string]any{}
	if d.Type != "" {
		body["event_type"] = d.Type
	}
	var res api.TestResult
	err := p.call.call(r.Context(), q.who(), "POST", endpointPath(id)+"/test", nil, body, &res)
	ae, refused := err.(*apiError)
	if err != nil && (!refused || ae.Status == http.StatusNotFound || ae.Status >= 500) {
		return err
	}
	if d.E, err = p.getEndpoint(r, q, id); err != nil {
		return err
	}
	if d.Catalog, err = p.catalog(r, q); err != nil {
		return err
	}
	v := q.view("Send a test event", d)
	status := http.StatusOK
	if refused {
		v.Error, status = ae, http.StatusUnprocessableEntity
	} else {
		d.Result = &res
		v.Data = d
	}
	p.render(w, status, "test", v)
	return nil
}

// rotateData is the rotate form: the grace periods to choose from.
type rotateData struct {
	E      api.Endpoint
	Graces []string
	Grace  string
}

var graces = []string{"0s", "1h", "24h", "168h"}

func (p *Portal) rotateForm(w http.ResponseWriter, r *http.Request, q req) error {
	e, err := p.getEndpoint(r, q, r.PathValue("id"))
	if err != nil {
		return err
	}
	p.render(w, http.StatusOK, "rotate", q.view("Rotate the secret", rotateData{E: e, Graces: graces, Grace: "24h"}))
	return nil
}

func (p *Portal) rotateSecret(w http.ResponseWriter, r *http.Request, q req) error {
	id := r.PathValue("id")
	grace := r.PostFormValue("grace")
	var e api.Endpoint
	err := p.call.call(r.Context(), q.who(), "POST", endpointPath(id)+"/rotate-secret", nil, map[string]string{"grace": grace}, &e)
	if ae, ok := err.(*apiError); ok && ae.Status == http.StatusUnprocessableEntity {
		cur, err := p.getEndpoint(r, q, id)
		if err != nil {
			return err
		}
		v := q.view("Rotate the secret", rotateData{E: cur, Graces: graces, Grace: grace})
		v.Error = ae
		p.render(w, http.StatusUnprocessableEntity, "rotate", v)
		return nil
	}
	if err != nil {
		return err
	}
	p.render(w, http.StatusOK, "secret", q.view("New secret for "+id, createdData{E: e, Secret: e.Secret, Rotate: true}))
	return nil
}

// recoverData is the recover form, then its confirmation: how many events the range holds.
type recoverData struct {
	E            api.Endpoint
	Since, Until string
	Preview      *api.RecoverPreview
}

// recoverForm serves the form and, given since (and until), the confirmation: the API counts,
// without recording anything, the endpoint's events of the range.
func (p *Portal) recoverForm(w http.ResponseWriter, r *http.Request, q req) error {
	id := r.PathValue("id")
	d := recoverData{Since: r.URL.Query().Get("since"), Until: r.URL.Query().Get("until")}
	var err error
	if d.E, err = p.getEndpoint(r, q, id); err != nil {
		return err
	}
	v := q.view("Recover "+id, d)
	if d.Since != "" {
		var pv api.RecoverPreview
		err := p.call.call(r.Context(), q.who(), "POST", endpointPath(id)+"/recover", nil, d.body(true), &pv)
		if ae, ok := err.(*apiError); ok && ae.Status < 500 && ae.Status != http.StatusNotFound {
			v.Error = ae
		} else if err != nil {
			return err
		} else {
			d.Preview = &pv
			v.Data = d
		}
	}
	p.render(w, http.StatusOK, "recover", v)
	return nil
}

func (d recoverData) body(dryRun bool) map[string]any {
	b := map[string]any{"since": apiTime(d.Since)}
	if d.Until != "" {
		b["until"] = apiTime(d.Until)
	}
	if dryRun {
		b["dry_run"] = true
	}
	return b
}

func (p *Portal) recoverEndpoint(w http.ResponseWriter, r *http.Request, q req) error {
	id := r.PathValue("id")
	d := recoverData{Since: r.PostFormValue("since"), Until: r.PostFormValue("until")}
	var rq api.Request
	err := p.call.call(r.Context(), q.who(), "POST", endpointPath(id)+"/recover", nil, d.body(false), &rq)
	if ae, ok := err.(*apiError); ok && ae.Status < 500 && ae.Status != http.StatusNotFound {
		if d.E, err = p.getEndpoint(r, q, id); err != nil {
			return err
		}
		v := q.view("Recover "+id, d)
		v.Error = ae
		p.render(w, http.StatusUnprocessableEntity, "recover", v)
		return nil
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, q.base+"/requests/"+strconv.FormatInt(rq.ID, 10), http.StatusSeeOther)
	return nil
}

// resend serves the Resend button of a delivery, and shows the request it made.
func (p *Portal) resend(w http.ResponseWriter, r *http.Request, q req) error {
	id, event := r.PathValue("id"), r.PathValue("event_id")
	var rq api.Request
	err := p.call.call(r.Context(), q.who(), "POST", endpointPath(id)+"/events/"+url.PathEscape(event)+"/resend", nil, nil, &rq)
	if err != nil {
		return err
	}
	http.Redirect(w, r, q.base+"/requests/"+strconv.FormatInt(rq.ID, 10), http.StatusSeeOther)
	return nil
}

// viewRequest shows a recover's or a resend's progress.
func (p *Portal) viewRequest(w http.ResponseWriter, r *http.Request, q req) error {
	var rq api.Request
	if err := p.call.call(r.Context(), q.who(), "GET", "/requests/"+url.PathEscape(r.PathValue("rid")), nil, nil, &rq); err != nil {
		return err
	}
	p.render(w, http.StatusOK, "request", q.view("Request "+strconv.FormatInt(rq.ID, 10), rq))
	return nil
}
