package api

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/reference/api.md and docs/reference/api/ from the OpenAPI document instead of checking them")

// referenceDir is where the reference pages go: api.md, the index, and api/<group>.md beside it.
const referenceDir = "../docs/reference"

// The API reference (docs/reference/api.md and the pages of docs/reference/api/) is what the
// OpenAPI document generates: -update rewrites it, and removes a page of docs/reference/api/ the
// document no longer makes.
func TestAPIReference(t *testing.T) {
	want, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(referenceDir, "api", "*.md"))
	for _, p := range old {
		rel, _ := filepath.Rel(referenceDir, p)
		if _, ok := want[filepath.ToSlash(rel)]; !ok {
			if *update {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("%s is no page of the OpenAPI document's reference: run go test ./api -run TestAPIReference -update", p)
		}
	}
	for rel, page := range want {
		path := filepath.Join(referenceDir, filepath.FromSlash(rel))
		got, err := os.ReadFile(path)
		if err != nil && !(*update && os.IsNotExist(err)) {
			t.Fatal(err)
		}
		if string(got) == page {
			continue
		}
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s is not what the OpenAPI document generates: run go test ./api -run TestAPIReference -update", path)
	}
}

// The reference splits by the document's tags: every operation is on its group's page, the
// index lists each with a link that lands on it, and every page stays small.
func TestAPIReferencePages(t *testing.T) {
	pages, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	index := pages["api.md"]
	ops := 0
	for rel, page := range pages {
		if len(page) > 20<<10 {
			t.Errorf("%s would be %d bytes, over the 20 KB of a docs page: split the group", rel, len(page))
		}
		for _, m := range regexp.MustCompile("(?m)^## `([A-Z]+ [^`]+)`$").FindAllStringSubmatch(page, -1) {
			ops++
			link := "(api/" + strings.TrimPrefix(rel, "api/") + "#" + slug("`"+m[1]+"`") + ")"
			if !strings.Contains(index, link) {
				t.Errorf("the index does not link to %s on %s", m[1], rel)
			}
		}
	}
	if ops < 20 || len(pages) < 4 {
		t.Fatalf("found %d operations on %d pages: the split is broken", ops, len(pages))
	}
}

// apiDoc is what the reference reads of the OpenAPI document.
type apiDoc struct {
	Info       struct{ Description string } `json:"info"`
	Tags       []struct{ Name string }      `json:"tags"`
	Paths      map[string]map[string]op     `json:"paths"`
	Components struct {
		Schemas    map[string]docSchema `json:"schemas"`
		Parameters map[string]param     `json:"parameters"`
		Responses  map[string]struct {
			Description string `json:"description"`
		} `json:"responses"`
	} `json:"components"`
}

// schemasPage is the page of the schemas, relative to the other pages of docs/reference/api/.
const schemasPage = "schemas.md"

// methods are the HTTP methods in the order a path's operations are listed.
var methods = []string{"get", "post", "put", "patch", "delete"}

// Reference renders the OpenAPI document as reference pages, keyed by their path under
// docs/reference: api.md, an index of every operation, then api/<tag>.md for each of the
// document's tags (each operation with its parameters, body and answers) and api/schemas.md
// (each schema's fields).
func Reference() (map[string]string, error) {
	var doc apiDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(doc.Paths))
	for p := range doc.Paths {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	pages := map[string]string{}
	var index strings.Builder
	index.WriteString(generated + "# API reference: `/api/v1`\n\n")
	index.WriteString(doc.Info.Description + "\n\nThe document itself is served at `GET /api/v1/openapi.json`. How to serve the API, mint tokens " +
		"and read its errors: [The management API](../guides/api.md). One page per group of routes, and one of the " +
		"[schemas](api/" + schemasPage + ") their bodies and answers use:\n")
	for _, tag := range doc.Tags {
		file := strings.ReplaceAll(tag.Name, " ", "-") + ".md"
		var b strings.Builder
		fmt.Fprintf(&b, "%s# API reference: %s\n\nThe routes of `/api/v1` tagged `%s`; the [index](../api.md) lists every route, "+
			"[the schemas](%s) every body and answer.\n", generated, tag.Name, tag.Name, schemasPage)
		fmt.Fprintf(&index, "\n## %s\n\n", strings.ToUpper(tag.Name[:1])+tag.Name[1:])
		n := 0
		for _, p := range paths {
			for _, m := range methods {
				o, ok := doc.Paths[p][m]
				if !ok || !slices.Contains(o.Tags, tag.Name) {
					continue
				}
				n++
				heading := fmt.Sprintf("`%s %s`", strings.ToUpper(m), p)
				fmt.Fprintf(&index, "- <a id=\"%s\"></a>[%s](api/%s#%s): %s.\n", slug(heading), heading, file, slug(heading), o.Summary)
				b.WriteString("\n## " + heading + "\n")
				writeOperation(&b, doc, o)
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("tag %q has no operation", tag.Name)
		}
		pages["api/"+file] = b.String()
	}
	pages["api/"+schemasPage] = schemas(doc, &index)
	pages["api.md"] = index.String()
	return pages, checkTagged(doc)
}

const generated = "<!-- Generated from api/openapi.json; do not edit. Regenerate: go test ./api -run TestAPIReference -update -->\n"

// checkTagged refuses an operation without one of the document's tags: it would be on no page.
func checkTagged(doc apiDoc) error {
	for p, ops := range doc.Paths {
		for m, o := range ops {
			if !slices.ContainsFunc(doc.Tags, func(t struct{ Name string }) bool { return slices.Contains(o.Tags, t.Name) }) {
				return fmt.Errorf("%s %s has none of the document's tags: give it one, so that the reference lists it", strings.ToUpper(m), p)
			}
		}
	}
	return nil
}

// writeOperation writes an operation's summary, description, parameters, body and answers.
func writeOperation(b *strings.Builder, doc apiDoc, o op) {
	fmt.Fprintf(b, "\n**%s.**", o.Summary)
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
		rows = append(rows, fmt.Sprintf("| `%s` | %s | %s | %s |", prm.Name, prm.In, prm.Schema.typ(schemasPage), cell(prm.Description)))
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
			fmt.Fprintf(b, "\nBody (%s): %s.\n", need, c.Schema.typ(schemasPage))
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
			what = " ([Problem](" + schemasPage + "#problem))"
		}
		for _, ct := range r.Content {
			if ct.Schema.Ref != "" {
				what = " (" + ct.Schema.typ(schemasPage) + ")"
			}
		}
		fmt.Fprintf(b, "| %s | %s%s |\n", c, cell(desc), what)
	}
}

// schemas renders the page of every schema's fields, and lists the schemas on the index.
func schemas(doc apiDoc, index *strings.Builder) string {
	var b strings.Builder
	b.WriteString(generated + "# API reference: schemas\n\nThe bodies and answers of `/api/v1`, each with its fields; " +
		"the [index](../api.md) lists every route.\n")
	names := make([]string, 0, len(doc.Components.Schemas))
	for n := range doc.Components.Schemas {
		names = append(names, n)
	}
	slices.Sort(names)
	index.WriteString("\n## Schemas\n\n")
	for i, n := range names {
		if i > 0 {
			index.WriteString(",\n")
		}
		fmt.Fprintf(index, "<a id=\"%s\"></a>[%s](api/%s#%s)", slug(n), n, schemasPage, slug(n))
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
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f, fs.typ(""), always, cell(fs.Description))
		}
	}
	index.WriteString(".\n")
	return b.String()
}

// slugDrop is what GitHub drops from a heading to make its anchor.
var slugDrop = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)

// slug is the anchor GitHub gives a heading (the docs' link checker computes the same).
func slug(h string) string {
	return strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
}

type op struct {
	Summary, Description string
	Tags                 []string `json:"tags"`
	Security             *[]any   `json:"security"`
	Parameters           []param  `json:"parameters"`
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

// typ says a schema's type in a few words: a link to a named schema on page (empty: this one),
// or its JSON types.
func (s docSchema) typ(page string) string {
	if s.Ref != "" {
		n := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		return "[" + n + "](" + page + "#" + slug(n) + ")"
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
			types[i] = "array of " + s.Items.typ(page)
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
