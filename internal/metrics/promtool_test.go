package metrics_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// unitTestsPath are the promtool unit tests of the alerts (see its header).
var unitTestsPath = filepath.Join("testdata", "alerts_test.yml")

// promtool returns the path of promtool. It skips the test, saying how to get it, when it is
// not installed, except in CI (CI set, as .ci/run sets it), which installs Debian's prometheus
// package for it and must never skip.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("promtool is not installed, and CI must run these tests: .ci/run installs it (apt-get install prometheus): %v", err)
	}
	t.Skip("promtool is not installed: apt-get install prometheus (Debian's package has it) to run the alerts' checks " +
		"and unit tests; CI runs them")
	return ""
}

func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The shipped rules pass `promtool check rules` (syntax, PromQL, annotation templates).
func TestAlertRulesPassPromtoolCheck(t *testing.T) {
	runPromtool(t, promtool(t), "check", "rules", alertsPath)
}

// Each alert fires when it should and stays quiet when it should (testdata/alerts_test.yml, run
// by `promtool test rules` against the shipped rules without their annotations), and every
// alert has both kinds of case there.
func TestAlertRulesUnitTests(t *testing.T) {
	bin := promtool(t)
	dir := t.TempDir()
	writeRulesWithoutAnnotations(t, filepath.Join(dir, "alerts.yml"))
	tests, err := os.ReadFile(unitTestsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, bin, "test", "rules", filepath.Join(dir, "alerts_test.yml"))
}

// writeRulesWithoutAnnotations writes the shipped rules to path with every rule's annotations
// removed (promtool compares all of them; the unit tests check labels and timing).
func writeRulesWithoutAnnotations(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	groups, _ := doc["groups"].([]any)
	stripped := 0
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			delete(r.(map[string]any), "annotations")
			stripped++
		}
	}
	if stripped == 0 {
		t.Fatalf("%s: no rules found", alertsPath)
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// unitTests is the part of a promtool test file the coverage check reads.
type unitTests struct {
	Tests []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// Every alert of the shipped rules is unit-tested firing and not firing; a test of an alert
// that no longer exists fails too. (Runs without promtool.)
func TestEveryAlertIsUnitTestedFiringAndNot(t *testing.T) {
	data, err := os.ReadFile(unitTestsPath)
	if err != nil {
		t.Fatal(err)
	}
	var ut unitTests
	if err := yaml.Unmarshal(data, &ut); err != nil {
		t.Fatal(err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range ut.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			if !firing[r.Alert] {
				t.Errorf("%s: no unit test of %s firing", unitTestsPath, r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s: no unit test of %s not firing", unitTestsPath, r.Alert)
			}
		}
	}
	for name := range firing {
		if !alerts[name] {
			t.Errorf("%s tests %s, which %s does not define", unitTestsPath, name, alertsPath)
		}
	}
	if len(alerts) < 10 {
		t.Fatalf("read %d alerts: the rules parser is broken", len(alerts))
	}
}

// Every query of the dashboard parses as PromQL: each becomes a recording rule of a scratch
// rule file (Grafana's variables replaced by values) that `promtool check rules` reads.
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	_, panels := loadDashboard(t)
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$job", "outbox-relay",
		"$instance", ".+", "$pipeline", ".+")
	var rules []map[string]string
	for _, p := range panels {
		for _, tg := range p.Targets {
			rules = append(rules, map[string]string{"record": "dashboard:query", "expr": vars.Replace(tg.Expr)})
		}
	}
	if len(rules) < 30 {
		t.Fatalf("found %d queries: the dashboard reader is broken", len(rules))
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.yml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, bin, "check", "rules", path)
}
