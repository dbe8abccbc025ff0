package main

import (
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// repoRoot is where docker-compose.yml and the Dockerfile live, seen from this package.
const repoRoot = "../.."

// The deployment files cannot be run here (no Docker engine), so these tests hold them to what
// the code accepts: every relay command parses against the real cobra tree and passes the same
// validation as `run`, ports and URLs line up across services, and the image is non-root.

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"` // exec form only: the image has no shell
	Environment map[string]string `yaml:"environment"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn dependsOn `yaml:"depends_on"`
	Volumes   []string  `yaml:"volumes"`
	Ports     []string  `yaml:"ports"`
	// Profiles, if any, keep the service out of a plain `docker compose up` (the broker
	// variants: --profile nats, --profile kafka).
	Profiles []string `yaml:"profiles"`
}

// dependsOn is compose's depends_on in either form: a list of names or a map of conditions.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, name := range names {
			(*d)[name] = "service_started"
		}
		return nil
	}
	var m map[string]struct {
		Condition string `yaml:"condition"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	for name, c := range m {
		(*d)[name] = c.Condition
	}
	return nil
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v (commands must be lists: the image has no shell)", err)
	}
	if len(f.Services) == 0 {
		t.Fatal("docker-compose.yml has no services")
	}
	return f
}

var interpolation = regexp.MustCompile(`\$\{([A-Z_]+):-([^}]*)\}`)

// expand resolves compose's ${VAR:-default} to its default, so the test does not depend on the
// environment it runs in.
func expand(s string) string { return interpolation.ReplaceAllString(s, "$2") }

// ourImage reports whether the service runs the image the Dockerfile builds.
func (s composeService) ourImage() bool { return s.Build != nil || s.Image == "outbox-relay:local" }

// runsRelay reports whether the service runs the outbox-relay binary (the image's entrypoint).
func (s composeService) runsRelay() bool { return s.ourImage() && len(s.Entrypoint) == 0 }

// setServiceEnv makes the service's environment the process's, with every variable the relay
// reads cleared first, so that the configuration in the file is judged alone.
func setServiceEnv(t *testing.T, s composeService) {
	t.Helper()
	for _, f := range []envFlag{dsnFlag, urlFlag, secretFlag, secretFileFlag, natsURLFlag, kafkaBrokersFlag, kafkaPassFlag} {
		t.Setenv(f.env, "")
	}
	for k, v := range s.Environment {
		t.Setenv(k, expand(v))
	}
}

func parseCommand(t *testing.T, name string, args []string) *cobra.Command {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("service %s has no command: the image's default would run `run` without its flags", name)
	}
	cmd, rest, err := newRootCmd().Find(args)
	if err != nil || cmd.Name() != args[0] {
		t.Fatalf("service %s: %q is not an outbox-relay subcommand (%v)", name, args[0], err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("service %s: command %q: %v", name, args, err)
	}
	if pos := cmd.Flags().Args(); len(pos) > 0 {
		t.Fatalf("service %s: %s takes no arguments, got %q", name, cmd.Name(), pos)
	}
	return cmd
}

func TestComposeRelayCommandsAreAcceptedByTheCLI(t *testing.T) {
	f := loadCompose(t)
	var ran []string
	for name, s := range f.Services {
		if !s.runsRelay() {
			continue
		}
		cmd := parseCommand(t, name, s.Command)
		if len(s.Profiles) == 0 {
			ran = append(ran, cmd.Name())
		}
		setServiceEnv(t, s)
		switch cmd.Name() {
		case "run":
			if _, err := runConfig(cmd.Flags()); err != nil {
				t.Errorf("service %s: `run` would refuse its configuration: %v", name, err)
			}
		case "migrate":
			if _, err := requireDSN(cmd.Flags()); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		}
	}
	slices.Sort(ran)
	if !slices.Equal(ran, []string{"migrate", "run"}) {
		t.Errorf("relay services run %v, want one migrate and one run", ran)
	}
}

// serviceRunning returns the name and definition of the service running subcommand sub.
func serviceRunning(t *testing.T, f composeFile, sub string) (string, composeService) {
	t.Helper()
	for name, s := range f.Services {
		if s.runsRelay() && len(s.Command) > 0 && s.Command[0] == sub && len(s.Profiles) == 0 {
			return name, s
		}
	}
	t.Fatalf("no service runs outbox-relay %s", sub)
	return "", composeService{}
}

func TestComposeServicesFitTogether(t *testing.T) {
	f := loadCompose(t)
	pg, ok := f.Services["postgres"]
	if !ok {
		t.Fatal("no postgres service")
	}
	if !slices.Contains(pg.Command, "wal_level=logical") {
		t.Errorf("postgres command %q does not set wal_level=logical: the relay refuses to start without it", pg.Command)
	}
	if pg.Healthcheck == nil || !slices.Contains(pg.Healthcheck.Test, "pg_isready") {
		t.Error("postgres has no pg_isready healthcheck, so migrate could start before it accepts connections")
	}

	migrate, ms := serviceRunning(t, f, "migrate")
	if ms.DependsOn["postgres"] != "service_healthy" {
		t.Errorf("%s should wait for postgres to be healthy, depends_on = %v", migrate, ms.DependsOn)
	}
	relayName, rs := serviceRunning(t, f, "run")
	if rs.DependsOn[migrate] != "service_completed_successfully" {
		t.Errorf("%s should start after %s completed, depends_on = %v", relayName, migrate, rs.DependsOn)
	}

	// The relay's webhook is the consumer's listener, signed with the consumer's secret.
	hook, err := url.Parse(expand(rs.Environment[urlFlag.env]))
	if err != nil {
		t.Fatal(err)
	}
	cs, ok := f.Services[hook.Hostname()]
	if !ok {
		t.Fatalf("%s=%s names no service", urlFlag.env, hook)
	}
	// The consumer is a separate program (examples/consumer): its flags are checked against its
	// source, where each is defined as fs.<Type>("name", ...).
	src, err := os.ReadFile(filepath.Join(repoRoot, "examples/consumer/main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range cs.Command {
		name, isFlag := strings.CutPrefix(arg, "--")
		name, _, _ = strings.Cut(name, "=")
		if isFlag && !regexp.MustCompile(`fs\.\w+\("`+regexp.QuoteMeta(name)+`"`).Match(src) {
			t.Errorf("consumer command %q: examples/consumer defines no --%s", cs.Command, name)
		}
	}
	listen := flagValue(cs.Command, "--listen")
	_, listenPort, err := net.SplitHostPort(listen)
	if err != nil || hook.Port() != listenPort {
		t.Errorf("relay posts to port %s, consumer listens on %q", hook.Port(), listen)
	}
	if host, _, _ := net.SplitHostPort(listen); host == "127.0.0.1" || host == "localhost" {
		t.Errorf("consumer listens on %s, unreachable from the relay's container", listen)
	}
	if a, b := expand(rs.Environment[secretFlag.env]), expand(cs.Environment[secretFlag.env]); a == "" || a != b {
		t.Errorf("relay and consumer secrets differ (%q, %q): every delivery would get 401", a, b)
	}

	// Healthchecks ask /readyz on the port each service serves it on.
	metricsAddr := flagValue(rs.Command, "--metrics-addr")
	_, metricsPort, _ := net.SplitHostPort(metricsAddr)
	for name, want := range map[string]string{relayName: metricsPort, hook.Hostname(): listenPort} {
		s := f.Services[name]
		if s.Healthcheck == nil || len(s.Healthcheck.Test) < 3 {
			t.Errorf("%s has no healthcheck", name)
			continue
		}
		probe, err := url.Parse(s.Healthcheck.Test[len(s.Healthcheck.Test)-1])
		if err != nil || probe.Path != "/readyz" || probe.Port() != want {
			t.Errorf("%s healthcheck %q: want GET /readyz on port %s", name, s.Healthcheck.Test, want)
		}
	}

	// Prometheus scrapes the relay's metrics port, with the rule file next to its config.
	ps, ok := f.Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service")
	}
	if !slices.Contains(ps.Volumes, "./deploy/prometheus:/etc/prometheus:ro") {
		t.Errorf("prometheus volumes %q do not mount deploy/prometheus", ps.Volumes)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &prom); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	var targets []string
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	if want := net.JoinHostPort(relayName, metricsPort); !slices.Contains(targets, want) {
		t.Errorf("prometheus scrapes %q, want %s", targets, want)
	}
	if !slices.Contains(prom.RuleFiles, "alerts.yml") {
		t.Errorf("prometheus rule_files %q lack alerts.yml", prom.RuleFiles)
	}
}

// flagValue returns the value following flag in args, or given as flag=value.
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// instruction is one line of the Dockerfile, continuation lines joined.
type instruction struct{ op, args string }

func loadDockerfile(t *testing.T) []instruction {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(op), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

func TestDockerfileFinalStageIsStaticAndNonRoot(t *testing.T) {
	ins := loadDockerfile(t)
	last := -1
	for i, in := range ins {
		if in.op == "FROM" {
			last = i
		}
	}
	if last < 1 {
		t.Fatal("Dockerfile is not multi-stage: the Go toolchain would ship in the image")
	}
	final := ins[last:]
	base := strings.Fields(final[0].args)[0]
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("final stage FROM %s, want distroless static or scratch", base)
	}
	var user, entrypoint string
	var exposed, copied []string
	for _, in := range final {
		switch in.op {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			var ep []string
			if err := json.Unmarshal([]byte(in.args), &ep); err != nil {
				t.Errorf("ENTRYPOINT %s is not in exec form: %v", in.args, err)
			} else {
				entrypoint = ep[0]
			}
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(in.args)...)
		case "COPY":
			copied = append(copied, strings.Fields(in.args)...)
		}
	}
	switch name, _, _ := strings.Cut(user, ":"); {
	case user == "" && !strings.HasSuffix(base, ":nonroot"):
		t.Error("final stage sets no USER and its base is not :nonroot: the relay would run as root")
	case name == "root" || name == "0":
		t.Errorf("final stage runs as USER %s", user)
	}
	addr := newRunCmd().Flags().Lookup("metrics-addr").DefValue
	if _, port, _ := net.SplitHostPort(addr); !slices.Contains(exposed, port) {
		t.Errorf("EXPOSE %q lacks the default metrics port %s", exposed, port)
	}

	// Every binary compose runs is built and copied into the final stage.
	var build strings.Builder
	for _, in := range ins[:last] {
		if in.op == "RUN" {
			build.WriteString(in.args + " ")
		}
	}
	for _, x := range []string{"-X main.version=", "-X main.commit=", "CGO_ENABLED=0", "-trimpath"} {
		if !strings.Contains(build.String(), x) && !(x == "CGO_ENABLED=0" && dockerEnvSets(ins[:last], x)) {
			t.Errorf("build stage lacks %s", x)
		}
	}
	_, _ = version, commit // the variables the -X flags set
	binaries := []string{entrypoint}
	for _, s := range loadCompose(t).Services {
		if !s.ourImage() {
			continue
		}
		binaries = append(binaries, s.Entrypoint...)
		if s.Healthcheck != nil && len(s.Healthcheck.Test) > 1 {
			binaries = append(binaries, s.Healthcheck.Test[1])
		}
	}
	slices.Sort(binaries)
	for _, bin := range slices.Compact(binaries) {
		if !strings.HasPrefix(bin, "/usr/local/bin/") {
			continue
		}
		name := filepath.Base(bin)
		if !strings.Contains(build.String(), "-o /out/"+name+" ") || !slices.Contains(copied, "/out/"+name) {
			t.Errorf("%s is used but not built to /out/%s and copied into the final stage", bin, name)
		}
	}
	for _, pkg := range regexp.MustCompile(`\s(\./[\w./-]+)`).FindAllStringSubmatch(build.String(), -1) {
		if st, err := os.Stat(filepath.Join(repoRoot, pkg[1])); err != nil || !st.IsDir() {
			t.Errorf("the Dockerfile builds %s, which is not a directory", pkg[1])
		}
	}
}

func dockerEnvSets(ins []instruction, kv string) bool {
	for _, in := range ins {
		if in.op == "ENV" && strings.Contains(in.args, kv) {
			return true
		}
	}
	return false
}

func TestDockerignoreKeepsTheSources(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum", "cmd/outbox-relay/main.go", "migrations/00001_init.sql",
		"examples/consumer/main.go", "deploy/probe/main.go"}
	for _, line := range strings.Split(string(b), "\n") {
		pattern := strings.TrimSpace(line)
		if pattern == "" || strings.HasPrefix(pattern, "#") || strings.HasPrefix(pattern, "!") {
			continue
		}
		for _, path := range needed {
			for p := path; p != "."; p = filepath.Dir(p) {
				if ok, _ := filepath.Match(pattern, p); ok {
					t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", pattern, path)
				}
			}
		}
	}
}

// Images from a registry are pinned by exact version (or digest), so `docker compose up` runs
// what was tested; every host port can be moved by an environment variable when it is taken.
func TestComposeImagesArePinnedAndHostPortsConfigurable(t *testing.T) {
	// PostgreSQL's releases are MAJOR.MINOR (15.18), Go's and Prometheus's MAJOR.MINOR.PATCH:
	// golang:1.26 would float to each patch release.
	pinned := regexp.MustCompile(`^([^:@]*/)?(postgres:\d+\.\d+|[^:@]+:v?\d+\.\d+\.\d+)(-[\w.]+)?(@sha256:[0-9a-f]{64})?$|@sha256:[0-9a-f]{64}$`)
	hostPort := regexp.MustCompile(`^\$\{[A-Z][A-Z0-9_]*:-\d+\}:\d+$`)
	for name, s := range loadCompose(t).Services {
		if !s.ourImage() && !pinned.MatchString(s.Image) {
			t.Errorf("service %s: image %q is not pinned to an exact version (name:X.Y.Z) or digest", name, s.Image)
		}
		for _, p := range s.Ports {
			if !hostPort.MatchString(p) {
				t.Errorf("service %s: port %q: want \"${NAME:-default}:container\" so the host port can be changed", name, p)
			}
		}
	}
	for _, in := range loadDockerfile(t) {
		if in.op != "FROM" {
			continue
		}
		base := strings.Fields(in.args)[0]
		// distroless has no version tags: a digest is its only pin (see the Dockerfile's comment).
		if !pinned.MatchString(base) && !strings.HasPrefix(base, "gcr.io/distroless/") {
			t.Errorf("Dockerfile FROM %s is not pinned to an exact version or digest", base)
		}
	}
}
