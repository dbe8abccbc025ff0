package main

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/internal/settings"
)

var update = flag.Bool("update", false, "rewrite the generated pages under docs/ (the configuration reference, the run table of the commands page, the CLI reference, the metrics list) instead of checking them")

const (
	referencePath = "../../docs/reference/configuration.md"
	commandsPath  = "../../docs/reference/commands.md"
	runBegin      = "<!-- BEGIN run flags: generated from internal/settings; go test ./cmd/outbox-relay -run TestConfigurationReference -update -->\n"
	runEnd        = "<!-- END run flags -->"
)

// The settings table is the one place of every run flag's default and help: each flag of
// `outbox-relay run` has a row and shows its default and help in --help, each row with a flag
// has one, each YAML key is one the pipelines file takes; and the configuration reference and
// the commands page's run table are what the table generates (-update rewrites them).
func TestConfigurationReference(t *testing.T) {
	fs := newRunCmd().Flags()
	rows := map[string]settings.Setting{}
	for _, s := range settings.Run {
		if s.Flag == "" {
			continue
		}
		rows[s.Flag] = s
		f := fs.Lookup(s.Flag)
		if f == nil {
			t.Errorf("settings has --%s, which `outbox-relay run` lacks: drop the row or add the flag", s.Flag)
			continue
		}
		want := pflag.NewFlagSet("want", pflag.ContinueOnError)
		addSetting(want, s.Flag)
		if w := want.Lookup(s.Flag); f.DefValue != w.DefValue || f.Usage != s.Help {
			t.Errorf("--%s: --help shows default %q and %q; the table says %q and %q", s.Flag, f.DefValue, f.Usage, w.DefValue, s.Help)
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := rows[f.Name]; !ok && f.Name != "help" {
			t.Errorf("--%s has no row in internal/settings: add one (its default, help and meaning)", f.Name)
		}
	})
	checkYAMLKeys(t)
	checkGenerated(t, referencePath, "", "", settings.Reference())
	checkGenerated(t, commandsPath, runBegin, runEnd, settings.RunTable())
}

// checkYAMLKeys has the pipelines file parse every YAML key of the table: a key it does not
// know fails as an unknown key.
func checkYAMLKeys(t *testing.T) {
	t.Helper()
	env := func(string) (string, bool) { return "", false }
	if _, err := pipeconf.Parse([]byte("pipelines:\n  - name: p\n    no_such_key: x\n"), env, os.ReadFile); err == nil ||
		!strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("an unknown key parses without an unknown-key error (%v): this check would prove nothing", err)
	}
	for _, s := range settings.Run {
		if section, key, ok := strings.Cut(s.YAML, "."); ok && (section == "egress" || section == "otel") { // a section at the file's top
			doc := section + ":\n  " + key + ": x\npipelines:\n  - name: p\n"
			if _, err := pipeconf.Parse([]byte(doc), env, os.ReadFile); err != nil && strings.Contains(err.Error(), "unknown key") {
				t.Errorf("YAML key %s of --%s: the pipelines file does not know it at its top: %v", s.YAML, s.Flag, err)
			}
			continue
		}
		if s.YAML == "" || s.YAML == "dsn" || s.YAML == "schema" || s.YAML == "delivery_log_retention" ||
			strings.HasPrefix(s.YAML, "operator_webhook.") { // keys at the file's top
			continue
		}
		parts := strings.Split(s.YAML, ".")
		doc, indent := "pipelines:\n  - name: p\n", "    "
		for _, p := range parts[:len(parts)-1] {
			doc += indent + p + ":\n"
			indent += "  "
		}
		doc += indent + parts[len(parts)-1] + ": x\n"
		_, err := pipeconf.Parse([]byte(doc), env, os.ReadFile)
		if err != nil && strings.Contains(err.Error(), "unknown key") {
			t.Errorf("YAML key %s of --%s: the pipelines file does not know it: %v", s.YAML, s.Flag, err)
		}
	}
}

// checkGenerated compares the text between begin and end in path (the whole file when begin is
// empty) with want, or rewrites it with -update.
func checkGenerated(t *testing.T, path, begin, end, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !(*update && os.IsNotExist(err)) {
		t.Fatal(err)
	}
	file, got, rest := "", string(b), ""
	if begin != "" {
		i, j := strings.Index(got, begin), strings.Index(got, end)
		if i < 0 || j < i {
			t.Fatalf("%s lacks the generated block's markers %q ... %q", path, begin, end)
		}
		file, got, rest = got[:i+len(begin)], got[i+len(begin):j], got[j:]
	}
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(file+want+rest), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is not what internal/settings generates: run go test ./cmd/outbox-relay -run TestConfigurationReference -update", path)
}
