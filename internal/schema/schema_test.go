package schema_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// qualifiedPackages are the packages whose queries take the schema of the relay's tables (a
// Schema field or argument): each of their SQL statements must name the tables through
// schema.SQL placeholders ({outbox_events}) or schema.Qualify, never bare, or it reads the
// search_path's table instead (a decoy in public, say).
var qualifiedPackages = []string{"cdc", "publisher", "relay", "outbox", "endpoints", "api", "catalog", "inbox", "migrations", "internal/inspect", "internal/schemacheck", "internal/control", "internal/state", "cmd/outbox-relay"}

// bareTable finds a table of the relay named bare where a statement expects a table.
var bareTable = regexp.MustCompile(`(?i)\b(FROM|JOIN|INTO|UPDATE|USING|TABLE)\s+(` +
	strings.Join(schema.Names(), "|") + `)\b|'(` + strings.Join(schema.Names(), "|") + `)'`)

func TestQueriesNameTheTablesOfTheSchema(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, pkg := range qualifiedPackages {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			for _, hit := range bareTables(t, file) {
				t.Errorf("%s: %s names a relay table bare; write {%s} and pass the query through schema.SQL "+
					"(or use schema.Qualify, or pgx.Identifier{schema, table})", hit.pos, hit.text, hit.table)
			}
		}
	}
}

type hit struct {
	pos, text, table string
}

func bareTables(t *testing.T, file string) []hit {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, 0) // comments are not parsed: messages may name tables
	if err != nil {
		t.Fatal(err)
	}
	var hits []hit
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.CompositeLit); ok {
			hits = append(hits, bareIdentifier(fset, id)...)
			return true
		}
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		for _, m := range bareTable.FindAllStringSubmatch(lit.Value, -1) {
			// Only text that reads as SQL: an error message saying "GRANT ... ON outbox_events"
			// or "the owner of outbox_events" is prose, written for a person.
			if !looksLikeSQL(lit.Value) {
				continue
			}
			hits = append(hits, hit{pos: fset.Position(lit.Pos()).String(), text: m[0], table: m[2] + m[3]})
		}
		return true
	})
	return hits
}

// bareIdentifier finds a pgx.Identifier{"outbox_backfill"} (for CopyFrom, say) that names a
// table of the relay without its schema: the search_path would resolve it.
func bareIdentifier(fset *token.FileSet, c *ast.CompositeLit) []hit {
	sel, ok := c.Type.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Identifier" || len(c.Elts) != 1 {
		return nil
	}
	lit, ok := c.Elts[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return nil
	}
	name := strings.Trim(lit.Value, "`\"")
	if !slices.Contains(schema.Names(), name) {
		return nil
	}
	return []hit{{pos: fset.Position(c.Pos()).String(), text: "pgx.Identifier{" + lit.Value + "}", table: name}}
}

var sqlStart = regexp.MustCompile(`^[` + "`" + `"]\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP)\b`)

func looksLikeSQL(lit string) bool { return sqlStart.MatchString(lit) || strings.Contains(lit, "\n") }

// SQL qualifies each placeholder with the schema, quoted; other braces (a JSON or array
// literal) stay; with no schema the bare name is left to the search_path.
func TestSQLQualifiesThePlaceholders(t *testing.T) {
	const q = `SELECT '{}'::jsonb, '{a,b}'::text[] FROM {outbox_events} e JOIN {outbox_slots} s ON true`
	for _, tc := range []struct{ schema, want string }{
		{"app", `SELECT '{}'::jsonb, '{a,b}'::text[] FROM "app"."outbox_events" e JOIN "app"."outbox_slots" s ON true`},
		{`My "App"`, `SELECT '{}'::jsonb, '{a,b}'::text[] FROM "My ""App"""."outbox_events" e JOIN "My ""App"""."outbox_slots" s ON true`},
		{"", `SELECT '{}'::jsonb, '{a,b}'::text[] FROM outbox_events e JOIN outbox_slots s ON true`},
	} {
		for i := 0; i < 2; i++ { // the second time from the cache
			if got := schema.SQL(tc.schema, q); got != tc.want {
				t.Errorf("SQL(%q) = %s, want %s", tc.schema, got, tc.want)
			}
		}
	}
}

// owners are the tables whose SQL lives in one package, with that package: a query of one of
// them anywhere else (readAnything aside) is refused, so that the next change to its rows lands
// beside the others. Every table the relay keeps about itself is here: internal/state's, and
// internal/control's (an operator request's protocol and its row are one unit, see that
// package's doc). outbox_events is the producer's table (outbox writes it, anyone may read it);
// the relay's columns of it, the status marks, are an owned statement (ownedStatements).
var owners = map[string]string{
	schema.Reshard:          "internal/control",
	schema.PipelineControl:  "internal/control",
	schema.SlotLocation:     "internal/state",
	schema.Slots:            "internal/state",
	schema.Parked:           "internal/state",
	schema.Backfill:         "internal/state",
	schema.PipelineEvents:   "internal/state",
	schema.Replays:          "internal/state",
	schema.EndpointVersions: "internal/state",
	schema.EndpointStatus:   "internal/state",
	schema.APIAudit:         "internal/state",
	schema.APIIdempotency:   "internal/state",
	statusMarks:             "internal/state",
}

// statusMarks names, in owners, the UPDATE of outbox_events: the status columns (status,
// processed_at, retries, last_error, event_sequence) that the relay writes about a row it
// delivered, dead-lettered or parked.
const statusMarks = "outbox_events (UPDATE: the status marks)"

// ownedStatements are statements owned apart from their table, each by a name in owners.
var ownedStatements = []struct {
	re   *regexp.Regexp
	name string
}{
	{regexp.MustCompile(`\bUPDATE\s+(\{` + schema.Events + `\}|` + schema.Events + `\b)`), statusMarks},
}

// readAnything are the packages that may query any table: the producer's and the consumer's
// packages (outbox prunes what no pipeline still needs; inbox), the migrations, which create the
// tables, and the status report, which reads everything. (internal/schema names the tables and
// queries none.)
var readAnything = []string{"outbox", "inbox", "migrations", "internal/inspect"}

func TestOwnedTablesAreQueriedByTheirOwnerOnly(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	for _, pkg := range qualifiedPackages {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			for _, q := range queriedTables(t, file) {
				owner, owned := owners[q.table]
				switch {
				case !owned || slices.Contains(readAnything, pkg):
				case pkg == owner:
					seen[q.table] = true
				default:
					t.Errorf("%s: a query of %s outside %s: its rows are written and read there; call it from %s",
						q.pos, q.table, owner, pkg)
				}
			}
		}
	}
	for table, owner := range owners {
		if !seen[table] {
			t.Errorf("no query of %s found in %s: this check would prove nothing", table, owner)
		}
	}
}

// queriedTables finds the relay's tables a string literal that reads as SQL names, as a
// placeholder ({outbox_reshard}) or bare, and the owned statements (ownedStatements) it holds,
// each as the table name its owner is looked up by.
func queriedTables(t *testing.T, file string) []hit {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hits []hit
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING || !looksLikeSQL(lit.Value) {
			return true
		}
		for _, name := range schema.Names() {
			if regexp.MustCompile(`\{` + name + `\}|\b(FROM|JOIN|INTO|UPDATE|TABLE)\s+` + name + `\b`).MatchString(lit.Value) {
				hits = append(hits, hit{pos: fset.Position(lit.Pos()).String(), table: name})
			}
		}
		for _, o := range ownedStatements {
			if o.re.MatchString(lit.Value) {
				hits = append(hits, hit{pos: fset.Position(lit.Pos()).String(), table: o.name})
			}
		}
		return true
	})
	return hits
}
