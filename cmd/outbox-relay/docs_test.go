package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/signature"
)

// cliRefDir holds the CLI reference, one page per command, generated from the command tree.
const cliRefDir = "docs/reference/cli"

// notRun is the info-string word that exempts a block from being run; the reason follows it:
// ```sh not-run: needs a Kubernetes cluster
const notRun = "not-run:"

// docBlock is one fenced code block of a page.
type docBlock struct {
	file string // relative to the repository root
	line int    // of the opening fence
	lang string // first word of the info string
	info string // the whole info string
	body string
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d (```%s)", b.file, b.line, b.info) }

// reason is the text after "not-run:", or "" when the block is to be run.
func (b docBlock) reason() (string, bool) {
	_, after, found := strings.Cut(b.info, notRun)
	return strings.TrimSpace(after), found
}

// docPages returns README.md and every page under docs/, relative to the repository root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(repoRoot, path)
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// parseBlocks returns the fenced blocks of a page, in order.
func parseBlocks(file, text string) ([]docBlock, error) {
	var blocks []docBlock
	var cur *docBlock
	var body []string
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if !strings.HasPrefix(trimmed, "```") {
			if cur != nil {
				body = append(body, line)
			}
			continue
		}
		if cur != nil {
			cur.body = strings.Join(body, "\n")
			blocks = append(blocks, *cur)
			cur, body = nil, nil
			continue
		}
		info := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
		lang, _, _ := strings.Cut(info, " ")
		cur = &docBlock{file: file, line: i + 1, lang: lang, info: info}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: unterminated ``` block", file, cur.line)
	}
	return blocks, nil
}

// runnableLangs are the blocks a reader pastes into a shell or psql: each is run, or says why not.
var (
	sqlLangs   = []string{"sql", "pgsql", "psql"}
	shellLangs = []string{"sh", "bash", "shell", "console"}
)

func pageBlocks(t *testing.T, page string) []docBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, page))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := parseBlocks(page, string(b))
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// Every ```sql and ```sh block of README.md and docs/ runs as written, in page order, against a
// freshly migrated database of its own page, or says in its info string why it cannot
// ("not-run: <reason>"). A shell block finds outbox-relay on PATH and DB_DSN set to that
// database, and runs with -e in a scratch directory.
func TestDocsBlocksRunOrSayWhyNot(t *testing.T) {
	bin := cliOnPath(t)
	ran := 0
	for _, page := range docPages(t) {
		var run []docBlock
		for _, b := range pageBlocks(t, page) {
			if !slices.Contains(sqlLangs, b.lang) && !slices.Contains(shellLangs, b.lang) {
				continue
			}
			if reason, skip := b.reason(); skip {
				if len(reason) < 10 {
					t.Errorf("%s: a not-run block must say why (```%s %s <reason>)", b, b.lang, notRun)
				}
				continue
			}
			run = append(run, b)
		}
		if len(run) == 0 {
			continue
		}
		ran += len(run)
		t.Run(strings.ReplaceAll(page, "/", "_"), func(t *testing.T) {
			dsn, pool := relaytest.MigratedDB(t)
			for _, port := range pagePorts[page] {
				holdPort(t, port)
			}
			dir := t.TempDir() // the page's blocks share it, as a reader's terminal does
			for _, b := range run {
				runDocBlock(t, b, bin, dir, dsn, pool)
			}
			if check, ok := docChecks[page]; ok {
				check(t, pool)
			}
		})
	}
	if ran == 0 {
		t.Fatal("no runnable block found: the parser is broken")
	}
	for page := range docChecks {
		if _, err := os.Stat(filepath.Join(repoRoot, page)); err != nil {
			t.Errorf("docChecks names %s: %v", page, err)
		}
	}
}

func runDocBlock(t *testing.T, b docBlock, bin, dir, dsn string, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	if slices.Contains(shellLangs, b.lang) {
		cmd := exec.CommandContext(ctx, "bash", "-e", "-c", b.body)
		cmd.Dir = dir
		cmd.Env = append(cliEnv(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), dsnFlag.env+"="+dsn)
		// A block may start a process in the background (the tutorial's relay and partner),
		// which outlives bash: it runs in the block's own process group, killed when the page's
		// test ends; and a background process that kept bash's output open must not make the
		// block wait for it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if cmd.Process != nil {
			pgid := cmd.Process.Pid
			t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
		}
		if err != nil {
			t.Fatalf("%s fails: %v\n%s\n--- output:\n%s", b, err, b.body, out)
		}
		t.Logf("%s:\n%s", b, out) // what a reader sees (go test -v)
		return
	}
	var version int
	if err := pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&version); err != nil {
		t.Fatal(err)
	}
	// A block that opens with "-- PostgreSQL N+" needs that version; on an older server it must
	// fail, which keeps the marker honest.
	var need int
	if _, err := fmt.Sscanf(b.body, "-- PostgreSQL %d+", &need); err == nil && version < need {
		if _, err := pool.Exec(ctx, b.body); err == nil {
			t.Fatalf("%s is marked PostgreSQL %d+ but runs on %d:\n%s", b, need, version, b.body)
		}
		return
	}
	if _, err := pool.Exec(ctx, b.body); err != nil {
		t.Fatalf("%s fails on a migrated database: %v\n%s", b, err, b.body)
	}
}

// pagePorts are the fixed local ports a page's blocks listen on (the tutorial's partner, whose
// URL its SQL names, and its API): the page's run holds a lock per port, so that two test runs on
// one machine (two worktrees, say) take turns instead of failing to bind.
var pagePorts = map[string][]int{"docs/tutorial-partners.md": {8473, 8474}}

// holdPort takes an exclusive lock on a file named for port until the test ends.
func holdPort(t *testing.T, port int) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("outbox-relay-docs-port-%d.lock", port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() })
}

// cliEnv is this process's environment without the variables the CLI reads.
func cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(cliEnvVars, name) && name != "PATH" &&
			name != "OUTBOX_RELAY_SCHEMA" {
			env = append(env, kv)
		}
	}
	return env
}

// cliOnPath returns a directory with an outbox-relay that is this test binary acting as the CLI.
func cliOnPath(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\n%s=1 GORACE='atexit_sleep_ms=0' exec %q \"$@\"\n", cliMainEnv, self)
	if err := os.WriteFile(filepath.Join(dir, "outbox-relay"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// docChecks asserts what a page's blocks, run in order, must have left behind: that the
// examples do what the text says, not only that they run.
var docChecks = map[string]func(*testing.T, *pgxpool.Pool){
	"README.md": func(t *testing.T, pool *pgxpool.Pool) {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox.outbox_events
			WHERE aggregate_type = 'order' AND event_type = 'order.created' AND status = 'pending'`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("after the README's quickstart: %d pending order.created events in schema outbox (%v), want 1", n, err)
		}
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox.inbox_events`).Scan(&n); err != nil {
			t.Fatalf("the README's migrate does not create outbox.inbox_events: %v", err)
		}
	},
	"docs/guides/producing.md": func(t *testing.T, pool *pgxpool.Pool) {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE aggregate_type = 'order'
			AND event_type = 'order.created' AND status = 'pending'`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("after the producing guide's SQL: %d pending order.created events (%v), want 1", n, err)
		}
	},
	"docs/tutorial-partners.md": func(t *testing.T, pool *pgxpool.Pool) {
		// The partner got the three orders (its blocks checked its file); here, what the relay
		// recorded: the secret sealed, the 503s in the delivery log, then the deliveries.
		ctx := context.Background()
		var sealed bool
		var failed503, delivered int
		if err := pool.QueryRow(ctx, `SELECT (secrets->0->>'secret') LIKE 'sealed:v1:%' FROM outbox_endpoints WHERE id = 'acme'`).
			Scan(&sealed); err != nil || !sealed {
			t.Fatalf("the tutorial's endpoint secret is not sealed (%v)", err)
		}
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_delivery_attempts WHERE endpoint_id = 'acme' AND status_code = 503),
			(SELECT coalesce(sum(cardinality(event_ids)), 0) FROM outbox_deliveries WHERE endpoint_id = 'acme')`).
			Scan(&failed503, &delivered); err != nil || failed503 == 0 || delivered != 3 {
			t.Fatalf("the tutorial's delivery log: %d attempts answered 503, %d deliveries (%v); want some 503s and 3 deliveries",
				failed503, delivered, err)
		}
		checkTutorialAPI(t, pool)
	},
	"docs/guides/endpoints.md": func(t *testing.T, pool *pgxpool.Pool) {
		// The endpoint added by plain SQL is one the relay accepts, enabled again, and the
		// tenant's event carries its tenant.
		ctx := context.Background()
		var doc []byte
		if err := pool.QueryRow(ctx, `SELECT to_jsonb(e) FROM outbox_endpoints e WHERE id = 'acme'`).Scan(&doc); err != nil {
			t.Fatalf("the endpoints guide's endpoint: %v", err)
		}
		var r endpoint.Row
		if err := json.Unmarshal(doc, &r); err != nil {
			t.Fatal(err)
		}
		if err := r.Validate(nil); err != nil || r.State != endpoint.Enabled || !r.Subscribed("acme", "invoice.paid", "invoice") {
			t.Fatalf("the endpoints guide's endpoint %+v: %v; want a valid enabled endpoint subscribed to acme's invoice.paid", r, err)
		}
		if err := pool.QueryRow(ctx, `SELECT to_jsonb(e) FROM outbox_endpoints e WHERE id = 'ledgerly'`).Scan(&doc); err != nil {
			t.Fatalf("the endpoints guide's second endpoint: %v", err)
		}
		r = endpoint.Row{}
		if err := json.Unmarshal(doc, &r); err != nil {
			t.Fatal(err)
		}
		if err := r.Validate(nil); err != nil || !r.Subscribed("acme", "invoice.paid", "invoice") || r.Subscribed("acme", "order.created", "order") {
			t.Fatalf("the endpoints guide's ledgerly %+v: %v; want a valid endpoint of every tenant's invoices only", r, err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE tenant_id = 'acme'`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("after the endpoints guide's SQL: %d events of tenant acme (%v), want 1", n, err)
		}
	},
}

// checkTutorialAPI asserts what the tutorial's API and portal step left: an endpoint of tenant
// acme created with its tenant token (so marked deny_private, and in the audit as the tenant's),
// which got the invoice and nothing else, and a portal session its link opened.
func checkTutorialAPI(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	var tenant string
	var denyPrivate bool
	var audited, delivered, sessions int
	if err := pool.QueryRow(ctx, `SELECT tenant_id, deny_private,
		(SELECT count(*) FROM outbox_api_audit WHERE endpoint_id = 'acme-invoices' AND action = 'endpoint.create'
			AND actor_kind = 'tenant' AND actor = 'acme'),
		(SELECT coalesce(sum(cardinality(event_ids)), 0) FROM outbox_deliveries WHERE endpoint_id = 'acme-invoices'),
		(SELECT count(*) FROM outbox_portal_sessions WHERE kind = 'tenant' AND principal = 'acme')
		FROM outbox_endpoints WHERE id = 'acme-invoices'`).Scan(&tenant, &denyPrivate, &audited, &delivered, &sessions); err != nil {
		t.Fatalf("the tutorial's endpoint made through the API: %v", err)
	}
	if tenant != "acme" || !denyPrivate || audited != 1 || delivered != 1 || sessions != 1 {
		t.Fatalf("the tutorial's acme-invoices: tenant %q, deny_private %v, %d audit records of its creation by tenant acme, "+
			"%d deliveries, %d portal sessions of acme; want acme, true, 1, 1 (the invoice), 1", tenant, denyPrivate, audited, delivered, sessions)
	}
}

// The parser finds what a reader sees as blocks, with their info strings, and the not-run
// marker with its reason: the positive control for the test above, which would pass on any
// page if the parser found nothing.
func TestDocsParseBlocks(t *testing.T) {
	page := "text\n```sql\nselect 1;\n```\n\n  ```sh not-run: needs a Kubernetes cluster\n  kubectl apply\n  ```\n```go\nx\n```\n"
	blocks, err := parseBlocks("p.md", page)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 || blocks[0].lang != "sql" || blocks[0].body != "select 1;" || blocks[1].lang != "sh" || blocks[2].lang != "go" {
		t.Fatalf("parsed %+v", blocks)
	}
	if r, skip := blocks[1].reason(); !skip || r != "needs a Kubernetes cluster" {
		t.Fatalf("not-run reason %q, %v", r, skip)
	}
	if _, skip := blocks[0].reason(); skip {
		t.Fatal("a plain sql block is marked not-run")
	}
	if _, err := parseBlocks("p.md", "```sh\nopen"); err == nil {
		t.Fatal("an unterminated block is accepted")
	}
}

// cliTree is the command tree as the reference documents it: no completion command, no
// "auto generated on <date>" line, so the pages are the same on every run.
func cliTree() *cobra.Command {
	root := newRootCmd()
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return root
}

// generateCLIRef writes the CLI reference, one page per command, into dir.
func generateCLIRef(t *testing.T, dir string) {
	t.Helper()
	if err := doc.GenMarkdownTree(cliTree(), dir); err != nil {
		t.Fatal(err)
	}
}

// docs/reference/cli is the command tree as cobra's generator writes it: a new command or flag,
// or a changed help text, fails here until the pages are regenerated with -update.
func TestDocsCLIReferenceIsCurrent(t *testing.T) {
	want := t.TempDir()
	generateCLIRef(t, want)
	dir := filepath.Join(repoRoot, cliRefDir)
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		generateCLIRef(t, dir)
		return
	}
	compareDirs(t, want, dir, "go test ./cmd/outbox-relay -run TestDocsCLIReferenceIsCurrent -update")
}

// compareDirs fails for every file of want that got differs from or lacks, and every file of
// got that want lacks.
func compareDirs(t *testing.T, want, got, fix string) {
	t.Helper()
	wantFiles, _ := filepath.Glob(filepath.Join(want, "*.md"))
	gotFiles, _ := filepath.Glob(filepath.Join(got, "*.md"))
	seen := map[string]bool{}
	for _, w := range wantFiles {
		name := filepath.Base(w)
		seen[name] = true
		wb, _ := os.ReadFile(w)
		gb, err := os.ReadFile(filepath.Join(got, name))
		if err != nil {
			t.Errorf("%s/%s is missing: run %s", cliRefDir, name, fix)
			continue
		}
		if !bytes.Equal(wb, gb) {
			t.Errorf("%s/%s is stale: run %s", cliRefDir, name, fix)
		}
	}
	for _, g := range gotFiles {
		if !seen[filepath.Base(g)] {
			t.Errorf("%s/%s documents no command: run %s", cliRefDir, filepath.Base(g), fix)
		}
	}
}

// Every flag of every command is documented by construction in the generated reference; this
// makes sure it has something to say: a help text, and a page that carries it.
func TestDocsEveryFlagHasHelp(t *testing.T) {
	dir := t.TempDir()
	generateCLIRef(t, dir)
	var check func(cmd *cobra.Command)
	check = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if !sub.IsAvailableCommand() {
				continue
			}
			name := strings.ReplaceAll(sub.CommandPath(), " ", "_") + ".md"
			page, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Errorf("no page for %s: %v", sub.CommandPath(), err)
				continue
			}
			sub.Flags().VisitAll(func(f *pflag.Flag) {
				if f.Name == "help" {
					return
				}
				if strings.TrimSpace(f.Usage) == "" {
					t.Errorf("%s --%s has no help text", sub.CommandPath(), f.Name)
				}
				if !bytes.Contains(page, []byte("--"+f.Name)) {
					t.Errorf("%s does not list --%s", name, f.Name)
				}
			})
			if strings.TrimSpace(sub.Short) == "" {
				t.Errorf("%s has no short description", sub.CommandPath())
			}
			check(sub)
		}
	}
	check(cliTree())
}

// The commands pages (run's, and the others') document every command, and every environment
// variable the CLI reads is documented there or in the generated reference.
func TestDocsCommandsPageNamesEveryCommand(t *testing.T) {
	var page string
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs/reference/commands*.md"))
	if err != nil || len(pages) < 3 {
		t.Fatalf("docs/reference/commands*.md: %d pages, %v", len(pages), err)
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		page += string(b)
	}
	for _, sub := range cliTree().Commands() {
		if !sub.IsAvailableCommand() {
			continue
		}
		if !strings.Contains(page, "| `"+sub.Name()) && !strings.Contains(page, "## `outbox-relay "+sub.Name()) {
			t.Errorf("docs/reference/commands*.md document no %s command (a row of a table, or a section)", sub.Name())
		}
	}
	for _, env := range []string{"DB_DSN", "WEBHOOK_URL", "WEBHOOK_SECRET", "WEBHOOK_SECRET_FILE", secretsKeyEnv, secretsKeyFileFlag.env} {
		if !strings.Contains(page, "`"+env+"`") {
			t.Errorf("docs/reference/commands*.md lack %s", env)
		}
	}
}

// metricsPage holds the series list between these markers, generated from the registry a relay
// builds (relay.RegisterMetrics).
const (
	metricsPage  = "docs/reference/metrics.md"
	metricsBegin = "<!-- BEGIN GENERATED: series list (go test ./cmd/outbox-relay -run TestDocsMetricsListIsCurrent -update) -->"
	metricsEnd   = "<!-- END GENERATED: series list -->"
)

// metricsList is the Markdown table of every outbox_relay_* family a relay registers: name,
// type, labels (with their values where the relay fixes them up front) and help.
func metricsList(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	relay.RegisterMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| series | type | labels | help |\n|---|---|---|---|\n")
	n := 0
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "outbox_relay_") {
			continue
		}
		n++
		values := map[string][]string{}
		var names []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if _, ok := values[l.GetName()]; !ok {
					names = append(names, l.GetName())
				}
				if !slices.Contains(values[l.GetName()], l.GetValue()) {
					values[l.GetName()] = append(values[l.GetName()], l.GetValue())
				}
			}
		}
		var labels []string
		for _, name := range names {
			l := "`" + name + "`"
			// The values a relay creates up front are the closed sets a user filters on; the
			// pipeline's name and the build's identity are the user's own.
			if name != "pipeline" && f.GetName() != "outbox_relay_build_info" {
				vs := slices.Clone(values[name])
				slices.Sort(vs)
				l += " (" + strings.Join(vs, ", ") + ")"
			}
			labels = append(labels, l)
		}
		help := strings.ReplaceAll(f.GetHelp(), "|", `\|`)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.GetName(), strings.ToLower(f.GetType().String()),
			strings.Join(labels, ", "), help)
	}
	if n < 10 {
		t.Fatalf("relay.RegisterMetrics registered %d outbox_relay_* families: the generator is broken", n)
	}
	return b.String()
}

// The series list of docs/reference/metrics.md is the registry's: a series added, renamed,
// relabelled or re-described fails here until the page is regenerated with -update.
func TestDocsMetricsListIsCurrent(t *testing.T) {
	path := filepath.Join(repoRoot, metricsPage)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start, end := strings.Index(page, metricsBegin), strings.Index(page, metricsEnd)
	if start < 0 || end < start {
		t.Fatalf("%s lacks the markers %q ... %q", metricsPage, metricsBegin, metricsEnd)
	}
	want := metricsList(t)
	got := page[start+len(metricsBegin)+1 : end]
	if got == want {
		return
	}
	if *update {
		page = page[:start+len(metricsBegin)] + "\n" + want + page[end:]
		if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the series list of %s is stale: run go test ./cmd/outbox-relay -run TestDocsMetricsListIsCurrent -update", metricsPage)
}

var (
	docLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	docHeading = regexp.MustCompile(`^#{1,6} (.+)$`)
	slugDrop   = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// headingSlug is the anchor GitHub gives a heading.
func headingSlug(h string) string {
	return strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
}

// docAnchor is an explicit anchor: a page keeps the anchors of sections that moved to another
// page this way, so that links from elsewhere still land next to a link to where they went.
var docAnchor = regexp.MustCompile(`<a id="([^"]+)"></a>`)

// pageAnchors returns the anchors of a page's headings and its explicit anchors (outside code
// blocks).
func pageAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		if m := docHeading.FindStringSubmatch(line); m != nil {
			anchors[headingSlug(m[1])] = true
		}
		for _, m := range docAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
	}
	return anchors
}

// Every relative link of README.md and docs/ reaches a file, and a heading of it when it names
// one: moving a section cannot leave a reader at a dead end.
func TestDocsLinksResolve(t *testing.T) {
	pages := docPages(t)
	anchors := map[string]map[string]bool{}
	texts := map[string]string{}
	for _, p := range pages {
		b, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			t.Fatal(err)
		}
		texts[p] = string(b)
		anchors[p] = pageAnchors(string(b))
	}
	checked := 0
	for _, p := range pages {
		for _, m := range docLink.FindAllStringSubmatch(texts[p], -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := p
			if path != "" {
				file = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p), path)))
			}
			checked++
			if _, err := os.Stat(filepath.Join(repoRoot, file)); err != nil {
				t.Errorf("%s links to %s: no such file", p, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchors[file][anchor] {
				t.Errorf("%s links to %s: %s has no heading #%s", p, target, file, anchor)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d links: the link pattern is broken", checked)
	}
	checkAssetLinks(t, anchors)
}

// repoURL is how the shipped assets (the alerts' runbook_url) link into this repository's docs.
const repoURL = "https://github.com/outbox-relay/outbox-relay/blob/main/"

// checkAssetLinks checks that every link of the deploy assets into the docs (each alert's
// runbook_url) reaches a page and a heading of it.
func checkAssetLinks(t *testing.T, anchors map[string]map[string]bool) {
	t.Helper()
	n := 0
	for _, asset := range []string{"deploy/prometheus/alerts.yml", "deploy/grafana/outbox-relay.json"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, asset))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(regexp.QuoteMeta(repoURL)+`([^\s"'#)]+)(?:#([^\s"')]+))?`).FindAllStringSubmatch(string(b), -1) {
			n++
			page, anchor := m[1], m[2]
			if _, err := os.Stat(filepath.Join(repoRoot, page)); err != nil {
				t.Errorf("%s links to %s: no such file", asset, m[0])
				continue
			}
			if anchor != "" && strings.HasSuffix(page, ".md") && !anchors[page][anchor] {
				t.Errorf("%s links to %s: %s has no heading #%s", asset, m[0], page, anchor)
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d links in the deploy assets: every alert links to its runbook", n)
	}
}

// No page of docs/ passes 20 KB: a reader finds a task on a page of its own (a longer one is
// split by task, keeping its anchors: see pageAnchors).
func TestDocsPagesStayUnder20KB(t *testing.T) {
	const most = 20 << 10
	pages := docPages(t)
	for _, p := range pages {
		if !strings.HasPrefix(p, "docs/") {
			continue
		}
		fi, err := os.Stat(filepath.Join(repoRoot, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > most {
			t.Errorf("%s is %d bytes, over 20 KB: split it by task (move sections to pages of their own, and keep their "+
				"anchors on this one with <a id=\"...\"></a> next to a link to where they went)", p, fi.Size())
		}
	}
	if len(pages) < 20 {
		t.Fatalf("found %d pages: the page walker is broken", len(pages))
	}
}

// The known-answer vectors of the webhook reference are what package signature computes, so a
// consumer written from the page alone agrees with the relay.
func TestDocsWebhookVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs/reference/webhook.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	x, _ := signature.Keys(signature.XSignature, []string{"topsecret"})
	sw, err := signature.Keys(signature.StandardWebhooks, []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"`X-Signature: " + string(signature.AppendX(nil, x, 1700000000, []byte(`{"order_id":42}`))) + "`",
		"`webhook-signature: " + string(signature.AppendStandard(nil, sw, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))) + "`",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("docs/reference/webhook.md does not show %s", want)
		}
	}
}
