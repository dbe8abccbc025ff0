package api

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	imetrics "github.com/outbox-relay/outbox-relay/internal/metrics"
)

// metrics are the API's series: requests by route (the ServeMux pattern, a bounded set) and
// status code, and their duration by route.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		requests: imetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: imetrics.Namespace,
			Name: "api_requests_total", Help: "Requests the management API answered, by route and status code."},
			[]string{"route", "code"})),
		duration: imetrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: imetrics.Namespace,
			Name: "api_request_duration_seconds", Help: "How long the management API took to answer, by route.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}}, []string{"route"})),
	}
}

func (m *metrics) observe(route string, status int, d time.Duration) {
	if status == 0 {
		status = 200
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}
