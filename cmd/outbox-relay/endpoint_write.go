package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/settings"
	"github.com/outbox-relay/outbox-relay/signature"
)

// addEndpointFields adds the flags of an endpoint's writable fields. On update only the flags
// given change anything; the defaults shown are add's.
func addEndpointFields(fs *pflag.FlagSet, add bool) {
	fs.String("url", "", "the partner's absolute URL, https:// (or http://, for a partner on a private network or a test; "+
		"the URL guard applies to both) (required for add)")
	fs.String("tenant", "", "receive only this tenant's events (outbox.Event.TenantID); left out: every tenant's events")
	fs.String("event-types", "*", "comma-separated patterns: order.created, order.* (every type starting with order.), * (all)")
	fs.String("aggregate-types", "", "comma-separated aggregate types to receive; empty: every type")
	fs.String("secret", "", "the signing secret; left out: a strong one is generated and printed once (whsec_<base64> for standard-webhooks)")
	fs.String("scheme", "x-signature", "signature scheme: x-signature or standard-webhooks")
	fs.String("format", "raw", "request format: raw or cloudevents (batches are CloudEvents batches)")
	fs.Int("batch-max-events", 1, "events per request; 1 = one event per request")
	fs.Int("batch-max-bytes", 1<<20, "summed payload bytes per batch")
	fs.Duration("batch-linger", 5*time.Millisecond, "how long a batch that is not full waits for more events (whole milliseconds)")
	fs.Int("rate-limit", 0, "most requests to this endpoint in any one second; 0 = no limit")
	fs.Int("max-in-flight", 0, fmt.Sprintf("most concurrent requests to this endpoint; 0 = %d (the pipeline's --max-in-flight is the pool all its endpoints share)",
		settings.EndpointMaxInFlight))
	fs.Duration("spill-after", 0, "how long the endpoint's oldest undelivered event waits before its events go to its backlog off the WAL (100ms to 168h); 0 = the pipeline's --spill-after")
	fs.String("metadata", "", `your own JSON object about the endpoint, e.g. '{"customer":"Acme"}' (the relay does not read it)`)
	fs.String("description", "", "what the endpoint is, for people (up to 1024 bytes; the relay does not read it)")
	fs.Bool("allow-private-url", false, "let the URL reach link-local and metadata addresses and the relay's metrics address (refused otherwise)")
	fs.String("metrics-addr", ":9187", "the relay's --metrics-addr: a URL at it (localhost or this host) is refused unless --allow-private-url")
	fs.Bool("deny-private", false, "the URL came from a tenant: refuse loopback, private, CGNAT, link-local and metadata addresses for this endpoint, "+
		"when written and at every connection (--deny-private=false on update lifts it)")
	fs.String("egress-proxy", "", "this endpoint's outbound proxy, http://host:port, or direct for none; empty: the relay's --egress-proxy")
	addEgressPolicyFlags(fs)
	if add {
		fs.String("id", "", "the endpoint's id: a-z, 0-9, _ . - (up to 63); left out: ep_ and 16 random hex digits")
		fs.Bool("paused", false, "add it paused: its events are kept from its creation and delivered once resumed")
	} else {
		fs.Bool("no-tenant", false, "make the endpoint receive every tenant's events (removes its tenant)")
	}
	addSecretsKeyFlag(fs)
}

func newEndpointAddCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add --url URL [flags]",
		Short: "Add an endpoint; prints its id and, when generated, its secret (once)",
		Long: `Adds a row to outbox_endpoints. A pipeline run with endpoints delivers to it the events committed
after this one, that match its tenant, event types and aggregate types. Without --secret a strong
secret is generated and printed this once (list and show print only its fingerprint). Refused with
the reason (exit 2) when the URL is malformed or points at a link-local or metadata address or the
relay's metrics address, a pattern can never match, or the secret does not suit the scheme; exit 1
when the id exists.`,
		Example: `  outbox-relay endpoint add --id acme --url https://acme.example/webhooks --tenant acme --event-types 'order.*,invoice.paid'
  outbox-relay endpoint add --url https://hooks.globex.example/in --scheme standard-webhooks --json`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	addEndpointCommon(fs)
	addEndpointFields(fs, true)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ep := endpoints.Endpoint{State: endpoints.Enabled}
		if paused, _ := fs.GetBool("paused"); paused {
			ep.State = endpoints.Paused
		}
		ep.ID, _ = fs.GetString("id")
		if fs.Changed("id") && ep.ID == "" {
			return usageError{errors.New("--id is empty (an unset variable?): give the id, or leave --id out to generate one")}
		}
		if err := endpointFields(fs, &ep, true); err != nil {
			return err
		}
		return withStore(cmd, func(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) error {
			got, err := eps.Add(ctx, conn, ep)
			if err != nil {
				return endpointError(err, ep.ID)
			}
			generated := !fs.Changed("secret")
			if generated {
				warnClear(cmd, eps)
			}
			if !generated {
				got.Secret = ""
			}
			printWarnings(cmd, got.Warnings)
			return printWritten(cmd, "added", got)
		})
	}
	return cmd
}

func newEndpointUpdateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "update ID [flags]",
		Short: "Change an endpoint's URL, subscription or delivery settings",
		Long: `Changes the fields given by flags and nothing else, in one transaction (the row is locked
meanwhile), with the checks of add. --secret replaces every secret (rotate-secret keeps the old one
signing for a while); a new --scheme without --secret generates a secret of that scheme and prints
it once. --no-tenant makes the endpoint receive every tenant's events; --aggregate-types ''
every aggregate type.`,
		Example: `  outbox-relay endpoint update acme --url https://acme.example/v2/webhooks
  outbox-relay endpoint update acme --event-types '*' --rate-limit 50`,
		Args: oneID,
	}
	fs := cmd.Flags()
	addEndpointCommon(fs)
	addEndpointFields(fs, false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id := args[0]
		if !anyFieldChanged(fs) {
			return usageError{errors.New("nothing to change: give the flags to change, e.g. --url or --event-types")}
		}
		if noTenant, _ := fs.GetBool("no-tenant"); noTenant && fs.Changed("tenant") {
			return usageError{errors.New("--tenant and --no-tenant contradict each other: pass one")}
		}
		var fieldErr error
		return withStore(cmd, func(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) error {
			got, err := eps.Update(ctx, conn, id, func(ep *endpoints.Endpoint) error {
				fieldErr = endpointFields(fs, ep, false)
				return fieldErr
			})
			if fieldErr != nil {
				return fieldErr
			}
			if err != nil {
				return endpointError(err, id)
			}
			if fs.Changed("secret") {
				got.Secret = ""
			} else if got.Secret != "" {
				warnClear(cmd, eps)
			}
			printWarnings(cmd, got.Warnings)
			return printWritten(cmd, "updated", got)
		})
	}
	return cmd
}

// fieldFlags are the flags endpointFields reads.
var fieldFlags = []string{"url", "tenant", "no-tenant", "event-types", "aggregate-types", "secret", "scheme", "format",
	"batch-max-events", "batch-max-bytes", "batch-linger", "rate-limit", "max-in-flight", "metadata", "description", "allow-private-url",
	"deny-private", "egress-proxy"}

func anyFieldChanged(fs *pflag.FlagSet) bool {
	for _, f := range fieldFlags {
		if fs.Changed(f) {
			return true
		}
	}
	return false
}

// endpointFields applies the field flags to ep: every flag on add (the defaults included), only
// the flags given on update. A bad value is a usage error.
func endpointFields(fs *pflag.FlagSet, ep *endpoints.Endpoint, add bool) error {
	set := func(name string) bool { return add || fs.Changed(name) }
	if set("url") {
		ep.URL, _ = fs.GetString("url")
		if ep.URL == "" {
			return usageError{errors.New("--url is required: the partner's absolute https:// URL, e.g. https://acme.example/webhooks")}
		}
	}
	if set("tenant") {
		ep.TenantID, _ = fs.GetString("tenant")
		if fs.Changed("tenant") && ep.TenantID == "" {
			return usageError{errors.New("--tenant is empty (an unset variable?): give the tenant id; an endpoint without one " +
				"receives every tenant's events, so say so: leave --tenant out on add, --no-tenant on update")}
		}
	}
	if noTenant, _ := fs.GetBool("no-tenant"); noTenant {
		ep.TenantID = ""
	}
	if set("event-types") {
		v, _ := fs.GetString("event-types")
		if ep.EventTypes = splitList(v); len(ep.EventTypes) == 0 {
			return usageError{errors.New("--event-types is empty: give at least one pattern, '*' for every type")}
		}
	}
	if set("aggregate-types") {
		v, _ := fs.GetString("aggregate-types")
		ep.AggregateTypes = splitList(v)
	}
	if set("scheme") {
		v, _ := fs.GetString("scheme")
		s, err := signature.ParseScheme(v)
		if err != nil {
			return usageError{fmt.Errorf("--scheme: %w", err)}
		}
		ep.Scheme = s
	}
	if fs.Changed("secret") {
		if ep.Secret, _ = fs.GetString("secret"); ep.Secret == "" {
			return usageError{errors.New("--secret is empty: give the secret, or leave --secret out to generate one")}
		}
	}
	return deliveryFields(fs, ep, set)
}

func deliveryFields(fs *pflag.FlagSet, ep *endpoints.Endpoint, set func(string) bool) error {
	if set("format") {
		ep.Format, _ = fs.GetString("format")
	}
	if set("batch-max-events") {
		ep.BatchMaxEvents, _ = fs.GetInt("batch-max-events")
	}
	if set("batch-max-bytes") {
		ep.BatchMaxBytes, _ = fs.GetInt("batch-max-bytes")
	}
	if set("batch-linger") {
		ep.BatchLinger, _ = fs.GetDuration("batch-linger")
	}
	if set("rate-limit") {
		ep.RateLimit, _ = fs.GetInt("rate-limit")
	}
	if set("max-in-flight") {
		ep.MaxInFlight, _ = fs.GetInt("max-in-flight")
	}
	if set("spill-after") {
		ep.SpillAfter, _ = fs.GetDuration("spill-after")
	}
	if set("allow-private-url") {
		ep.AllowPrivateURL, _ = fs.GetBool("allow-private-url")
	}
	if set("deny-private") {
		ep.DenyPrivate, _ = fs.GetBool("deny-private")
	}
	if set("egress-proxy") {
		ep.EgressProxy, _ = fs.GetString("egress-proxy")
	}
	if set("description") {
		ep.Description, _ = fs.GetString("description")
	}
	if set("metadata") {
		v, _ := fs.GetString("metadata")
		ep.Metadata = nil
		if v != "" {
			if !json.Valid([]byte(v)) {
				return usageError{fmt.Errorf(`--metadata is not JSON: give an object, e.g. '{"customer":"Acme"}'`)}
			}
			ep.Metadata = json.RawMessage(v)
		}
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping blanks around and between entries.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// printWarnings prints what the endpoint functions accepted with a warning, to stderr.
func printWarnings(cmd *cobra.Command, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
	}
}
