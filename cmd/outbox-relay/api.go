package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The API's settings that read the environment.
var (
	apiTokensFileFlag  = envFlag{name: "api-tokens-file", env: "OUTBOX_RELAY_API_TOKENS_FILE"}
	apiTokensEnv       = "OUTBOX_RELAY_API_TOKENS" // the tokens themselves: no flag, so none shows in ps
	apiKeyFileFlag     = envFlag{name: "api-signing-key-file", env: "OUTBOX_RELAY_API_SIGNING_KEY_FILE"}
	apiKeyEnv          = "OUTBOX_RELAY_API_SIGNING_KEY"
	apiShutdownTimeout = 10 * time.Second
)

func newAPICmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Serve the management API of partner endpoints (/api/v1)",
		Long: `Serves the management API (docs/guides/api.md) over HTTP: endpoints, their deliveries, stats,
recover and resend, and the event-type catalog, for operators (tokens from --api-tokens-file or
OUTBOX_RELAY_API_TOKENS) and tenants (tokens minted with outbox-relay api-token, verified with
--api-signing-key-file or OUTBOX_RELAY_API_SIGNING_KEY). Stateless: every request is one
transaction on the database, so any number of these processes can stand behind a load balancer;
it needs only DB_DSN and the keys. The relay applies every change at its commit.
It also answers GET /healthz. SIGINT or SIGTERM finishes the requests under way and exits 0.`,
		Example: `  DB_DSN=postgres://api@db/app OUTBOX_RELAY_API_TOKENS_FILE=/run/secrets/api-tokens \
  OUTBOX_RELAY_API_SIGNING_KEY_FILE=/run/secrets/api-signing-key outbox-relay api --addr :8080`,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.String("addr", ":8080", "the address to serve the API at")
	addAPIFlags(fs)
	addPortalFlags(fs)
	addSetting(fs, secretsKeyFileFlag.name)
	addEgressPolicyFlags(fs)
	addSetting(fs, egressProxyFlag.name)
	fs.String("relay-metrics-addr", ":9187", "the relay's --metrics-addr: an endpoint URL at it (localhost or this host) is refused")
	fs.String("metrics-addr", "", "serve the API's /metrics at this address; empty: not served")
	fs.Duration("test-timeout", api.DefaultTestTimeout, "how long POST /endpoints/{id}/test waits for the partner's answer")
	addLogFlags(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := newLogger(fs, os.Stderr)
		if err != nil {
			return err
		}
		dsn, err := requireDSN(fs)
		if err != nil {
			return err
		}
		addr, _ := fs.GetString("addr")
		reg := prometheus.NewRegistry()
		egress, err := egressPolicy(fs)
		if err != nil {
			return err
		}
		h, acfg, err := buildAPI(cmd.Context(), fs, dsn, "", egress, stringFrom(fs, egressProxyFlag), log, reg)
		if err != nil {
			return err
		}
		pool := acfg.Pool
		defer pool.Close()
		mux := http.NewServeMux()
		mux.Handle("/api/v1/", h)
		if err := mountPortal(mux, fs, h, acfg, log); err != nil {
			return err
		}
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
			if err := pool.Ping(r.Context()); err != nil {
				http.Error(w, "the database is unreachable", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		g, ctx := errgroup.WithContext(cmd.Context())
		g.Go(func() error { return serveHTTP(ctx, addr, mux, log, "api") })
		if m, _ := fs.GetString("metrics-addr"); m != "" {
			g.Go(func() error {
				return serveHTTP(ctx, m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), log, "metrics")
			})
		}
		return g.Wait()
	}
	return cmd
}

// addAPIFlags adds the flags of the API's keys, of run and api alike.
func addAPIFlags(fs *pflag.FlagSet) {
	addSetting(fs, apiTokensFileFlag.name)
	addSetting(fs, apiKeyFileFlag.name)
}

// buildAPI connects a pool for the API, checks that its schema is migrated for it, and
// builds the handler from the flags and the environment.
// fromFile is the schema of run's --config, if any; egress and proxy the relay's egress policy
// and proxy, which the API applies to URLs written and to its test attempts. It returns the
// API's config too: its pool (closed by the caller), keys and schema.
func buildAPI(ctx context.Context, fs *pflag.FlagSet, dsn, fromFile string, egress endpoints.Egress, proxy string,
	log zerolog.Logger, reg prometheus.Registerer) (*api.API, api.Config, error) {
	cfg := api.Config{Logger: log, Registerer: reg, Egress: egress, EgressProxy: proxy}
	var err error
	if cfg.OperatorTokens, err = readAPITokens(fs); err != nil {
		return nil, cfg, err
	}
	if cfg.SigningKeys, err = readSigningKeys(fs); err != nil {
		return nil, cfg, err
	}
	if len(cfg.OperatorTokens) == 0 && cfg.SigningKeys == nil {
		return nil, cfg, usageError{errors.New("the API has no way in: set operator tokens (--api-tokens-file, " +
			"OUTBOX_RELAY_API_TOKENS) and/or the tenant tokens' signing key (--api-signing-key-file, OUTBOX_RELAY_API_SIGNING_KEY)")}
	}
	if text, _, err := readSecretsKeys(fs); err != nil {
		return nil, cfg, err
	} else {
		cfg.SecretsKeys = text
	}
	if f := fs.Lookup("relay-metrics-addr"); f != nil {
		cfg.RelayMetricsAddr = f.Value.String()
	} else if f := fs.Lookup("metrics-addr"); f != nil {
		cfg.RelayMetricsAddr = f.Value.String()
	}
	if f := fs.Lookup("test-timeout"); f != nil {
		cfg.TestTimeout, _ = fs.GetDuration("test-timeout")
	}
	cfg.Version, _, _ = buildInfo()
	conn, s, err := connectSchema(ctx, fs, dsn, fromFile)
	if err != nil {
		return nil, cfg, err
	}
	err = relayTableIn(ctx, conn, schemaName(fs, fromFile), s, schema.APIAudit, 17)
	conn.Close(context.Background())
	if err != nil {
		return nil, cfg, err
	}
	cfg.Schema = s
	if cfg.Pool, err = pgxpool.New(ctx, dsn); err != nil {
		return nil, cfg, fmt.Errorf("connect: %w", err)
	}
	h, err := api.New(cfg)
	if err != nil {
		cfg.Pool.Close()
		return nil, cfg, usageError{errors.New(strings.TrimPrefix(err.Error(), "api: bad config: "))}
	}
	return h, cfg, nil
}

// readAPITokens reads the operator tokens: --api-tokens-file (or its variable), else
// OUTBOX_RELAY_API_TOKENS; none when neither is set.
func readAPITokens(fs *pflag.FlagSet) ([]api.OperatorToken, error) {
	text, from, err := readKeyText(fs, apiTokensFileFlag, apiTokensEnv, "operator tokens")
	if err != nil || text == "" {
		return nil, err
	}
	toks, err := api.ParseOperatorTokens(text)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %s", from, strings.TrimPrefix(err.Error(), "api: "))}
	}
	return toks, nil
}

// readSigningKeys reads the tenant tokens' keys: --api-signing-key-file (or its variable),
// else OUTBOX_RELAY_API_SIGNING_KEY; nil when neither is set.
func readSigningKeys(fs *pflag.FlagSet) (*api.Keys, error) {
	text, from, err := readKeyText(fs, apiKeyFileFlag, apiKeyEnv, "signing keys")
	if err != nil || text == "" {
		return nil, err
	}
	keys, err := api.ParseKeys(text)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %s", from, strings.TrimPrefix(err.Error(), "api: "))}
	}
	return keys, nil
}

// readKeyText returns the text of a file flag (or its variable), else of the variable env,
// and where it came from; empty when neither is set.
func readKeyText(fs *pflag.FlagSet, file envFlag, env, what string) (text, from string, err error) {
	if path := stringFrom(fs, file); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", "", usageError{fmt.Errorf("read the %s file: %w", what, err)}
		}
		if strings.TrimSpace(string(b)) == "" {
			return "", "", usageError{fmt.Errorf("%s is empty: put the %s in it", path, what)}
		}
		return string(b), path, nil
	}
	return os.Getenv(env), env, nil
}

// serveHTTP serves h at addr until ctx ends, then finishes the requests under way (up to
// apiShutdownTimeout).
func serveHTTP(ctx context.Context, addr string, h http.Handler, log zerolog.Logger, what string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve the %s at %s: %w", what, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	log.Info().Str("addr", ln.Addr().String()).Msg("serving the " + what)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve the %s: %w", what, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), apiShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-errc // Serve has returned ErrServerClosed
	return err
}

func newAPITokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "api-token --tenant ID [--ttl 1h]",
		Short: "Print a tenant token for the management API",
		Long: `Prints a tenant token: a JWT (HS256) naming the tenant, signed with the first key of
--api-signing-key-file (or OUTBOX_RELAY_API_SIGNING_KEY), valid for --ttl. It sees and changes only
that tenant's endpoints. An application mints the same with api.Keys.Mint (docs/guides/api.md).`,
		Example: `  OUTBOX_RELAY_API_SIGNING_KEY_FILE=/run/secrets/api-signing-key outbox-relay api-token --tenant acme --ttl 1h`,
	}
	fs := cmd.Flags()
	fs.String("tenant", "", "the tenant the token acts for (outbox.Event.TenantID); required")
	fs.Duration("ttl", time.Hour, "how long the token is valid (1s to 744h)")
	fs.Bool("json", false, "print {token, tenant, expires_at, key_id}")
	addSetting(fs, apiKeyFileFlag.name)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		tenant, _ := fs.GetString("tenant")
		if tenant == "" {
			return usageError{errors.New("--tenant is required: the id your application gives that customer (outbox.Event.TenantID)")}
		}
		ttl, _ := fs.GetDuration("ttl")
		keys, err := readSigningKeys(fs)
		if err != nil {
			return err
		}
		if keys == nil {
			return usageError{errors.New("no signing key: set --api-signing-key-file or OUTBOX_RELAY_API_SIGNING_KEY " +
				"(32 random bytes in base64: openssl rand -base64 32)")}
		}
		tok, err := keys.Mint(api.Token{Tenant: tenant, TTL: ttl})
		if err != nil {
			return usageError{errors.New(strings.TrimPrefix(err.Error(), "api: "))}
		}
		if asJSON, _ := fs.GetBool("json"); asJSON {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"token": tok, "tenant": tenant,
				"expires_at": time.Now().Add(ttl).UTC().Truncate(time.Second), "key_id": keys.KeyID()})
		}
		fmt.Fprintln(cmd.OutOrStdout(), tok)
		return nil
	}
	return cmd
}
