package endpoints_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// deprecatedNames returns the exported names of package outbox whose doc says Deprecated: the
// endpoint names it keeps for one release as wrappers of this package.
func deprecatedNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	names := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		deprecated := func(docs ...*ast.CommentGroup) bool {
			for _, d := range docs {
				if d != nil && strings.Contains(d.Text(), "Deprecated:") {
					return true
				}
			}
			return false
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && deprecated(d.Doc) {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if deprecated(d.Doc, s.Doc) {
							names[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if deprecated(d.Doc, s.Doc) {
								names[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return names
}

// outboxUses returns, for one file, the deprecated outbox names it uses (outbox.X).
func outboxUses(t *testing.T, file string, deprecated map[string]bool) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	imported := false
	for _, imp := range f.Imports {
		if imp.Path.Value == `"github.com/outbox-relay/outbox-relay/outbox"` && imp.Name == nil {
			imported = true
		}
	}
	if !imported {
		return nil
	}
	full, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var uses []string
	ast.Inspect(full, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "outbox" && deprecated[sel.Sel.Name] {
				uses = append(uses, "outbox."+sel.Sel.Name)
			}
		}
		return true
	})
	return uses
}

// The relay, the CLI, the API and every other package of the module administer endpoints
// through this package, not through outbox's deprecated names (which only outbox's own test of
// them uses): the producer's library is not the relay's way to its endpoints.
func TestNothingUsesOutboxEndpointNames(t *testing.T) {
	root := filepath.Join("..")
	deprecated := deprecatedNames(t, filepath.Join(root, "outbox"))
	for _, must := range []string{"AddEndpoint", "Endpoints", "Endpoint", "NewSealer", "ErrEndpointNotFound"} {
		if !deprecated[must] {
			t.Fatalf("outbox.%s is not found deprecated (found %v): this check would prove nothing", must, deprecated)
		}
	}
	control := outboxUses(t, filepath.Join(root, "outbox", "endpoint_test.go"), deprecated)
	if len(control) == 0 {
		t.Fatal("outbox's test of its deprecated names uses none, as far as this check sees: it would prove nothing")
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		if filepath.Dir(path) == filepath.Join(root, "outbox") {
			return nil
		}
		if uses := outboxUses(t, path, deprecated); len(uses) > 0 {
			t.Errorf("%s uses %s: use package endpoints (endpoints.Store, endpoints.Endpoint, ...)", path, strings.Join(uses, ", "))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
