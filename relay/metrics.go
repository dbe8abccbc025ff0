package relay

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// registerProcess registers the process-level series: the build's identity and the Go and
// process collectors. They are the wiring's, never a pipeline's.
func registerProcess(reg prometheus.Registerer, version, commit string) {
	info := metrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace,
		Name: "build_info", Help: "Always 1; labels carry the version, commit and Go version."},
		[]string{"version", "commit", "goversion"}))
	info.WithLabelValues(version, commit, runtime.Version()).Set(1)
	metrics.Register(reg, collectors.NewGoCollector())
	metrics.Register(reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// RegisterMetrics registers on reg every series Run exports, as Run would, without connecting
// anywhere: what /metrics lists before the first event. The dashboard, the alerts and the
// metrics list in docs/reference/metrics.md are checked against it.
func RegisterMetrics(reg prometheus.Registerer) {
	cfg := Config{DSN: "postgres://localhost/none"}
	cfg.defaults()
	registerProcess(reg, cfg.Version, cfg.Commit)
	pipes, _ := cfg.pipelines()
	newPipelineRunner(cfg, pipes[0], true, reg, nil, nil)
	// A pipeline with endpoints adds the endpoint series (the per-endpoint ones appear once an
	// endpoint is in trouble).
	ep := pipes[0]
	ep.Name, ep.Endpoints = "endpoints", true
	newPipelineRunner(cfg, ep, false, reg, nil, nil)
}

// gathered sums the values of the counter family name in g (0 if absent).
func gathered(g prometheus.Gatherer, name string) float64 {
	families, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
