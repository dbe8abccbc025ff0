package portal

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The scenario of issue 36, point 4, step by step in a real browser: a partner opens a link,
// adds an endpoint, copies its secret, sends a test event and sees the answer, watches real
// deliveries appear, sees a failed attempt with its server's answer, resends it, and rotates
// the secret; a second tenant's link sees none of it; an expired link shows a clear page; the
// operator finds an event by its id. Each page is saved as a screenshot.
func TestPartnerAndOperatorInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against a relay: not in -short")
	}
	s := newSite(t)
	s.operator(http.MethodPut, "/event-types/order.created", map[string]any{
		"description": "A customer placed an order.",
		"example":     map[string]any{"order_id": "o-1042", "total": "59.90", "currency": "EUR"}})
	s.operator(http.MethodPut, "/event-types/order.shipped", map[string]any{
		"description": "An order left the warehouse.", "example": map[string]any{"order_id": "o-1042", "carrier": "DHL"}})
	recv := newReceiver(t)

	// The partner opens the link the application gave; the token leaves the address bar.
	acme := newTab(t, "partner")
	acme.grantClipboard(s.srv.URL)
	acme.open(s.link("acme", 15*time.Minute))
	if u := acme.location(); strings.Contains(u, "token") || !strings.HasSuffix(u, "/portal/") {
		t.Fatalf("after the link, the address is %s", u)
	}
	acme.see("Endpoints", "No endpoint yet", "acme")
	acme.shot("endpoints-empty")

	// Adds an endpoint: a refusal first, shown beside its field, then the right URL.
	acme.submit("link", "Add an endpoint")
	acme.typeIn("URL", "ftp://partner.example/hooks")
	acme.typeIn("Description", "Orders into our ERP")
	acme.click("checkbox", "order.created")
	acme.shot("add-endpoint")
	acme.submit("button", "Add the endpoint")
	acme.see("The request breaks a rule")
	if v := acme.eval(`document.getElementById("description").value`); v != "Orders into our ERP" {
		t.Fatalf("after the refusal the description is %q: what was typed is lost", v)
	}
	acme.shot("add-endpoint-refused")
	acme.typeIn("URL", recv.URL+"/hooks")
	acme.submit("button", "Add the endpoint")
	acme.see("shown this once")
	id := strings.TrimSuffix(strings.TrimPrefix(acme.eval(`document.querySelector("h1").innerText`), "Endpoint "), " added")

	// Copies its secret with the Copy button.
	acme.click("button", "Copy")
	acme.waitText("the copy", "Copied to the clipboard.")
	acme.shot("secret-once")
	copied := acme.eval(`navigator.clipboard.readText()`)
	shown := acme.eval(`document.getElementById("secret").value`)
	if copied != shown || !strings.HasPrefix(shown, "whsec_") {
		t.Fatalf("the clipboard holds %q, the page shows %q", copied, shown)
	}

	// Sends a test event and sees the answer.
	acme.submit("link", "Send a test event")
	acme.choose("Event", "order.created")
	acme.submit("button", "Send the test event")
	acme.see("Delivered", "Status code", "200", "order.created")
	acme.shot("test-event")

	// Watches real deliveries appear; one fails first, and the partner sees its server's answer.
	acme.submit("link", id)
	since := time.Now().UTC().Add(-time.Minute).Format("2006-01-02T15:04")
	first := s.enqueue("acme", "o-1", map[string]any{"order_id": "o-1"})
	failing := s.enqueue("acme", "o-2", map[string]any{"order_id": "o-2", "note": "fail"})
	s.enqueue("globex", "g-1", map[string]any{"order_id": "g-1"}) // another tenant's: never shown to acme
	acme.until("the deliveries", first, failing, "failed", "HTTP 503")
	acme.clickContaining("DisclosureTriangle", "failed HTTP 503") // the attempt's summary: expands it
	acme.see("inventory service unavailable, try again later", "Error and answer")
	acme.shot("endpoint-deliveries")
	acme.submit("link", "its request's headers and body, and every attempt")
	acme.see("The request", "Webhook-Signature", "(not shown)", "X-Event-Type", `"note": "fail"`, "inventory service unavailable")
	if strings.Contains(acme.text(), "v1,") {
		t.Fatal("the request's page shows a signature")
	}
	acme.shot("event-request")
	acme.submit("link", id)

	// Resends the event that failed: a request, followed until done; the server gets it again.
	acme.clickContaining("DisclosureTriangle", "failed HTTP 503")
	before := recv.count(failing)
	acme.submit("button", "Resend event "+failing)
	acme.see("Resend request")
	acme.until("the resend", "done")
	acme.shot("resend-request")
	// Done once the event is in the endpoint's backlog, which then delivers it.
	waitFor(t, "the resend reaches the server", func() bool { return recv.count(failing) > before })

	// Recovers since a time: the page counts the events first (acme's three, not globex's).
	acme.submit("link", id)
	acme.submit("link", "Recover since…")
	acme.setField("From (UTC)", since)
	acme.submit("button", "Count the events")
	acme.see("2 events", "will be sent to "+id+" again") // first and failing: not globex's, not the test event
	acme.shot("recover-count")
	acme.submit("button", "Send 2 events again")
	acme.until("the recover", "Recover request", "done")

	// Pauses and resumes it (a confirmation first), and sees what a delete would abandon.
	acme.submit("link", id)
	acme.submit("button", "Pause")
	acme.see("The endpoint is paused", "paused")
	acme.submit("button", "Resume")
	acme.see("The endpoint is resumed")
	acme.submit("link", "Delete…")
	acme.see("Delete "+id+"?", "cannot be undone")
	acme.shot("delete-confirm")
	acme.submit("link", "Keep it")

	// Rotates the secret with an hour of grace: both secrets sign meanwhile.
	acme.submit("link", "Rotate secret")
	acme.choose("Keep the current secret signing for", "1 hour")
	acme.shot("rotate-secret")
	acme.submit("button", "Rotate the secret")
	acme.see("The signing secret from now on", "also with the previous one until")
	if acme.eval(`document.getElementById("secret").value`) == shown {
		t.Fatal("the rotation showed the old secret")
	}
	after := s.enqueue("acme", "o-3", map[string]any{"order_id": "o-3"})
	waitFor(t, "the event after the rotation", func() bool { return recv.count(after) > 0 })
	if n := recv.signatures(after); n != 2 {
		t.Fatalf("the event after the rotation carries %d signatures, want 2 (the new secret and the old one)", n)
	}

	// A second tenant's link sees none of it, whatever it types in the address.
	globex := newTab(t, "other-tenant")
	globex.open(s.link("globex", time.Minute))
	globex.see("No endpoint yet")
	globex.open(s.srv.URL + "/portal/endpoints/" + id)
	globex.see("Not found", "not yours to see")
	globex.shot("other-tenant")
	globex.open(s.srv.URL + "/portal/events?id=" + failing)
	globex.see("Not found")
	if strings.Contains(globex.text(), id) {
		t.Fatalf("globex's search shows acme's endpoint %s", id)
	}

	// An expired link shows a clear page, and signs nobody in.
	late := newTab(t, "expired")
	link := s.link("acme", time.Second)
	for expiry := time.Now().Add(2 * time.Second); time.Now().Before(expiry); {
		time.Sleep(50 * time.Millisecond) // past the link's exp, in whole seconds
	}
	late.open(link)
	late.see("This link has expired", "open the webhooks portal again")
	late.shot("expired-link")

	// The operator signs in to the console and finds the event by its id.
	ops := newTab(t, "operator")
	ops.open(s.srv.URL + "/console/")
	ops.see("Operator sign-in")
	ops.shot("console-sign-in")
	ops.typeIn("Operator token", opToken)
	ops.submit("button", "Sign in")
	ops.see("Every endpoint", id, "acme")
	ops.shot("console-endpoints")
	ops.submit("link", "Find an event")
	ops.typeIn("Event id", failing)
	ops.submit("button", "Search")
	ops.see(id, "failed", "HTTP 503", "delivered")
	ops.shot("console-event")
	ops.submit("link", "Pipelines")
	ops.see("healthy")
	ops.shot("console-pipelines")
	ops.submit("link", "Audit log")
	ops.see("endpoint.create", "endpoint.rotate-secret", "tenant acme")
	ops.shot("console-audit")

	// At 375 px the pages fit the screen: nothing scrolls sideways.
	acme.narrow(func() {
		for _, path := range []string{"/portal/", "/portal/endpoints/" + id, "/portal/endpoints/" + id + "/edit",
			"/portal/endpoints/" + id + "/recover", "/portal/endpoints/" + id + "/events/" + failing, "/portal/audit"} {
			acme.open(s.srv.URL + path)
			acme.fitsWidth()
		}
		acme.open(s.srv.URL + "/portal/endpoints/" + id)
		acme.shot("endpoint-phone")
	})
	acme.open(s.srv.URL + "/portal/")
	acme.see(id, "Orders into our ERP")
	acme.shot("endpoints")
}
