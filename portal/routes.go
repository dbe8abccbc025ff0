package portal

import (
	"errors"
	"net/http"

	"github.com/outbox-relay/outbox-relay/internal/actor"
)

// area is the portal (a tenant's pages) or the console (an operator's): the same pages under
// two paths, each with a cookie of its own.
type area struct {
	base     string // Prefix + "/portal" or "/console"
	cookie   string
	operator bool
}

// req is what a signed-in page has: its area and session.
type req struct {
	area
	s session
}

func (q req) who() actor.Actor { return q.s.who }

// page is a signed-in page's function: it writes its answer or returns an error, which the
// wrapper renders (an *apiError as the API words it).
type page func(w http.ResponseWriter, r *http.Request, q req) error

func (p *Portal) routes() {
	portal := area{base: p.cfg.Prefix + "/portal", cookie: "outbox_relay_portal"}
	console := area{base: p.cfg.Prefix + "/console", cookie: "outbox_relay_console", operator: true}
	for _, a := range []area{portal, console} {
		b := a.base
		p.mux.Handle("GET "+b+"/static/", http.StripPrefix(b+"/static/", staticFiles()))
		p.mux.HandleFunc("POST "+b+"/sign-out", p.signOut(a))
		p.handle(a, "GET "+b+"/{$}", p.home)
		p.handle(a, "GET "+b+"/endpoints/new", p.newEndpoint)
		p.handle(a, "POST "+b+"/endpoints/new", p.createEndpoint)
		p.handle(a, "GET "+b+"/endpoints/{id}", p.viewEndpoint)
		p.handle(a, "GET "+b+"/endpoints/{id}/edit", p.editEndpoint)
		p.handle(a, "POST "+b+"/endpoints/{id}/edit", p.updateEndpoint)
		for _, action := range []string{"pause", "resume", "enable"} {
			p.handle(a, "POST "+b+"/endpoints/{id}/"+action, p.stateAction(action))
		}
		p.handle(a, "GET "+b+"/endpoints/{id}/delete", p.confirmDelete)
		p.handle(a, "POST "+b+"/endpoints/{id}/delete", p.deleteEndpoint)
		p.handle(a, "GET "+b+"/endpoints/{id}/test", p.testForm)
		p.handle(a, "POST "+b+"/endpoints/{id}/test", p.sendTest)
		p.handle(a, "GET "+b+"/endpoints/{id}/rotate", p.rotateForm)
		p.handle(a, "POST "+b+"/endpoints/{id}/rotate", p.rotateSecret)
		p.handle(a, "GET "+b+"/endpoints/{id}/recover", p.recoverForm)
		p.handle(a, "POST "+b+"/endpoints/{id}/recover", p.recoverEndpoint)
		p.handle(a, "GET "+b+"/endpoints/{id}/events/{event_id}", p.viewEvent)
		p.handle(a, "POST "+b+"/endpoints/{id}/events/{event_id}/resend", p.resend)
		p.handle(a, "GET "+b+"/requests/{rid}", p.viewRequest)
		p.handle(a, "GET "+b+"/events", p.searchEvent)
		p.handle(a, "GET "+b+"/audit", p.audit)
	}
	p.mux.HandleFunc("GET "+portal.base+"/sign-in", p.openLink(portal))
	p.mux.HandleFunc("GET "+console.base+"/sign-in", p.signInForm(console))
	p.mux.HandleFunc("POST "+console.base+"/sign-in", p.signIn(console))
	p.handle(console, "GET "+console.base+"/pipelines", p.pipelines)
	p.mux.HandleFunc("/", p.notFound)
}

// handle registers a page that needs a session of a's kind; a POST needs the session's CSRF
// token too.
func (p *Portal) handle(a area, pattern string, f page) {
	p.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		s, ok := p.session(w, r, a)
		if !ok {
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if !checkCSRF(r, s) {
				p.fail(w, r, a, http.StatusForbidden, "This form has expired",
					"The form was sent without this session's token (it may come from another page, or from before a "+
						"sign-in). Go back, reload the page, and send it again.")
				return
			}
		}
		q := req{area: a, s: s}
		if err := f(w, r, q); err != nil {
			p.failIn(w, r, q, err)
		}
	})
}

// maxForm bounds a form's body.
const maxForm = 64 << 10

// session finds the request's session of a's kind; without one it answers (a sign-in page for
// the console, a page saying how to open the portal again) and reports false.
func (p *Portal) session(w http.ResponseWriter, r *http.Request, a area) (session, bool) {
	if c, err := r.Cookie(a.cookie); err == nil && c.Value != "" {
		s, ok, err := p.lookup(r.Context(), c.Value, a.operator)
		if err != nil {
			p.failErr(w, r, a, err)
			return session{}, false
		}
		if ok {
			return s, true
		}
	}
	if a.operator {
		if r.Method == http.MethodGet {
			http.Redirect(w, r, a.base+"/sign-in?next="+r.URL.EscapedPath(), http.StatusSeeOther)
			return session{}, false
		}
		http.Redirect(w, r, a.base+"/sign-in", http.StatusSeeOther)
		return session{}, false
	}
	p.fail(w, r, a, http.StatusUnauthorized, "You are signed out",
		"Your session has ended (signed out, or it lasted its time). Open the webhooks portal again from the application: "+
			"it gives you a new link.")
	return session{}, false
}

func (p *Portal) signOut(a area) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if c, err := r.Cookie(a.cookie); err == nil && c.Value != "" {
			s, ok, err := p.lookup(r.Context(), c.Value, a.operator)
			if err != nil {
				p.failErr(w, r, a, err)
				return
			}
			if ok && !checkCSRF(r, s) {
				p.fail(w, r, a, http.StatusForbidden, "This form has expired", "Reload the page and sign out again.")
				return
			}
			if ok {
				if err := p.endSession(r.Context(), c.Value); err != nil {
					p.failErr(w, r, a, err)
					return
				}
			}
		}
		p.setCookie(w, r, a, "", -1)
		p.render(w, http.StatusOK, "signedout", view{Area: a, Title: "Signed out"})
	}
}

func (p *Portal) notFound(w http.ResponseWriter, r *http.Request) {
	a := area{base: p.cfg.Prefix + "/portal"}
	p.fail(w, r, a, http.StatusNotFound, "Page not found", "There is no page at this address.")
}

// failErr renders err for a browser without a session.
func (p *Portal) failErr(w http.ResponseWriter, r *http.Request, a area, err error) {
	status, title, detail := p.explain(r, err)
	p.render(w, status, "message", view{Area: a, Title: title, Data: detail})
}

// failIn renders err on a signed-in page: the header keeps its links and the sign-out.
func (p *Portal) failIn(w http.ResponseWriter, r *http.Request, q req, err error) {
	status, title, detail := p.explain(r, err)
	p.render(w, status, "message", q.view(title, detail))
}

// explain turns err into a page: an API problem with its status and words (a 404 in words of
// its own, the same for what does not exist and what is another tenant's), anything else a 500
// that says nothing of the cause (the log has it).
func (p *Portal) explain(r *http.Request, err error) (int, string, string) {
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		return ae.Status, "Not found", "There is nothing at this address: it does not exist, or it is not yours to see."
	case errors.As(err, &ae):
		return ae.Status, ae.Title, ae.Detail
	}
	p.cfg.Logger.Error().Err(err).Str("path", r.URL.Path).Str("method", r.Method).Msg("portal: page failed")
	return http.StatusInternalServerError, "Something went wrong",
		"The page could not be shown. Nothing was changed unless a page said so: try again in a moment."
}

func (p *Portal) fail(w http.ResponseWriter, _ *http.Request, a area, status int, title, detail string) {
	p.render(w, status, "message", view{Area: a, Title: title, Data: detail})
}
