package api

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/reference/api.md from the OpenAPI document instead of checking it")

const referencePath = "../docs/reference/api.md"

// docs/reference/api.md is what the OpenAPI document generates: -update rewrites it.
func TestAPIReference(t *testing.T) {
	want, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(referencePath)
	if err != nil && !(*update && os.IsNotExist(err)) {
		t.Fatal(err)
	}
	if string(got) == want {
		return
	}
	if *update {
		if err := os.WriteFile(filepath.Clean(referencePath), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is not what the OpenAPI document generates: run go test ./api -run TestAPIReference -update", referencePath)
}

// Reference renders the OpenAPI document as the reference page: each operation with its
// parameters, body and answers, then each schema's fields.
func Reference() (string, error) {
	var doc struct {
		Info       struct{ Description string } `json:"info"`
		Paths      map[string]map[string]op     `json:"paths"`
		Components struct {
			Schemas    map[string]docSchema `json:"schemas"`
			Parameters map[string]param     `json:"parameters"`
			Responses  map[string]struct {
				Description string `json:"description"`
			} `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("<!-- Generated from api/openapi.json; do not edit. Regenerate: go test ./api -run TestAPIReference -update -->\n")
	b.WriteString("# API reference: `/api/v1`\n\n")
	b.WriteString(doc.Info.Description + "\n\nThe document itself is served at `GET /api/v1/openapi.json`. How to serve the API, mint tokens " +
		"and read its errors: [The management API](../guides/api.md).\n")
	paths := make([]string, 0, len(doc.Paths))
	for p := range doc.Paths {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		for _, m := range []string{"get", "post", "put", "patch", "delete"} {
			o, ok := doc.Paths[p][m]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "\n## `%s %s`\n\n**%s.**", strings.ToUpper(m), p, o.Summary)
			if o.Description != "" {
				b.WriteString(" " + o.Description)
			}
			b.WriteString("\n")
			if o.Security != nil && len(*o.Security) == 0 {
				b.WriteString("\nNo token needed.\n")
			}
			var rows []string
			for _, prm := range o.Parameters {
				if prm.Ref != "" {
					prm = doc.Components.Parameters[strings.TrimPrefix(prm.Ref, "#/components/parameters/")]
				}
				rows = append(rows, fmt.Sprintf("| `%s` | %s | %s | %s |", prm.Name, prm.In, prm.Schema.typ(), cell(prm.Description)))
			}
			if len(rows) > 0 {
				b.WriteString("\n| parameter | in | type | meaning |\n|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n")
			}
			if o.RequestBody != nil {
				for _, c := range o.RequestBody.Content {
					need := "optional"
					if o.RequestBody.Required {
						need = "required"
					}
					fmt.Fprintf(&b, "\nBody (%s): %s.\n", need, c.Schema.typ())
				}
			}
			codes := make([]string, 0, len(o.Responses))
			for c := range o.Responses {
				codes = append(codes, c)
			}
			slices.Sort(codes)
			b.WriteString("\n| answer | meaning |\n|---|---|\n")
			for _, c := range codes {
				r := o.Responses[c]
				desc, what := r.Description, ""
				if r.Ref != "" {
					desc = doc.Components.Responses[strings.TrimPrefix(r.Ref, "#/components/responses/")].Description
					what = " ([Problem](#problem))"
				}
				for _, ct := range r.Content {
					if ct.Schema.Ref != "" {
						what = " (" + ct.Schema.typ() + ")"
					}
				}
				fmt.Fprintf(&b, "| %s | %s%s |\n", c, cell(desc), what)
			}
		}
	}
	b.WriteString("\n# Schemas\n")
	names := make([]string, 0, len(doc.Components.Schemas))
	for n := range doc.Components.Schemas {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s := doc.Components.Schemas[n]
		fmt.Fprintf(&b, "\n## %s\n\n", n)
		if s.Description != "" {
			b.WriteString(s.Description + "\n\n")
		}
		fields := make([]string, 0, len(s.Properties))
		for f := range s.Properties {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		b.WriteString("| field | type | always | meaning |\n|---|---|---|---|\n")
		for _, f := range fields {
			fs := s.Properties[f]
			always := ""
			if slices.Contains(s.Required, f) {
				always = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f, fs.typ(), always, cell(fs.Description))
		}
	}
	return b.String(), nil
}

type op struct {
	Summary, Description string
	Security             *[]any  `json:"security"`
	Parameters           []param `json:"parameters"`
	RequestBody          *struct {
		Required bool                                  `json:"required"`
		Content  map[string]struct{ Schema docSchema } `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Ref         string                                `json:"$ref"`
		Description string                                `json:"description"`
		Content     map[string]struct{ Schema docSchema } `json:"content"`
	} `json:"responses"`
}

type param struct {
	Ref         string `json:"$ref"`
	Name, In    string
	Description string
	Schema      docSchema
}

type docSchema struct {
	Ref         string               `json:"$ref"`
	Type        any                  `json:"type"`
	Format      string               `json:"format"`
	Enum        []any                `json:"enum"`
	Items       *docSchema           `json:"items"`
	Description string               `json:"description"`
	Properties  map[string]docSchema `json:"properties"`
	Required    []string             `json:"required"`
}

// typ says a schema's type in a few words: a link to a named schema, or its JSON types.
func (s docSchema) typ() string {
	if s.Ref != "" {
		n := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		return "[" + n + "](#" + strings.ToLower(n) + ")"
	}
	var types []string
	switch t := s.Type.(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			types = append(types, fmt.Sprint(x))
		}
	}
	for i, t := range types {
		switch {
		case t == "array" && s.Items != nil:
			types[i] = "array of " + s.Items.typ()
		case t == "string" && s.Format != "":
			types[i] = "string (" + s.Format + ")"
		}
	}
	out := strings.Join(types, " or ")
	if out == "" {
		out = "any JSON"
	}
	if len(s.Enum) > 0 {
		var vs []string
		for _, v := range s.Enum {
			if v != nil {
				vs = append(vs, fmt.Sprint(v))
			}
		}
		out += ": " + strings.Join(vs, ", ")
	}
	return out
}

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }
