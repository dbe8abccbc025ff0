package api

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The OpenAPI document and the routes agree: every route registered is documented under its
// path and method, and every documented operation is a route (tests/api exercises each one
// against a database and checks every answer against the document).
func TestDocumentListsExactlyTheRoutes(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a, err := New(Config{Pool: pool, OperatorTokens: []OperatorToken{{Name: "x", Token: strings.Repeat("x", 24)}}})
	if err != nil {
		t.Fatal(err)
	}
	routes := append([]string{"GET /api/v1/openapi.json"}, a.patterns...)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(routes)
	slices.Sort(documented)
	if len(routes) < 20 {
		t.Fatalf("only %d routes registered: this check would prove little", len(routes))
	}
	if !slices.Equal(routes, documented) {
		t.Fatalf("routes and the document disagree:\nroutes     %v\ndocumented %v", routes, documented)
	}
}
