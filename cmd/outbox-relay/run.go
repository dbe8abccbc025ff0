package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/signature"
)

var (
	urlFlag         = envFlag{name: "webhook-url", env: "WEBHOOK_URL"}
	secretFlag      = envFlag{name: "webhook-secret", env: "WEBHOOK_SECRET"}
	secretFileFlag  = envFlag{name: "webhook-secret-file", env: "WEBHOOK_SECRET_FILE"}
	replTimeoutFlag = envFlag{name: "replication-timeout", env: "REPLICATION_TIMEOUT"}
	configFlag      = envFlag{name: "config", env: "OUTBOX_RELAY_CONFIG"}
)

// pipelineFlags describe the one pipeline of the flag path; with --config each pipeline says
// them in the file, so passing one is a usage error.
var pipelineFlags = []string{urlFlag.name, secretFlag.name, secretFileFlag.name, "signature-scheme", "slot", "publication",
	"retry-min", "retry-max", "request-timeout", "max-attempts", "max-in-flight", "max-buffered-events",
	"max-buffered-bytes", "backfill", "no-backfill", "format", "source", "batch-max-events", "batch-max-bytes",
	"batch-linger", "compression", "marks", "on-gone", "shards", "endpoints", "breaker", "backlog", "delivery-log", natsURLFlag.name, kafkaBrokersFlag.name, kafkaPassFlag.name}

func newRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Stream outbox inserts from the slot to the webhook",
		Long: `Checks the schema version and the privileges it needs (exiting 1 with the fix, before
creating anything), creates the publication and the pgoutput slot if they are missing, then
delivers every committed outbox row as a signed POST, in commit order per aggregate, confirming
the slot only after delivery. If another instance holds the slot, this one stands by and takes over when it
goes away. SIGINT or SIGTERM drains in-flight deliveries, confirms and exits 0.
With --nats-url (NATS JetStream) or --kafka-brokers (Kafka) it publishes to that broker instead
of the webhook, with the same guarantees (docs/guides/brokers.md).`,
		Example: `  DB_DSN=postgres://relay@db:5432/app WEBHOOK_URL=https://consumer/webhooks \
  WEBHOOK_SECRET_FILE=/run/secrets/webhook outbox-relay run --metrics-addr :9187
  DB_DSN=postgres://relay@db:5432/app NATS_URL=nats://nats:4222 outbox-relay run --nats-create-stream OUTBOX`,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	addSetting(fs, "endpoints")
	addSetting(fs, urlFlag.name)
	addSetting(fs, secretFlag.name)
	addSetting(fs, secretFileFlag.name)
	addSetting(fs, "signature-scheme")
	addSetting(fs, "slot")
	addSetting(fs, "publication")
	addSetting(fs, "metrics-addr")
	addSetting(fs, "retry-min")
	addSetting(fs, "retry-max")
	addSetting(fs, "request-timeout")
	addSetting(fs, "max-attempts")
	addSetting(fs, "max-in-flight")
	addSetting(fs, "max-buffered-events")
	addSetting(fs, "max-buffered-bytes")
	addSetting(fs, "shutdown-timeout")
	addSetting(fs, "stall-timeout")
	addSetting(fs, "retention")
	addSetting(fs, "status-interval")
	addSetting(fs, replTimeoutFlag.name)
	addLogFlags(fs)
	addSetting(fs, "backfill")
	addSetting(fs, "no-backfill")
	addSetting(fs, "recreate-slot")
	addSetting(fs, "exit-on-config-error")
	addSetting(fs, "log-payloads")
	addSetting(fs, otelEndpointFlag.name) // tracing.go
	addFailoverFlags(fs)                  // failover.go
	addDeliveryFlags(fs)
	addBrokerFlags(fs) // brokers.go
	addSetting(fs, configFlag.name)
	addControlFlags(fs) // control.go
	addSetting(fs, "shard")
	addSetting(fs, "shards")
	addSetting(fs, secretsKeyFileFlag.name)
	addSetting(fs, "endpoint-metrics")
	addSetting(fs, "endpoint-metrics-max")
	addSetting(fs, "spill-after")
	addSetting(fs, "delivery-log-retention")
	addSetting(fs, "spill-size")
	addSetting(fs, "endpoint-disable-after")
	addSetting(fs, "breaker")
	addSetting(fs, "backlog")
	addSetting(fs, "delivery-log")
	addSetting(fs, operatorURLFlag.name)
	addSetting(fs, operatorSecretFlag.name)
	addEgressPolicyFlags(fs)
	addSetting(fs, egressProxyFlag.name)
	addSetting(fs, "api-addr")
	addAPIFlags(fs)
	addPortalFlags(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := newLogger(fs, os.Stderr)
		if err != nil {
			return err
		}
		if path := stringFrom(fs, configFlag); path != "" {
			cfg, otelFile, err := fileConfig(fs, path)
			if err != nil {
				return err
			}
			cfg.Logger = log
			defer tuneGC(cmd.Context(), cfg, log)()
			for _, env := range []string{urlFlag.env, secretFlag.env, secretFileFlag.env} {
				if os.Getenv(env) != "" {
					log.Warn().Str("config", path).Msg("WEBHOOK_URL / WEBHOOK_SECRET / WEBHOOK_SECRET_FILE are ignored with --config: each pipeline names its webhook in the file")
					break
				}
			}
			return runRelay(cmd.Context(), fs, cfg, otelFile, log)
		}
		cfg, err := runConfig(fs)
		if err != nil {
			return err
		}
		cfg.Logger = log
		defer tuneGC(cmd.Context(), cfg, log)()
		warnTrimmedSecrets(log, fs)
		return runRelay(cmd.Context(), fs, cfg, "", log)
	}
	return cmd
}

// runRelay runs the relay and, with --api-addr, serves the management API beside it (its
// series in the relay's /metrics) with the portal's pages (unless --portal=false), both
// stopping when either ends. With --otel-endpoint, an OTEL_EXPORTER_OTLP_*ENDPOINT variable or
// otelFile (the --config file's otel.endpoint) it traces, and exports the last spans once the
// relay has returned.
func runRelay(ctx context.Context, fs *pflag.FlagSet, cfg relay.Config, otelFile string, log zerolog.Logger) error {
	tp, stopTracing, err := startTracing(ctx, fs, otelFile, cfg.Version, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	if tp != nil {
		cfg.TracerProvider = tp
	}
	addr, _ := fs.GetString("api-addr")
	if addr == "" {
		return relay.Run(ctx, cfg)
	}
	if cfg.Registerer == nil && cfg.Gatherer == nil {
		reg := prometheus.NewRegistry()
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	r, err := relay.New(cfg)
	if err != nil {
		return err
	}
	h, acfg, err := buildAPI(ctx, fs, cfg.DSN, cfg.Schema, cfg.Egress, cfg.EgressProxy, log, cfg.Registerer)
	if err != nil {
		return err
	}
	defer acfg.Pool.Close()
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", h)
	if err := mountPortal(mux, fs, h, acfg, log); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.Run(gctx) })
	g.Go(func() error { return serveHTTP(gctx, addr, mux, log, "api") })
	return g.Wait()
}

// runConfig turns flags and environment into a relay.Config, rejecting bad input with errors
// that say what to set.
func runConfig(fs *pflag.FlagSet) (relay.Config, error) {
	var cfg relay.Config
	var err error
	if cfg.DSN, err = requireDSN(fs); err != nil {
		return cfg, err
	}
	cfg.Schema = schemaName(fs, "")
	broker, ok, err := brokerConfig(fs) // brokers.go
	if err != nil {
		return cfg, err
	}
	cfg.Endpoints, _ = fs.GetBool("endpoints")
	cfg.Breaker, _ = fs.GetBool("breaker")
	cfg.Backlog, _ = fs.GetBool("backlog")
	cfg.DeliveryLog, _ = fs.GetBool("delivery-log")
	switch {
	case ok && cfg.Endpoints:
		return cfg, usageError{errors.New("--endpoints delivers to the partner endpoints, a broker flag to a broker: pass one")}
	case ok:
		cfg.Destination = broker
	case cfg.Endpoints:
		if stringFrom(fs, urlFlag) != "" || stringFrom(fs, secretFlag) != "" || stringFrom(fs, secretFileFlag) != "" {
			return cfg, usageError{errors.New("--endpoints takes each endpoint's URL and secret from outbox_endpoints: " +
				"drop --webhook-url and --webhook-secret (and WEBHOOK_URL, WEBHOOK_SECRET), or drop --endpoints")}
		}
	default:
		if err := webhookConfig(fs, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := flagShards(fs, &cfg); err != nil {
		return cfg, err
	}
	cfg.Slot, _ = fs.GetString("slot")
	cfg.Publication, _ = fs.GetString("publication")
	cfg.MetricsAddr, _ = fs.GetString("metrics-addr")
	cfg.RetryMin, _ = fs.GetDuration("retry-min")
	cfg.RetryMax, _ = fs.GetDuration("retry-max")
	cfg.RequestTimeout, _ = fs.GetDuration("request-timeout")
	cfg.MaxInFlight, _ = fs.GetInt("max-in-flight")
	cfg.MaxAttempts, _ = fs.GetInt("max-attempts")
	cfg.MaxBufferedEvents, _ = fs.GetInt("max-buffered-events")
	cfg.MaxBufferedBytes, _ = fs.GetInt("max-buffered-bytes")
	cfg.ShutdownTimeout, _ = fs.GetDuration("shutdown-timeout")
	cfg.StallTimeout, _ = fs.GetDuration("stall-timeout")
	cfg.StatusInterval, _ = fs.GetDuration("status-interval")
	if cfg.ReplicationTimeout, err = durationFrom(fs, replTimeoutFlag); err != nil {
		return cfg, err
	}
	cfg.Retention, _ = fs.GetDuration("retention")
	cfg.LogPayloads, _ = fs.GetBool("log-payloads")
	backfill, _ := fs.GetBool("backfill")
	noBackfill, _ := fs.GetBool("no-backfill")
	if fs.Changed("backfill") && backfill && noBackfill {
		return cfg, usageError{errors.New("--backfill and --no-backfill contradict each other: pass one")}
	}
	cfg.NoBackfill = noBackfill || !backfill
	cfg.RecreateSlot, _ = fs.GetBool("recreate-slot")
	cfg.ExitOnConfigError, _ = fs.GetBool("exit-on-config-error")
	cfg.Version, cfg.Commit, _ = buildInfo()
	if err := failoverConfig(fs, &cfg); err != nil {
		return cfg, err
	}
	if err := deliveryConfig(fs, &cfg); err != nil {
		return cfg, err
	}
	if err := controlConfig(fs, &cfg); err != nil {
		return cfg, err
	}
	if err := endpointRunConfig(fs, &cfg); err != nil {
		return cfg, err
	}
	if cfg.RetryMin <= 0 || cfg.RetryMax < cfg.RetryMin {
		return cfg, usageError{fmt.Errorf("--retry-min must be positive and no more than --retry-max")}
	}
	return cfg, nil
}

// flagShards reads --shards and --shard for the flag pipeline.
func flagShards(fs *pflag.FlagSet, cfg *relay.Config) error {
	cfg.Shards, _ = fs.GetInt("shards")
	if cfg.Shards < 0 || cfg.Shards > relay.MaxShards {
		return usageError{fmt.Errorf("--shards %d: want 1 to %d (0 or 1: not sharded)", cfg.Shards, relay.MaxShards)}
	}
	shard, _ := fs.GetInt("shard")
	switch {
	case !fs.Changed("shard") || shard == -1:
		return nil
	case cfg.Shards <= 1:
		return usageError{errors.New("--shard selects a shard of a sharded pipeline: add --shards N (the same N on every " +
			"shard's relay), or give the pipelines with --config, one of them with shards: N (docs/guides/shards.md)")}
	case shard < 0 || shard >= cfg.Shards:
		return usageError{fmt.Errorf("--shard %d: with --shards %d, want 0 to %d (or -1 for every shard)", shard, cfg.Shards, cfg.Shards-1)}
	}
	cfg.Shard = &shard
	return nil
}

// webhookConfig reads the webhook destination's flags: URL, secrets and scheme.
func webhookConfig(fs *pflag.FlagSet, cfg *relay.Config) error {
	var err error
	cfg.WebhookURL = stringFrom(fs, urlFlag)
	if cfg.WebhookURL == "" {
		return usageError{errors.New("no webhook URL: set WEBHOOK_URL or pass --webhook-url, e.g. https://consumer.example/webhooks " +
			"(or --nats-url for a NATS JetStream destination)")}
	}
	if _, err := webhook.ParseURL(cfg.WebhookURL); err != nil {
		return usageError{fmt.Errorf("%w (set WEBHOOK_URL or --webhook-url)", err)}
	}
	if cfg.Secrets, err = secrets(fs); err != nil {
		return err
	}
	scheme, _ := fs.GetString("signature-scheme")
	if cfg.Scheme, err = signature.ParseScheme(scheme); err != nil {
		return usageError{err}
	}
	if _, err := signature.Keys(cfg.Scheme, cfg.Secrets); err != nil {
		return usageError{err}
	}
	return nil
}

// fileConfig builds a relay.Config from --config's file and the process-level flags, and
// returns the file's otel.endpoint beside it (tracing is set up by runRelay). A per-pipeline
// flag is a usage error (exit 2); --dsn / DB_DSN override the file's dsn.
func fileConfig(fs *pflag.FlagSet, path string) (cfg relay.Config, otelEndpoint string, err error) {
	for _, name := range slices.Concat(pipelineFlags, natsFlags, kafkaFlags) {
		if fs.Changed(name) {
			return cfg, "", usageError{fmt.Errorf("--%s is a per-pipeline setting: with --config, set it on each pipeline in %s", name, path)}
		}
	}
	file, err := pipeconf.Load(path)
	if err != nil {
		return cfg, "", usageError{err}
	}
	cfg.Pipelines = file.Pipelines
	if shard, _ := fs.GetInt("shard"); shard >= 0 {
		cfg.Shard = &shard
	} else if shard < -1 {
		return cfg, "", usageError{fmt.Errorf("--shard %d: want a shard index (0-based) or -1 for every shard", shard)}
	}
	if cfg.DSN = stringFrom(fs, dsnFlag); cfg.DSN == "" {
		cfg.DSN = file.DSN
	}
	if cfg.DSN == "" {
		return cfg, "", usageError{fmt.Errorf("no database: set dsn in %s, DB_DSN, or pass --dsn postgres://user@host:5432/db", path)}
	}
	cfg.Schema = schemaName(fs, file.Schema)
	cfg.MetricsAddr, _ = fs.GetString("metrics-addr")
	cfg.ShutdownTimeout, _ = fs.GetDuration("shutdown-timeout")
	cfg.StallTimeout, _ = fs.GetDuration("stall-timeout")
	cfg.StatusInterval, _ = fs.GetDuration("status-interval")
	if cfg.ReplicationTimeout, err = durationFrom(fs, replTimeoutFlag); err != nil {
		return cfg, "", err
	}
	cfg.Retention, _ = fs.GetDuration("retention")
	cfg.LogPayloads, _ = fs.GetBool("log-payloads")
	cfg.RecreateSlot, _ = fs.GetBool("recreate-slot")
	cfg.ExitOnConfigError, _ = fs.GetBool("exit-on-config-error")
	cfg.Version, cfg.Commit, _ = buildInfo()
	if err := failoverConfig(fs, &cfg); err != nil {
		return cfg, "", err
	}
	if err := endpointRunConfig(fs, &cfg); err != nil {
		return cfg, "", err
	}
	if cfg.OperatorWebhookURL == "" { // the flags and the environment win over the file
		cfg.OperatorWebhookURL, cfg.OperatorWebhookSecret = file.OperatorWebhookURL, file.OperatorWebhookSecret
	}
	if !fs.Changed("delivery-log-retention") && file.DeliveryLogRetention != 0 {
		cfg.DeliveryLogRetention = file.DeliveryLogRetention
	}
	if err := fileEgress(fs, &cfg, file.Egress); err != nil {
		return cfg, "", err
	}
	return cfg, file.OTelEndpoint, nil
}

// durationFrom returns the flag's value if it was given, else the environment variable's, else
// the flag's default. A negative or malformed value is a usage error.
func durationFrom(fs *pflag.FlagSet, f envFlag) (time.Duration, error) {
	d, _ := fs.GetDuration(f.name)
	if v, ok := os.LookupEnv(f.env); ok && v != "" && !fs.Changed(f.name) {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, usageError{fmt.Errorf("%s=%q: set a duration such as 30s", f.env, v)}
		}
	}
	if d < 0 {
		return 0, usageError{fmt.Errorf("--%s (%s) must not be negative; 0 means the server's wal_sender_timeout", f.name, f.env)}
	}
	return d, nil
}

// secrets reads the signing secrets from --webhook-secret / WEBHOOK_SECRET, or from a file.
func secrets(fs *pflag.FlagSet) ([]string, error) {
	list, _, err := readSecrets(fs)
	return list, err
}

// readSecrets returns the signing secrets and how many of them had blanks trimmed. A value is a
// comma-separated list; a file may also hold one secret per line. Either way several secrets
// mean rotation (each request is signed with all of them).
func readSecrets(fs *pflag.FlagSet) (list []string, trimmed int, err error) {
	raw := stringFrom(fs, secretFlag)
	fromFile := false
	if path := stringFrom(fs, secretFileFlag); path != "" && !fs.Changed(secretFlag.name) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, 0, fmt.Errorf("read webhook secret file: %w", err)
		}
		raw, fromFile = string(b), true
	}
	list, trimmed = splitSecrets(raw, fromFile)
	if len(list) == 0 {
		return nil, 0, usageError{errors.New("no webhook secret: set WEBHOOK_SECRET, --webhook-secret or --webhook-secret-file")}
	}
	return list, trimmed, nil
}

// splitSecrets splits raw at commas and, for a file, at line ends (LF or CRLF), dropping empty
// entries. trimmed counts the secrets that had spaces or tabs around them: a secret is used
// without them, which may not be what the consumer was given.
func splitSecrets(raw string, lines bool) (list []string, trimmed int) {
	sep := func(r rune) bool { return r == ',' }
	if lines {
		raw = strings.ReplaceAll(raw, "\r\n", "\n")
		sep = func(r rune) bool { return r == ',' || r == '\n' }
	}
	for _, s := range strings.FieldsFunc(raw, sep) {
		t := strings.TrimSpace(s)
		if t == "" {
			continue
		}
		if t != s {
			trimmed++
		}
		list = append(list, t)
	}
	return list, trimmed
}

// warnTrimmedSecrets says (without any value) when blanks around a secret were dropped.
func warnTrimmedSecrets(log zerolog.Logger, fs *pflag.FlagSet) {
	list, trimmed, err := readSecrets(fs)
	if err != nil || trimmed == 0 {
		return
	}
	log.Warn().Int("secrets", len(list)).Int("trimmed", trimmed).
		Msg("blanks around a webhook secret were trimmed; the secret is used without them")
}

// tuneGC trades memory for CPU unless the operator chose: a higher GOGC (measured about 15%
// less relay CPU) with a soft memory limit sized from the pipelines' buffer bounds and, with
// partner endpoints, from how many there are (relay.SoftMemoryLimitFor), so that the live heap
// never reaches it, which would make the GC run back to back. Inside a cgroup with a memory
// limit, the soft limit stays at 90% of it, and a warning says when it may not fit. With
// endpoints it counts them again every minute (they are added at run time) until stop, which
// waits for that.
func tuneGC(ctx context.Context, cfg relay.Config, log zerolog.Logger) (stop func()) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	if _, err := relay.SoftMemoryLimit(cfg); err != nil {
		return func() {} // relay.Run refuses the configuration with the same error
	}
	endpoints := relay.HasEndpoints(cfg)
	n := 0
	if endpoints {
		n = countEndpoints(ctx, cfg, log)
	}
	setMemoryLimit(cfg, n, log, true)
	if !endpoints {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if m := countEndpoints(ctx, cfg, log); m != n && m >= 0 {
					n = m
					setMemoryLimit(cfg, n, log, false)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// setMemoryLimit sets the soft memory limit for cfg with n endpoints; first says so at info
// and warns when the cgroup's limit is lower.
func setMemoryLimit(cfg relay.Config, n int, log zerolog.Logger, first bool) {
	limit, err := relay.SoftMemoryLimitFor(cfg, n)
	if err != nil {
		return
	}
	sized := limit
	if hard := cgroupMemoryMax(); hard > 0 && limit > hard/10*9 {
		limit = hard / 10 * 9
		if first {
			log.Warn().Int64("wanted_mib", sized>>20).Int64("cgroup_memory_max_mib", hard>>20).
				Msg("the pipelines' buffers and endpoints may not fit in the container's memory: raise its memory limit " +
					"to the wanted size, or lower max_buffered_bytes (docs/operations/starting.md, Memory)")
		}
	}
	debug.SetMemoryLimit(limit)
	ev := log.Debug()
	if first {
		ev = log.Info()
	}
	ev.Int64("soft_limit_mib", limit>>20).Int("endpoints", n).
		Msg("memory: soft limit sized from the pipelines' buffers and endpoints (GOMEMLIMIT overrides it)")
}

// countEndpoints counts outbox_endpoints' rows for the memory limit, or answers 0 (and says so
// at debug) when it cannot: the relay's own start reports a database it cannot reach.
func countEndpoints(ctx context.Context, cfg relay.Config, log zerolog.Logger) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		log.Debug().Err(err).Msg("memory: endpoints not counted")
		return -1
	}
	defer conn.Close(context.WithoutCancel(ctx))
	n, err := endpoints.Store{Schema: cfg.Schema}.Count(ctx, conn)
	if err != nil {
		log.Debug().Err(err).Msg("memory: endpoints not counted")
		return -1
	}
	return n
}

// cgroupMemoryMax returns the memory limit of the process's cgroup (v2: memory.max; v1:
// memory.limit_in_bytes), or 0 when there is none or it cannot be read.
func cgroupMemoryMax() int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v <= 0 || v >= 1<<60 { // "max", or v1's "no limit"
			return 0
		}
		return v
	}
	return 0
}

// addDeliveryFlags adds the request format, batching, compression and marks flags.
func addDeliveryFlags(fs *pflag.FlagSet) {
	addSetting(fs, "format")
	addSetting(fs, "source")
	addSetting(fs, "batch-max-events")
	addSetting(fs, "batch-max-bytes")
	addSetting(fs, "batch-linger")
	addSetting(fs, "compression")
	addSetting(fs, "marks")
}

// deliveryConfig reads the delivery flags into cfg.Delivery.
func deliveryConfig(fs *pflag.FlagSet, cfg *relay.Config) error {
	d := &cfg.Delivery
	format, _ := fs.GetString("format")
	d.Format = webhook.Format(format)
	d.Source, _ = fs.GetString("source")
	d.Batch.MaxEvents, _ = fs.GetInt("batch-max-events")
	d.Batch.MaxBytes, _ = fs.GetInt("batch-max-bytes")
	switch d.Batch.Linger, _ = fs.GetDuration("batch-linger"); {
	case d.Batch.Linger < 0:
		return usageError{fmt.Errorf("--batch-linger %s is negative: use 0 (send at once) or more", d.Batch.Linger)}
	case d.Batch.Linger == 0:
		d.Batch.Linger = publisher.NoLinger // 0 sends at once; the Go zero value is the default
	}
	compression, _ := fs.GetString("compression")
	d.Compression = webhook.Compression(compression)
	marks, _ := fs.GetString("marks")
	d.Marks = publisher.MarksMode(marks)
	if err := d.Validate(); err != nil {
		return usageError{fmt.Errorf("delivery flags: %w", err)}
	}
	return nil
}

// The operator's webhook (relay.Config.OperatorWebhookURL).
var (
	operatorURLFlag    = envFlag{name: "operator-webhook-url", env: "OUTBOX_RELAY_OPERATOR_WEBHOOK_URL"}
	operatorSecretFlag = envFlag{name: "operator-webhook-secret", env: "OUTBOX_RELAY_OPERATOR_WEBHOOK_SECRET"}
)

// endpointRunConfig reads the settings of the process that a pipeline with endpoints uses: the
// keys of sealed secrets and the endpoints with series of their own.
func endpointRunConfig(fs *pflag.FlagSet, cfg *relay.Config) error {
	text, from, err := readSecretsKeys(fs)
	if err != nil {
		return err
	}
	if text != "" {
		if _, err := endpoints.NewSealer(text); err != nil {
			return usageError{fmt.Errorf("%s: %s", from, strings.TrimPrefix(err.Error(), "endpoints: "))}
		}
	}
	cfg.SecretsKeys = text
	if ids, _ := fs.GetString("endpoint-metrics"); ids != "" {
		for _, id := range strings.Split(ids, ",") {
			if id = strings.TrimSpace(id); id != "" {
				cfg.EndpointMetrics = append(cfg.EndpointMetrics, id)
			}
		}
	}
	cfg.SpillAfter, _ = fs.GetDuration("spill-after")
	if cfg.DeliveryLogRetention, _ = fs.GetDuration("delivery-log-retention"); cfg.DeliveryLogRetention <= 0 {
		cfg.DeliveryLogRetention = -1 // 0 on the command line: record none
	}
	cfg.SpillSize, _ = fs.GetInt("spill-size")
	cfg.EndpointDisableAfter, _ = fs.GetDuration("endpoint-disable-after")
	cfg.OperatorWebhookURL, cfg.OperatorWebhookSecret = stringFrom(fs, operatorURLFlag), stringFrom(fs, operatorSecretFlag)
	cfg.EndpointMetricsMax, _ = fs.GetInt("endpoint-metrics-max")
	if cfg.EndpointMetricsMax == 0 {
		cfg.EndpointMetricsMax = -1 // 0 on the command line: none beyond --endpoint-metrics
	}
	if cfg.Egress, err = egressPolicy(fs); err != nil {
		return err
	}
	cfg.EgressProxy = stringFrom(fs, egressProxyFlag)
	return nil
}
