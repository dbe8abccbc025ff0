package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testOnlyModules are what the proofs and the broker, manifest and SDK tests need and the
// library does not: they belong to the tests module (tests/go.mod). Required by the root
// go.mod, every service that imports outbox or inbox would get them in its module graph.
var testOnlyModules = []string{
	"github.com/nats-io/nats-server/",
	"github.com/twmb/franz-go/pkg/kfake",
	"github.com/twmb/franz-go/pkg/kadm",
	"k8s.io/",
	"sigs.k8s.io/yaml",
	"github.com/prometheus-operator/",
	"github.com/cloudevents/sdk-go/",
}

func isTestOnlyModule(path string) bool {
	return slices.ContainsFunc(testOnlyModules, func(p string) bool { return strings.HasPrefix(path, p) })
}

// goModRequires reads the module paths that the root go.mod requires (direct and indirect).
func goModRequires(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	inBlock := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.SplitN(sc.Text(), "//", 2)[0])
		switch {
		case len(fields) == 0:
		case inBlock && fields[0] == ")":
			inBlock = false
		case inBlock:
			out = append(out, fields[0])
		case fields[0] == "require" && len(fields) > 1 && fields[1] == "(":
			inBlock = true
		case fields[0] == "require" && len(fields) > 1:
			out = append(out, fields[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("read no requirement from go.mod: the parser is broken")
	}
	return out
}

// The library's module requires none of the test-only modules: a test or proof that needs one
// lives in the tests module (tests/; README: Testing).
func TestRootModuleRequiresNoTestOnlyModule(t *testing.T) {
	reqs := goModRequires(t)
	// Positive control: the parser sees what the library does need.
	if !slices.Contains(reqs, "github.com/jackc/pgx/v5") {
		t.Fatalf("go.mod requirements %v lack pgx: the parser is broken", reqs)
	}
	var bad []string
	for _, r := range reqs {
		if isTestOnlyModule(r) {
			bad = append(bad, r)
		}
	}
	if len(bad) > 0 {
		t.Errorf("the root go.mod requires %s: move the code that imports it to the tests module (tests/), "+
			"then run `go mod tidy` in both", strings.Join(bad, ", "))
	}
	// Nor does a dependency bring one into the module graph an importer gets.
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs `go list`: put the go command on PATH: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-m", "-f", "{{.Path}}", "all").Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	graph := strings.Fields(string(out))
	if !slices.Contains(graph, "github.com/jackc/pgx/v5") {
		t.Fatalf("go list -m all lacks pgx: %v", graph)
	}
	for _, m := range graph {
		if isTestOnlyModule(m) {
			t.Errorf("%s is in the root's module graph (go mod graph | grep %s names who requires it)", m, m)
		}
	}
}

func TestIsTestOnlyModule(t *testing.T) {
	for path, want := range map[string]bool{
		"github.com/nats-io/nats-server/v2": true,
		"github.com/nats-io/nats.go":        false, // natsdest's client
		"github.com/twmb/franz-go":          false, // kafkadest's client
		"github.com/twmb/franz-go/pkg/kadm": true,
		"k8s.io/api":                        true,
		"sigs.k8s.io/yaml":                  true,
		"github.com/cloudevents/sdk-go/v2":  true,
	} {
		if got := isTestOnlyModule(path); got != want {
			t.Errorf("isTestOnlyModule(%s) = %v, want %v", path, got, want)
		}
	}
}

// The go line is the lowest the module can have: the highest go line among the modules of the
// packages it builds, tests included (its own code needs less: go1.24, for strings.SplitSeq;
// its tests go1.25, for sync.WaitGroup.Go). A higher one
// (a patch release, say) would force that toolchain on every importer; `toolchain` is the
// place for the version this repository builds with.
func TestGoLineIsTheLowestTheBuildNeeds(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs `go list`: put the go command on PATH: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-test", "-f", "{{with .Module}}{{if not .Main}}{{.GoVersion}}{{end}}{{end}}",
		"../../...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	need := "1.0"
	for _, v := range strings.Fields(string(out)) {
		if compareGo(v, need) > 0 {
			need = v
		}
	}
	line, err := exec.Command(gobin, "list", "-m", "-f", "{{.GoVersion}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	if got := strings.TrimSpace(string(line)); compareGo(got, need) != 0 {
		t.Fatalf("go.mod says go %s; the dependencies need go %s: write `go %s` (and the repository's own "+
			"version in the toolchain line)", got, need, need)
	}
}

// compareGo compares Go versions such as 1.26, 1.26.0 and 1.26.8 (1.26 == 1.26.0).
func compareGo(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for len(pa) < 3 {
		pa = append(pa, "0")
	}
	for len(pb) < 3 {
		pb = append(pb, "0")
	}
	for i := range 3 {
		x, y := atoiOr0(pa[i]), atoiOr0(pb[i])
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func atoiOr0(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func TestCompareGo(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"1.26", "1.26.0", 0}, {"1.26.8", "1.26.0", 1}, {"1.25", "1.26.0", -1}, {"1.9", "1.10", -1}} {
		if got := compareGo(c.a, c.b); got != c.want {
			t.Errorf("compareGo(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// A program that imports only outbox and inbox links no broker client, no part of
// OpenTelemetry (README: Testing; docs/operations/tracing.md) and no migration framework.
func TestOutboxAndInboxLinkNoBrokerClient(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs `go list`: put the go command on PATH: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "../../outbox", "../../inbox").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	// Positive control: the list is the packages' dependencies.
	if !slices.Contains(deps, "github.com/jackc/pgx/v5") {
		t.Fatalf("go list -deps of outbox and inbox lacks pgx: %v", deps)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/nats-io/") || strings.HasPrefix(p, "github.com/twmb/franz-go") {
			t.Errorf("outbox or inbox links %s: keep broker clients in destination/natsdest and destination/kafkadest", p)
		}
		if strings.HasPrefix(p, "github.com/pressly/goose") || p == "github.com/outbox-relay/outbox-relay/migrations" {
			t.Errorf("outbox or inbox links %s: a program that only mounts the inbox links no migration framework "+
				"(the inbox's migration is inbox/inboxmigrate)", p)
		}
		if strings.HasPrefix(p, "go.opentelemetry.io/") || strings.HasPrefix(p, "google.golang.org/grpc") {
			t.Errorf("outbox or inbox links %s: tracing is the relay's (internal/tracing), not the producer's or the consumer's", p)
		}
	}
	// Positive control of the second check: the inbox's migration does link it.
	out, err = exec.Command(gobin, "list", "-deps", "../../inbox/inboxmigrate").Output()
	if err != nil || !strings.Contains(string(out), "github.com/pressly/goose") {
		t.Fatalf("go list -deps of inbox/inboxmigrate lacks goose (%v): the check above proves nothing", err)
	}
}
