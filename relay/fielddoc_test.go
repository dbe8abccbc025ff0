package relay

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// zeroWords are how a field's doc states what its zero value does.
var zeroWords = regexp.MustCompile(`\b(zero|Zero|[Ee]mpty|[Nn]il|[Ff]alse|0|[Rr]equired|default)\b`)

// Every exported field of relay's exported config types says what its zero value means (pgx's
// "If zero, the default is no timeout"): a library caller reads the Go doc, not the flags.
func TestEveryConfigFieldStatesItsZeroValue(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fields := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !configType(ts.Name.Name) {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			above := ""
			for _, fl := range st.Fields.List {
				for _, name := range fl.Names {
					if !name.IsExported() {
						continue
					}
					fields++
					if fl.Doc != nil {
						above = fl.Doc.Text()
					}
					// A field without a doc of its own may share the one above that names it
					// ("Slot and Publication name ...").
					doc := fl.Doc.Text() + fl.Comment.Text()
					if fl.Doc == nil && strings.Contains(above, name.Name) {
						doc = above
					}
					if !zeroWords.MatchString(doc) {
						t.Errorf("%s.%s (%s) does not say what its zero value means", ts.Name.Name, name.Name, fset.Position(name.Pos()))
					}
				}
			}
			return true
		})
	}
	if fields < 40 {
		t.Fatalf("found %d exported config fields: the parse missed them, this check would prove nothing", fields)
	}
}

// configType reports whether a type of relay's is a config a caller fills (not a result such
// as Reshard).
func configType(name string) bool {
	return name == "Pipeline" || name == "Delivery" || strings.HasSuffix(name, "Config")
}
