package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// `outbox-bench memory` measures the relay's memory and GC with several pipelines whose
// buffers are full: the destination answers 503 with a long Retry-After, so every pipeline
// reads until its --max-buffered-bytes bound and holds it. Each setting (a GOMEMLIMIT/GOGC
// pair, or the binary's own defaults) runs on a database of its own in the same session, and
// prints one row: what is buffered, RSS, relay CPU and the GC's part of it over a window.

// memorySetting is one way of running the relay: env is added to its environment.
type memorySetting struct {
	name string
	env  []string
}

// memoryResult is one setting measured.
type memoryResult struct {
	setting     memorySetting
	pipelines   int
	buffered    float64 // bytes, the sum of outbox_relay_buffered_bytes
	bufferedEvs float64
	limit       float64 // go_gc_gomemlimit_bytes as the relay reports it (0: not exported)
	rss, peak   int64
	window      time.Duration
	cpu         time.Duration // the relay's CPU over the window
	gcCPU       time.Duration // the GC's CPU over the window (gctrace)
	gcs         int           // GC cycles over the window
	heapLive    int           // MB live after the last GC of the window (gctrace)
}

func newMemoryCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Measure RSS and GC CPU with several pipelines whose buffers are full",
		Long: `Starts a throwaway PostgreSQL and the relay with N pipelines (no filter, each its own slot)
to a destination that answers 503 with Retry-After: 600, writes a backlog large enough to fill every
pipeline's --max-buffered-bytes, waits until every buffer is full, then measures the relay's RSS, CPU
and GC CPU (GODEBUG=gctrace=1) over a window. Each setting runs in turn in the same session:
"defaults" is the binary as shipped; NAME=ENV... runs it with that environment, e.g.
old=GOMEMLIMIT=64MiB,GOGC=400 for the limit the relay used to set.`,
		Args: cobra.NoArgs,
	}
	pipes := cmd.Flags().Int("pipelines", 4, "pipelines, each with its own slot and full buffer")
	payload := cmd.Flags().Int("payload", 8<<10, "payload bytes per event")
	window := cmd.Flags().Duration("window", 20*time.Second, "measurement window once the buffers are full")
	settings := cmd.Flags().StringArray("setting", []string{"defaults"}, "a setting to run: defaults, or NAME=VAR=value,VAR=value")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var list []memorySetting
		for _, s := range *settings {
			ms, err := parseMemorySetting(s)
			if err != nil {
				return err
			}
			list = append(list, ms)
		}
		return runMemory(cmd.Context(), stdout, stderr, *pipes, *payload, *window, list)
	}
	return cmd
}

func parseMemorySetting(s string) (memorySetting, error) {
	if s == "defaults" {
		return memorySetting{name: "defaults"}, nil
	}
	name, vars, ok := strings.Cut(s, "=")
	if !ok || name == "" || vars == "" {
		return memorySetting{}, fmt.Errorf("setting %q: want defaults or NAME=VAR=value[,VAR=value]", s)
	}
	ms := memorySetting{name: name}
	for _, kv := range strings.Split(vars, ",") {
		if !strings.Contains(kv, "=") {
			return memorySetting{}, fmt.Errorf("setting %q: %q is not VAR=value", s, kv)
		}
		ms.env = append(ms.env, kv)
	}
	return ms, nil
}

func runMemory(ctx context.Context, stdout, stderr io.Writer, pipes, payload int, window time.Duration, settings []memorySetting) error {
	tmp, err := os.MkdirTemp("", "outbox-bench-memory-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{progress: stderr}
	e.logf("building the relay")
	if e.relayBin, err = buildRelay(ctx, tmp); err != nil {
		return err
	}
	rev := relayRevision(ctx, e.relayBin)
	e.logf("starting PostgreSQL")
	if e.cluster, err = pgtest.Start(ctx, pgtest.Options{}); err != nil {
		return err
	}
	defer e.cluster.Close()
	dest, err := startRefusingDestination()
	if err != nil {
		return err
	}
	defer dest.Close()
	var results []memoryResult
	for i, s := range settings {
		e.logf("memory, %s: %d pipelines, %d-byte payloads", s.name, pipes, payload)
		r, err := e.memoryRow(ctx, fmt.Sprintf("memory_%d", i), s, pipes, payload, window, "http://"+dest.Addr().String()+"/hook")
		if err != nil {
			return fmt.Errorf("setting %s: %w", s.name, err)
		}
		results = append(results, r)
	}
	writeMemoryReport(stdout, rev, pipes, payload, results)
	return nil
}

// startRefusingDestination serves 503 with Retry-After: 600 to every request: nothing is
// delivered and nothing is retried for ten minutes, so the buffers stay full and the relay's
// CPU over the window is its own upkeep and its GC.
func startRefusingDestination() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "600")
		w.WriteHeader(http.StatusServiceUnavailable)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ends when the caller closes ln
	return ln, nil
}

// memoryRow runs one setting on a database of its own.
func (e *env) memoryRow(ctx context.Context, prefix string, s memorySetting, pipes, payload int, window time.Duration,
	url string) (memoryResult, error) {
	res := memoryResult{setting: s, pipelines: pipes, window: window}
	db, err := newBenchDB(ctx, e.cluster, prefix)
	if err != nil {
		return res, err
	}
	defer db.drop()
	relay, gc, err := e.startMemoryRelay(ctx, db, s, pipes, url)
	if err != nil {
		return res, err
	}
	defer func() { _ = relay.Stop(relayStopGrace) }()
	// Enough rows to fill every pipeline's default 32 MiB with room to spare: the pipelines
	// read the same rows, each into its own buffer.
	// Small transactions: a pipeline takes a whole transaction into its buffer, so one large
	// one would overshoot the bound.
	rows := (48 << 20) / payload
	for lo := 1; lo <= rows; lo += 100 {
		if _, err := db.conn.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'order', (g % 1000)::text, 'order.created', jsonb_build_object('seq', g, 'pad', repeat(md5(g::text), $3 / 32))
			FROM generate_series($1::int, $2::int) g`, lo, min(lo+99, rows), payload); err != nil {
			return res, fmt.Errorf("write backlog: %w", err)
		}
	}
	if err := waitBuffersFull(ctx, relay, pipes); err != nil {
		return res, err
	}
	startCPU, err := processCPU(relay.pid())
	if err != nil {
		return res, err
	}
	startGC := gc.snapshot()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(window):
	}
	endCPU, err := processCPU(relay.pid())
	if err != nil {
		return res, err
	}
	endGC := gc.snapshot()
	res.cpu = endCPU - startCPU
	res.gcCPU, res.gcs, res.heapLive = endGC.cpu-startGC.cpu, endGC.cycles-startGC.cycles, endGC.liveMB
	if res.rss, err = currentRSS(relay.pid()); err != nil {
		return res, err
	}
	if res.peak, err = peakRSS(relay.pid()); err != nil {
		return res, err
	}
	m, err := scrape(ctx, relay.metricsAddr)
	if err != nil {
		return res, err
	}
	res.buffered, res.bufferedEvs, res.limit = m["outbox_relay_buffered_bytes"], m["outbox_relay_buffered_events"], m["go_gc_gomemlimit_bytes"]
	return res, nil
}

// startMemoryRelay runs the relay with pipes pipelines m0..mN to url, gctrace on.
func (e *env) startMemoryRelay(ctx context.Context, db *benchDB, s memorySetting, pipes int, url string) (*relayProc, *gcTrace, error) {
	dir, err := os.MkdirTemp("", "outbox-bench-config-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir) // read at start
	var b strings.Builder
	b.WriteString("pipelines:\n")
	for i := range pipes {
		fmt.Fprintf(&b, "  - name: m%d\n    webhook: {url: %q, secret: %q}\n", i, url, benchSecret)
	}
	path := filepath.Join(dir, "pipelines.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return nil, nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(e.relayBin, "run", "--config", path, "--dsn", db.dsn, "--metrics-addr", addr,
		"--log-level", "error", "--log-format", "json")
	cmd.Env = append(append(withoutGCEnv(os.Environ()), s.env...), "GODEBUG=gctrace=1")
	gc := &gcTrace{}
	c, err := startChild("relay", cmd, gc)
	if err != nil {
		return nil, nil, err
	}
	p := &relayProc{child: c, metricsAddr: addr, started: time.Now()}
	if err := waitReady(ctx, "http://"+addr+"/readyz", c, 60*time.Second); err != nil {
		_ = c.Stop(5 * time.Second)
		return nil, nil, err
	}
	return p, gc, nil
}

// withoutGCEnv drops GOGC, GOMEMLIMIT and GODEBUG from env, so that only the setting's apply.
func withoutGCEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GODEBUG=") {
			out = append(out, kv)
		}
	}
	return out
}

// waitBuffersFull waits until every pipeline has paused reading for a full buffer.
func waitBuffersFull(ctx context.Context, relay *relayProc, pipes int) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		m, err := scrapeAll(ctx, relay.metricsAddr, "outbox_relay_read_paused")
		if err == nil && len(m) == pipes && sumAll(m) == float64(pipes) {
			return nil
		}
		if relay.exited() {
			return relay.failure()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("buffers not full after 3m (read_paused %v, %v)", m, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func sumAll(m []float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// scrape returns the sum of each family's samples on the relay's /metrics.
func scrape(ctx context.Context, addr string) (map[string]float64, error) {
	fams, err := gather(ctx, addr)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, vals := range fams {
		out[name] = sumAll(vals)
	}
	return out, nil
}

// scrapeAll returns the samples of one family.
func scrapeAll(ctx context.Context, addr, name string) ([]float64, error) {
	fams, err := gather(ctx, addr)
	return fams[name], err
}

func gather(ctx context.Context, addr string) (map[string][]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string][]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.Gauge != nil:
				out[name] = append(out[name], m.GetGauge().GetValue())
			case m.Counter != nil:
				out[name] = append(out[name], m.GetCounter().GetValue())
			case m.Untyped != nil:
				out[name] = append(out[name], m.GetUntyped().GetValue())
			}
		}
	}
	return out, nil
}

// currentRSS returns a live process's resident set size (VmRSS) in bytes.
func currentRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 {
				kib, err := strconv.ParseInt(f[0], 10, 64)
				return kib << 10, err
			}
		}
	}
	return 0, errors.New("no VmRSS in /proc/<pid>/status")
}

// gcTrace reads the runtime's gctrace lines from the relay's stderr (GODEBUG=gctrace=1):
//
//	gc 12 @3.456s 5%: 0.018+1.3+0.003 ms clock, 0.075+0.52/1.2/0.8+0.015 ms cpu, 120->121->60 MB, 128 MB goal, ...
//
// and sums each cycle's CPU (all five phases: STW, assist, background, idle, STW).
type gcTrace struct {
	mu      sync.Mutex
	partial []byte
	now     gcTotals
}

type gcTotals struct {
	cycles int
	cpu    time.Duration
	liveMB int
}

var gcLine = regexp.MustCompile(`^gc \d+ @[0-9.]+s \d+%: [^,]+ ms clock, ([0-9.+/]+) ms cpu, \d+->\d+->(\d+) MB`)

func (g *gcTrace) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.partial = append(g.partial, p...)
	for {
		i := bytes.IndexByte(g.partial, '\n')
		if i < 0 {
			break
		}
		g.now.add(string(g.partial[:i]))
		g.partial = g.partial[i+1:]
	}
	g.partial = append([]byte(nil), g.partial...) // what is left of a line, for the next write
	return len(p), nil
}

func (t *gcTotals) add(line string) {
	m := gcLine.FindStringSubmatch(line)
	if m == nil {
		return
	}
	var ms float64
	for _, f := range strings.FieldsFunc(m[1], func(r rune) bool { return r == '+' || r == '/' }) {
		v, _ := strconv.ParseFloat(f, 64)
		ms += v
	}
	t.cycles++
	t.cpu += time.Duration(ms * float64(time.Millisecond))
	t.liveMB, _ = strconv.Atoi(m[2])
}

func (g *gcTrace) snapshot() gcTotals {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now
}

func writeMemoryReport(w io.Writer, rev string, pipes, payload int, rs []memoryResult) {
	fmt.Fprintf(w, "## outbox-relay memory, %d pipelines with full buffers\n\n", pipes)
	fmt.Fprintf(w, "Relay built from %s; %d-byte payloads; destination answers 503 with Retry-After: 600, so every "+
		"pipeline holds its --max-buffered-bytes (default 32 MiB). Relay CPU (from /proc) over the window once every buffer is full, when nothing "+
		"but its upkeep and its GC runs; the GC's own estimate (gctrace, all phases) counts time its workers were "+
		"scheduled, which on a busy machine includes time the OS gave to others.\n\n",
		rev, payload)
	fmt.Fprintln(w, "| Setting | Buffered (events, MiB) | Soft limit | RSS (peak) | Live heap after GC | Relay CPU | GC CPU (runtime's estimate) | GC cycles |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		limit := dash
		if r.limit > 0 && r.limit < 1<<62 {
			limit = fmt.Sprintf("%.0f MiB", r.limit/(1<<20))
		}
		name := r.setting.name
		if len(r.setting.env) > 0 {
			name += " (" + strings.Join(r.setting.env, " ") + ")"
		}
		secs := r.window.Seconds()
		fmt.Fprintf(w, "| %s | %s, %.0f | %s | %.0f MiB (%.0f) | %d MB | %.1f%% of a core | %.1f%% of a core | %.1f/s |\n",
			name, thousands(r.bufferedEvs), r.buffered/(1<<20), limit, float64(r.rss)/(1<<20), float64(r.peak)/(1<<20),
			r.heapLive, 100*r.cpu.Seconds()/secs, 100*r.gcCPU.Seconds()/secs, float64(r.gcs)/secs)
	}
}
