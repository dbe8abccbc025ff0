package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/relay"
)

// The shipped operations assets, relative to this package.
var (
	dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "outbox-relay.json")
	alertsPath    = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")
)

// runbookBase is where each alert's runbook_url points, followed by the alert's name in lower
// case: its heading in docs/operations/alerts.md.
const runbookBase = "https://github.com/outbox-relay/outbox-relay/blob/main/docs/operations/alerts.md#"

// series is one registered metric family: its type and label names.
type series struct {
	typ    dto.MetricType
	labels []string
}

// registered returns every family a relay registers (relay.RegisterMetrics: the wiring's, the
// stream's, the publisher's and the marker's), by name. Every collector must export at least one
// series before its first write (a vector's children created up front), so that a dashboard
// reads 0 rather than no data and every family shows in Gather; a collector added later is
// checked without touching this test.
func registered(t *testing.T) map[string]series {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := &recording{Registerer: reg}
	relay.RegisterMetrics(rec)
	if len(rec.all) == 0 {
		t.Fatal("relay.RegisterMetrics registered nothing")
	}
	for _, c := range rec.all {
		if testutil.CollectAndCount(c) == 0 {
			t.Errorf("%s exports no series before its first write: create its children up front", describe(c))
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := make(map[string]series, len(families))
	// A family that exports nothing until there is something to say (a collector of constant
	// metrics, such as the per-endpoint series of the endpoints in trouble) is known by its
	// descriptor: its name and variable labels, a gauge.
	for _, c := range rec.all {
		for _, d := range descs(c) {
			name, labels := parseDesc(d)
			if name != "" {
				out[name] = series{typ: dto.MetricType_GAUGE, labels: append(labels, "pipeline")}
			}
		}
	}
	for _, f := range families {
		s := series{typ: f.GetType()}
		if len(f.GetMetric()) > 0 {
			for _, l := range f.GetMetric()[0].GetLabel() {
				s.labels = append(s.labels, l.GetName())
			}
			sort.Strings(s.labels)
		}
		out[f.GetName()] = s
	}
	return out
}

// recording is a Registerer that keeps every collector registered through it (a pipeline's
// collectors as wrapped with its label).
type recording struct {
	prometheus.Registerer
	all []prometheus.Collector
}

func (r *recording) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.all = append(r.all, c)
	return nil
}

func (r *recording) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// describe names a collector by its descriptors, for an error message.
func describe(c prometheus.Collector) string {
	var out []string
	for _, d := range descs(c) {
		out = append(out, d.String())
	}
	return strings.Join(out, ", ")
}

// descs returns a collector's descriptors.
func descs(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// parseDesc reads a descriptor's name and variable labels from its String (Desc exports no
// accessor for them).
func parseDesc(d *prometheus.Desc) (name string, labels []string) {
	m := descName.FindStringSubmatch(d.String())
	if m == nil {
		return "", nil
	}
	if l := descLabels.FindStringSubmatch(d.String()); l != nil && l[1] != "" {
		for _, v := range strings.Split(l[1], ",") {
			labels = append(labels, strings.TrimSpace(v))
		}
	}
	sort.Strings(labels)
	return m[1], labels
}

// identifier is a PromQL metric name or label name token.
var identifier = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)

// relayNames returns the outbox_relay_ identifiers in text, sorted and unique.
func relayNames(text string) []string {
	var names []string
	for _, tok := range identifier.FindAllString(text, -1) {
		if strings.HasPrefix(tok, "outbox_relay_") {
			names = append(names, tok)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// resolve maps a name used in a query to its registered family: itself, or for a histogram
// series (_bucket, _sum, _count) the histogram. ok is false for a name a relay does not
// register.
func resolve(reg map[string]series, name string) (family string, ok bool) {
	if _, ok := reg[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, cut := strings.CutSuffix(name, suffix)
		if s, found := reg[base]; cut && found && s.typ == dto.MetricType_HISTOGRAM {
			return base, true
		}
	}
	return "", false
}

// checkNames fails for every outbox_relay_ name in text that is not a registered series, and
// returns the families text refers to.
func checkNames(t *testing.T, reg map[string]series, where, text string) []string {
	t.Helper()
	var families []string
	for _, name := range relayNames(text) {
		family, ok := resolve(reg, name)
		if !ok {
			t.Errorf("%s: %s is not registered by a relay (renamed, or a typo?)", where, name)
			continue
		}
		families = append(families, family)
	}
	return families
}

// ruleFile is the shape of a Prometheus rule file, strictly: an unknown key is an error.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var rf ruleFile
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s does not parse as a rule file: %v", alertsPath, err)
	}
	return rf
}

// dashboard is the part of a Grafana dashboard the checks read. Rows nest their panels when
// collapsed.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

const dsVariable = "${DS_PROMETHEUS}"

func loadDashboard(t *testing.T) (dashboard, []panel) {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s is not valid dashboard JSON: %v", dashboardPath, err)
	}
	var all []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return d, all
}

// allStrings returns every string value in a decoded JSON or YAML document, so that names in
// descriptions and annotations are checked as well as those in queries.
func allStrings(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			out = append(out, allStrings(e)...)
		}
		return out
	case map[string]any:
		var out []string
		for _, e := range v {
			out = append(out, allStrings(e)...)
		}
		return out
	}
	return nil
}

// TestDocumentedSeriesKeepNameTypeAndLabels pins the series that the dashboard, the alerts and the docs rely on: a
// rename or a change of type or labels must be deliberate.
func TestDocumentedSeriesKeepNameTypeAndLabels(t *testing.T) {
	reg := registered(t)
	pl := []string{"pipeline"} // every per-pipeline series; build_info is the process's
	want := []struct {
		name   string
		typ    dto.MetricType
		labels []string
	}{
		{"outbox_relay_replication_lag_bytes", dto.MetricType_GAUGE, pl},
		{"outbox_relay_oldest_undelivered_seconds", dto.MetricType_GAUGE, pl},
		{"outbox_relay_events_received_total", dto.MetricType_COUNTER, pl},
		{"outbox_relay_events_delivered_total", dto.MetricType_COUNTER, pl},
		{"outbox_relay_events_dead_lettered_total", dto.MetricType_COUNTER, pl},
		{"outbox_relay_delivery_attempts_total", dto.MetricType_COUNTER, []string{"pipeline", "result"}},
		{"outbox_relay_delivery_duration_seconds", dto.MetricType_HISTOGRAM, pl},
		{"outbox_relay_end_to_end_seconds", dto.MetricType_HISTOGRAM, pl},
		{"outbox_relay_inflight_events", dto.MetricType_GAUGE, pl},
		{"outbox_relay_buffered_events", dto.MetricType_GAUGE, pl},
		{"outbox_relay_buffered_bytes", dto.MetricType_GAUGE, pl},
		{"outbox_relay_read_paused", dto.MetricType_GAUGE, pl},
		{"outbox_relay_parked_aggregates", dto.MetricType_GAUGE, pl},
		{"outbox_relay_slot_retained_wal_bytes", dto.MetricType_GAUGE, pl},
		{"outbox_relay_slot_active", dto.MetricType_GAUGE, pl},
		{"outbox_relay_streaming", dto.MetricType_GAUGE, pl},
		{"outbox_relay_pipeline_up", dto.MetricType_GAUGE, pl},
		{"outbox_relay_reconnects_total", dto.MetricType_COUNTER, pl},
		{"outbox_relay_outbox_rows", dto.MetricType_GAUGE, []string{"pipeline", "status"}},
		{"outbox_relay_build_info", dto.MetricType_GAUGE, []string{"commit", "goversion", "version"}},
	}
	for _, w := range want {
		t.Run(w.name, func(t *testing.T) {
			got, ok := reg[w.name]
			if !ok {
				t.Fatalf("not registered by a relay")
			}
			if got.typ != w.typ {
				t.Errorf("type %v, want %v", got.typ, w.typ)
			}
			if !slices.Equal(got.labels, w.labels) {
				t.Errorf("labels %v, want %v", got.labels, w.labels)
			}
		})
	}
}

// TestEveryDeliveryResultIsExportedFromTheStart checks that every result is exported from the start, so a rate of
// failures reads 0 rather than no data before the first failure.
func TestEveryDeliveryResultIsExportedFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	relay.RegisterMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, f := range families {
		if f.GetName() != "outbox_relay_delivery_attempts_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" { // the other is the pipeline label
					results = append(results, l.GetValue())
				}
			}
		}
	}
	slices.Sort(results)
	results = slices.Compact(results) // relay.RegisterMetrics registers two pipelines: one destination, and endpoints
	want := []string{destination.Result3xx, destination.Result4xx, destination.Result5xx, destination.ResultNetwork,
		destination.ResultSuccess, destination.ResultTimeout, destination.ResultRejected}
	slices.Sort(want)
	if !slices.Equal(results, want) {
		t.Errorf("result label values %v, want %v", results, want)
	}
}

func TestAlertRulesAreCompleteAndReadRegisteredSeries(t *testing.T) {
	reg := registered(t)
	rf := loadRules(t)
	if len(rf.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	used := map[string]bool{}
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: needs a name and rules", g.Name)
		}
		for i, r := range g.Rules {
			where := fmt.Sprintf("%s: group %s, rule %d (%s)", alertsPath, g.Name, i, r.Alert)
			if r.Alert == "" || r.Record != "" {
				t.Errorf("%s: want an alerting rule (alert:, no record:)", where)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("%s: alert name used twice", where)
			}
			alerts[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: empty expr", where)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", where, r.For, err)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", where, s)
			}
			for _, key := range []string{"summary", "description", "runbook", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[key]) == "" {
					t.Errorf("%s: no %s annotation", where, key)
				}
			}
			if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q (its section of the alerts runbook; the docs test checks the anchor)",
					where, r.Annotations["runbook_url"], want)
			}
			if !strings.Contains(r.Annotations["runbook"], "outbox-relay status") &&
				!strings.Contains(r.Annotations["runbook"], "outbox-relay replay") {
				t.Errorf("%s: runbook names neither `outbox-relay status` nor `outbox-relay replay`", where)
			}
			for _, f := range checkNames(t, reg, where+" expr", r.Expr) {
				used[f] = true
			}
		}
	}
	// The conditions of issue 5, each by the series its rule must read.
	for _, name := range []string{
		"outbox_relay_replication_lag_bytes",      // lag growing
		"outbox_relay_oldest_undelivered_seconds", // stalled, not ready
		"outbox_relay_events_dead_lettered_total", // any dead letter
		"outbox_relay_parked_aggregates",          // aggregates waiting for a replay
		"outbox_relay_slot_retained_wal_bytes",    // retained WAL
		"outbox_relay_streaming",                  // no leader
		"outbox_relay_pipeline_up",                // a pipeline that cannot start (issue 27)
		// endpoints (issue 39): failing, breaker open, old backlog, disabled, dead letters
		"outbox_relay_endpoint_failures_in_row",
		"outbox_relay_endpoints_circuit_open",
		"outbox_relay_endpoint_oldest_undelivered_seconds",
		"outbox_relay_endpoint_transitions_total",
		"outbox_relay_endpoints",
	} {
		if !used[name] {
			t.Errorf("%s: no alert reads %s", alertsPath, name)
		}
	}
	if !alerts["OutboxRelayDown"] {
		t.Errorf("%s: no OutboxRelayDown rule on up", alertsPath)
	}
}

func TestDashboardPanelsQueryRegisteredSeries(t *testing.T) {
	reg := registered(t)
	d, panels := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard needs a title and a uid")
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want 36 or later (datasource references by uid)", d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		checkNames(t, reg, "template variable "+v.Name, string(v.Query)+" "+v.Definition)
	}
	if vars["DS_PROMETHEUS"] != "datasource" {
		t.Errorf("no datasource template variable DS_PROMETHEUS")
	}
	if vars["job"] != "query" || vars["instance"] != "query" {
		t.Errorf("want query template variables job and instance, have %v", vars)
	}

	used := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range panels {
		where := fmt.Sprintf("%s: panel %d %q", dashboardPath, p.ID, p.Title)
		if ids[p.ID] {
			t.Errorf("%s: panel id used twice", where)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("%s: no gridPos", where)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != dsVariable {
			t.Errorf("%s: datasource is not %s", where, dsVariable)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no targets", where)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
				t.Errorf("%s: target %q has no expr or refId", where, tg.RefID)
			}
			if tg.Datasource != nil && tg.Datasource.UID != dsVariable {
				t.Errorf("%s: target %s datasource is not %s", where, tg.RefID, dsVariable)
			}
			for _, f := range checkNames(t, reg, where, tg.Expr) {
				used[f] = true
			}
		}
	}
	// The panels of issue 5, each by the series it must show.
	for _, name := range []string{
		"outbox_relay_replication_lag_bytes",
		"outbox_relay_oldest_undelivered_seconds",
		"outbox_relay_slot_retained_wal_bytes",
		"outbox_relay_events_received_total",
		"outbox_relay_events_delivered_total",
		"outbox_relay_delivery_attempts_total",
		"outbox_relay_delivery_duration_seconds",
		"outbox_relay_end_to_end_seconds",
		"outbox_relay_events_dead_lettered_total",
		"outbox_relay_parked_aggregates",
		"outbox_relay_inflight_events",
		"outbox_relay_buffered_events",
		"outbox_relay_buffered_bytes",
		"outbox_relay_read_paused",
		"outbox_relay_streaming",
		"outbox_relay_slot_active",
		"outbox_relay_outbox_rows",
		"outbox_relay_reconnects_total",
		// the endpoints row (issue 39): troubled endpoints, backlog, delivery rate and latency
		"outbox_relay_endpoints",
		"outbox_relay_endpoints_failing",
		"outbox_relay_endpoints_circuit_open",
		"outbox_relay_endpoints_spilling",
		"outbox_relay_endpoint_backlog_events",
		"outbox_relay_endpoint_backlog",
		"outbox_relay_endpoint_failures_in_row",
		"outbox_relay_endpoint_oldest_undelivered_seconds",
		"outbox_relay_endpoint_transitions_total",
	} {
		if !used[name] {
			t.Errorf("%s: no panel queries %s", dashboardPath, name)
		}
	}
}

// The endpoints row reads bounded series only: the pipeline's own (summed over its endpoints)
// and the per-endpoint ones, which exist for the endpoints in trouble only (at most
// --endpoint-metrics-max) and which each panel shows through topk, so a panel has as many lines
// whatever the number of endpoints.
func TestDashboardEndpointsRowReadsBoundedSeries(t *testing.T) {
	reg := registered(t)
	_, panels := loadDashboard(t)
	row := -1
	for i, p := range panels {
		if p.Type == "row" && strings.HasPrefix(p.Title, "Endpoints") {
			row = i
		}
	}
	if row < 0 {
		t.Fatalf("%s has no Endpoints row", dashboardPath)
	}
	n := 0
	for _, p := range panels[row+1:] {
		if p.Type == "row" {
			break
		}
		n++
		for _, tg := range p.Targets {
			for _, f := range checkNames(t, reg, p.Title, tg.Expr) {
				if !slices.Contains(reg[f].labels, "endpoint") {
					continue
				}
				if !strings.Contains(tg.Expr, "topk(") {
					t.Errorf("panel %q reads the per-endpoint %s without topk: %s", p.Title, f, tg.Expr)
				}
			}
			if strings.Contains(tg.Expr, "by (endpoint") && !strings.Contains(tg.Expr, "topk(") {
				t.Errorf("panel %q groups by endpoint without topk: %s", p.Title, tg.Expr)
			}
		}
	}
	if n < 6 {
		t.Fatalf("the Endpoints row has %d panels: want the troubled endpoints, backlog, delivery rate and latency", n)
	}
}

// TestAssetTextNamesOnlyRegisteredSeries checks the names in all the text of both files (descriptions, annotations,
// legends), not only in queries: documentation that names a series must name a real one.
func TestAssetTextNamesOnlyRegisteredSeries(t *testing.T) {
	reg := registered(t)
	for _, path := range []string{dashboardPath, alertsPath} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if strings.HasSuffix(path, ".json") {
			err = json.Unmarshal(data, &doc)
		} else {
			err = yaml.Unmarshal(data, &doc)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		checkNames(t, reg, path, strings.Join(allStrings(doc), "\n"))
	}
}

func TestRelayNamesResolveSuffixedSeriesToTheirFamily(t *testing.T) {
	reg := map[string]series{
		"outbox_relay_x_seconds": {typ: dto.MetricType_HISTOGRAM},
		"outbox_relay_y":         {typ: dto.MetricType_GAUGE},
	}
	tests := []struct {
		expr string
		want []string // resolved families; "!" marks an unknown name
	}{
		{`histogram_quantile(0.99, sum by (le) (rate(outbox_relay_x_seconds_bucket{job=~"$job"}[5m])))`,
			[]string{"outbox_relay_x_seconds"}},
		{`rate(outbox_relay_x_seconds_sum[5m]) / rate(outbox_relay_x_seconds_count[5m])`,
			[]string{"outbox_relay_x_seconds"}},
		{`outbox_relay_y > 0 and on (instance) outbox_relay_y`, []string{"outbox_relay_y"}},
		{`outbox_relay_y_bucket`, []string{"!outbox_relay_y_bucket"}}, // a gauge has no buckets
		{`outbox_relay_Y`, []string{"!outbox_relay_Y"}},
		{`up{job="outbox-relay"} == 0`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			var got []string
			for _, name := range relayNames(tt.expr) {
				if f, ok := resolve(reg, name); ok {
					got = append(got, f)
				} else {
					got = append(got, "!"+name)
				}
			}
			slices.Sort(got)
			got = slices.Compact(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
