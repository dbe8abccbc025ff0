package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the API's OpenAPI 3.1 document: the one description of every route, served at
// GET /api/v1/openapi.json, validated and checked against every answer of the tests
// (tests/api), and the source of the reference pages (docs/reference/api.md and api/).
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3.1 document (JSON).
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// routes registers every route. Each is documented in openapi.json under the same path and
// method; a test fails when the two disagree.
func (a *API) routes() {
	a.mux.HandleFunc("GET /api/v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		writeRaw(w, http.StatusOK, openAPI)
	})
	a.route("GET /api/v1/endpoints", a.listEndpoints)
	a.route("POST /api/v1/endpoints", a.createEndpoint)
	a.route("GET /api/v1/endpoints/{id}", a.getEndpoint)
	a.route("PATCH /api/v1/endpoints/{id}", a.updateEndpoint)
	a.route("DELETE /api/v1/endpoints/{id}", a.deleteEndpoint)
	for _, action := range []string{"pause", "resume", "enable", "disable"} {
		a.route("POST /api/v1/endpoints/{id}/"+action, a.stateAction(action))
	}
	a.route("POST /api/v1/endpoints/{id}/rotate-secret", a.rotateSecret)
	a.route("POST /api/v1/endpoints/{id}/test", a.testEndpoint)
	a.route("POST /api/v1/endpoints/{id}/recover", a.recoverEndpoint)
	a.route("POST /api/v1/endpoints/{id}/events/{event_id}/resend", a.resendEvent)
	a.route("GET /api/v1/endpoints/{id}/events/{event_id}", a.eventRequest)
	a.route("GET /api/v1/endpoints/{id}/deliveries", a.endpointDeliveries)
	a.route("GET /api/v1/endpoints/{id}/stats", a.endpointStats)
	a.route("GET /api/v1/events/{event_id}/deliveries", a.eventDeliveries)
	a.route("GET /api/v1/requests/{id}", a.getRequest)
	a.route("GET /api/v1/audit", a.listAudit)
	a.route("GET /api/v1/event-types", a.listEventTypes)
	a.route("GET /api/v1/event-types/{name}", a.getEventType)
	a.route("PUT /api/v1/event-types/{name}", a.putEventType)
	a.route("DELETE /api/v1/event-types/{name}", a.deleteEventType)
}
