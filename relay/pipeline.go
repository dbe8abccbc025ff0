package relay

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/signature"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// Pipeline is one destination fed from the outbox: a publication with an optional row filter,
// its own slot, and one webhook with its own policies. Each pipeline is streamed, ordered,
// retried, dead-lettered and confirmed independently of the others. Zero values are documented
// per field; Config.Pipelines applies the defaults.
type Pipeline struct {
	// Name is [a-z0-9_]{1,40}, unique in a Config. It labels the pipeline's series
	// (pipeline="..."), its log lines, and its dead letters and parked aggregates. Required.
	Name string
	// Filter is an SQL boolean over outbox_events columns (PostgreSQL 15+), applied by the
	// walsender: filtered-out rows never cross the wire. A changed filter alters the publication
	// at start and applies to rows committed after that. Empty: every row.
	Filter string
	// Slot and Publication name the pipeline's slot and publication. Empty:
	// outbox_relay_<Name>. (The pipeline `outbox-relay run` builds from flags uses
	// outbox_relay for both, today's names.)
	Slot        string
	Publication string

	// WebhookURL is the destination, unless Destination names a broker. Required otherwise.
	WebhookURL string
	// Secrets sign each request, the first is current (several: rotation). Required.
	Secrets []string
	// Scheme is the signature scheme; the zero value is signature.SchemeXSignature.
	Scheme signature.Scheme
	// RequestTimeout bounds each request. Zero: the webhook client's default (10s).
	RequestTimeout time.Duration
	// RetryMin and RetryMax are the first and the largest retry delay. Zero: 1s and 10m.
	RetryMin, RetryMax time.Duration
	// MaxAttempts dead-letters an event after this many attempts: 0 means about a day of
	// retries at RetryMax (5 for a shadow pipeline), a negative value retries forever (not
	// allowed for a shadow).
	MaxAttempts int
	// MaxInFlight is the number of concurrent deliveries. Zero: 64.
	MaxInFlight int
	// MaxBufferedEvents and MaxBufferedBytes bound what is received and not yet delivered.
	// Zero: 8192 and 32 MiB.
	MaxBufferedEvents int
	MaxBufferedBytes  int
	// RateLimit, if positive, is the most requests this destination sees in any one second,
	// retries included. Zero: unlimited.
	RateLimit int
	// Shadow makes the pipeline best effort: after MaxAttempts failed attempts an event is
	// recorded as abandoned (log line, outbox_relay_events_abandoned_total, a row in
	// outbox_pipeline_events) and settled. A shadow never parks, never dead-letters, never
	// writes the row's status, and never holds its slot back for longer than its attempts take.
	// False: a normal pipeline.
	Shadow bool
	// Backfill chooses what the pipeline receives from before its slot existed: if true, the
	// rows still pending (and matching Filter) when the slot is created are delivered first
	// (`initial: pending`); if false (the zero value, `initial: none`), nothing.
	Backfill bool
	// Delivery is the request format, batching, compression and marks mode. The zero value is
	// raw, one event per request, uncompressed, rows marked done.
	Delivery Delivery
	// Destination, if set, replaces the webhook: a broker (a natsdest.Config or a
	// kafkadest.Config), or a program's own (destination.Opened). WebhookURL, Secrets, Scheme,
	// Delivery.Format and Delivery.Compression are then left empty. Nil: the webhook of
	// WebhookURL.
	Destination destination.Opener
	// Endpoints, if true, replaces the webhook with the partner endpoints of outbox_endpoints
	// (`endpoints: true`, `run --endpoints`; docs/guides/endpoints.md): each event goes to every
	// endpoint subscribed to it, each endpoint with its own URL, secrets, scheme, format, rate
	// limit, in-flight cap, order, retries and dead letters, all from one slot. WebhookURL,
	// Secrets, Scheme, Destination and Delivery (but Marks) are then left empty; MaxInFlight is
	// the deliveries all endpoints share (at least 256). False: one destination.
	Endpoints bool
	// SpillAfter is, with Endpoints, how long an endpoint's oldest undelivered event waits
	// before the endpoint spills to its backlog off the WAL (`spill_after`, `--spill-after`),
	// unless the endpoint's row sets spill_after_ms; SpillSize is how many events an endpoint
	// holds, delivering none for a second, before it spills (`spill_size`, `--spill-size`).
	// Zero: 30s and 1000.
	SpillAfter time.Duration
	SpillSize  int
	// Breaker, Backlog and DeliveryLog give a pipeline of one destination what every endpoint
	// has (`breaker`, `backlog`, `delivery_log`; --breaker, --backlog, --delivery-log): a circuit
	// breaker (after 10 failed attempts in a row, one probe at a time, 1s doubling to a minute),
	// a backlog off the WAL (spilled after SpillAfter, or SpillSize events with no delivery for a
	// second), and the delivery log (`outbox-relay deliveries`). False: none of them; ignored
	// with Endpoints, which always has them (the log unless Config.DeliveryLogRetention is negative).
	Breaker, Backlog, DeliveryLog bool
	// EndpointDisableAfter is, with Endpoints, how long an endpoint fails without a success
	// before the relay disables it (`endpoint_disable_after`, `--endpoint-disable-after`), with
	// a reason naming how long and the last error. Zero: 120h (five days); negative: never.
	EndpointDisableAfter time.Duration
	// OnGone is what a 410 Gone answer does: the zero value publisher.GonePause pauses the
	// pipeline (durably, until `outbox-relay resume`) and leaves the event undelivered;
	// publisher.GoneRetry retries it like any failed attempt.
	OnGone publisher.GoneAction

	// Shards splits the pipeline into this many shards (docs/guides/shards.md): shard i is a pipeline
	// whose row filter adds ShardExpr(Shards) = i, named ShardName(Name, Shards, i) in the
	// database (slot and publication likewise, from Slot and Publication when given), with its
	// own leader, state and series (labels pipeline=Name, shard=i). Every aggregate lives in
	// exactly one shard. The shards share the destination. 0 or 1: not sharded.
	Shards int
	// Shard, if set, is the one shard this process runs (0-based, like a pod ordinal). Nil:
	// Config.Shard if that is set, else every shard.
	Shard *int

	shard      shardInfo // set on the pipelines expanded from a sharded one
	ownsStatus bool      // set by Config.pipelines: see StatusOwner
	move       *cdc.Move // set by Run from Setup: the slot moves from another server first
}

// DefaultPipeline is the name of the pipeline `outbox-relay run` builds from its flags.
const DefaultPipeline = "default"

// DefaultShadowMaxAttempts is a shadow pipeline's MaxAttempts when it is zero.
const DefaultShadowMaxAttempts = settings.ShadowMaxAttempts

var pipelineName = regexp.MustCompile(`^[a-z0-9_]{1,40}$`)

// ErrPipeline is wrapped by the errors of a pipeline list that cannot run.
var ErrPipeline = errors.New("invalid pipeline")

// Validate checks one pipeline's settings; its errors name the pipeline and the fix.
func (p *Pipeline) Validate() error {
	if !pipelineName.MatchString(p.Name) {
		return fmt.Errorf("%w: name %q must match [a-z0-9_]{1,40}", ErrPipeline, p.Name)
	}
	if err := p.validateShards(); err != nil {
		return err
	}
	if err := settings.OneDestination(p.destinations()...); err != nil {
		return fmt.Errorf("%w %q: %w", ErrPipeline, p.Name, err)
	}
	if p.Destination != nil {
		return p.validatePolicies()
	}
	if p.Endpoints {
		return p.validateEndpoints()
	}
	if len(p.Secrets) == 0 {
		return fmt.Errorf("%w %q: no webhook secret (secret or secret_file)", ErrPipeline, p.Name)
	}
	return p.validatePolicies()
}

// validatePolicies checks the settings every kind of destination shares.
func (p *Pipeline) validatePolicies() error {
	if p.Shadow && p.MaxAttempts < 0 {
		return fmt.Errorf("%w %q: a shadow pipeline cannot retry forever (max_attempts %d); give it a positive max_attempts",
			ErrPipeline, p.Name, p.MaxAttempts)
	}
	if p.RateLimit < 0 {
		return fmt.Errorf("%w %q: rate_limit %d is negative", ErrPipeline, p.Name, p.RateLimit)
	}
	return nil
}

// WithDefaults returns p with the defaults Run applies (slot and publication names, limits,
// attempts).
func (p Pipeline) WithDefaults() Pipeline {
	p.defaults()
	return p
}

func (p *Pipeline) defaults() {
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&p.MaxInFlight, DefaultMaxInFlight)
	set(&p.MaxBufferedEvents, DefaultMaxBufferedEvents)
	set(&p.MaxBufferedBytes, DefaultMaxBufferedBytes)
	if p.Slot == "" {
		p.Slot = "outbox_relay_" + p.Name
	}
	if p.Publication == "" {
		p.Publication = "outbox_relay_" + p.Name
	}
	if p.MaxAttempts == 0 {
		if p.Shadow {
			p.MaxAttempts = DefaultShadowMaxAttempts
		} else {
			p.MaxAttempts = AttemptsForADay(p.RetryMin, p.RetryMax)
		}
	}
}

// pipelines returns the pipelines to run, defaults applied: Config.Pipelines, or, when that is
// empty, the one named "default" that the flat fields describe. It checks names and
// uniqueness, slots and publications shared by two pipelines.
func (c *Config) pipelines() ([]Pipeline, error) {
	if len(c.Pipelines) == 0 {
		p := Pipeline{Name: DefaultPipeline, Slot: c.Slot, Publication: c.Publication, WebhookURL: c.WebhookURL,
			Secrets: c.Secrets, Scheme: c.Scheme, RequestTimeout: c.RequestTimeout, RetryMin: c.RetryMin,
			RetryMax: c.RetryMax, MaxAttempts: c.MaxAttempts, MaxInFlight: c.MaxInFlight,
			MaxBufferedEvents: c.MaxBufferedEvents, MaxBufferedBytes: c.MaxBufferedBytes, Backfill: !c.NoBackfill,
			Delivery: c.Delivery, Destination: c.Destination, OnGone: c.Control.OnGone, Endpoints: c.Endpoints,
			SpillAfter: c.SpillAfter, SpillSize: c.SpillSize, EndpointDisableAfter: c.EndpointDisableAfter,
			Breaker: c.Breaker, Backlog: c.Backlog, DeliveryLog: c.DeliveryLog}
		if p.Slot == "" {
			p.Slot = DefaultSlot
		}
		if p.Publication == "" {
			p.Publication = DefaultPublication
		}
		return c.flagPipelines(p)
	}
	expanded, err := c.expand()
	if err != nil {
		return nil, err
	}
	out := make([]Pipeline, len(expanded))
	names, slots, pubs := map[string]bool{}, map[string]string{}, map[string]string{}
	for i, p := range expanded {
		if names[p.Name] {
			return nil, fmt.Errorf("%w: two pipelines are named %q; names must be unique", ErrPipeline, p.Name)
		}
		names[p.Name] = true
		p.defaults()
		if other, ok := slots[p.Slot]; ok {
			return nil, fmt.Errorf("%w: pipelines %q and %q share slot %q; each needs its own", ErrPipeline, other, p.Name, p.Slot)
		}
		if other, ok := pubs[p.Publication]; ok {
			return nil, fmt.Errorf("%w: pipelines %q and %q share publication %q; each needs its own",
				ErrPipeline, other, p.Name, p.Publication)
		}
		slots[p.Slot], pubs[p.Publication] = p.Name, p.Name
		out[i] = p
	}
	return out, nil
}

// flagPipelines returns the flag path's pipeline p, or its shards with --shards (and the one
// --shard selects): each owns the status of its own rows, as the unsharded pipeline owns all.
func (c *Config) flagPipelines(p Pipeline) ([]Pipeline, error) {
	p.Shards, p.Shard = c.Shards, c.Shard
	if c.Shard != nil && c.Shards <= 1 {
		return nil, fmt.Errorf("%w: --shard %d, but the pipeline is not sharded: add --shards N (the same N on every "+
			"shard's relay), or drop --shard", ErrPipeline, *c.Shard)
	}
	if err := p.validateShards(); err != nil {
		return nil, err
	}
	out := p.expandShards()
	for i := range out {
		out[i].defaults()
		out[i].ownsStatus = true
		out[i].shard.label, out[i].shard.pinned = c.Shards > 1, c.Shard != nil
	}
	return out, nil
}

// expand validates Config.Pipelines and returns them with each sharded pipeline replaced by its
// shards (those Pipeline.Shard or Config.Shard select), the status owner marked (all shards of
// a sharded owner own the status of their own rows, which no other shard sees).
func (c *Config) expand() ([]Pipeline, error) {
	for _, p := range c.Pipelines {
		if err := p.Validate(); err != nil {
			return nil, err
		}
	}
	owner := StatusOwner(c.Pipelines)
	sharded := false
	for _, p := range c.Pipelines {
		sharded = sharded || p.Shards > 1
	}
	if c.Shard != nil && !sharded {
		return nil, fmt.Errorf("%w: --shard %d, but no pipeline is sharded: set shards: N on the pipeline to split, "+
			"or drop --shard", ErrPipeline, *c.Shard)
	}
	var out []Pipeline
	for i, p := range c.Pipelines {
		if p.Shards > 1 && p.Shard == nil && c.Shard != nil {
			sel := *c.Shard
			p.Shard = &sel
			if err := p.validateShards(); err != nil {
				return nil, fmt.Errorf("%w (from --shard)", err)
			}
		}
		p.ownsStatus = i == owner
		for _, s := range p.expandShards() {
			s.shard.label, s.shard.pinned = sharded, p.Shard != nil
			out = append(out, s)
		}
	}
	return out, nil
}

// StatusOwner returns the index of the pipeline that writes the rows' own status, processed_at,
// retries and last_error columns, or -1 when none does. With one pipeline (not a shadow) it is
// that one, exactly as before pipelines. With several: the pipeline named "default" if it is
// not a shadow; else the first non-shadow pipeline without a filter (it sees every row). The
// other pipelines keep their truth in outbox_pipeline_events and outbox_parked_aggregates
// (column pipeline), which `outbox-relay status` reports per pipeline. With no owner the rows
// stay 'pending'; retention prunes them once every pipeline's slot confirmed them (outbox.Prune).
func StatusOwner(ps []Pipeline) int {
	if len(ps) == 1 {
		if ps[0].Shadow {
			return -1
		}
		return 0
	}
	for i, p := range ps {
		if p.Name == DefaultPipeline && !p.Shadow {
			return i
		}
	}
	for i, p := range ps {
		if !p.Shadow && p.Filter == "" {
			return i
		}
	}
	return -1
}

// destinations names the destinations p sets, for settings.OneDestination.
func (p *Pipeline) destinations() []string {
	var given []string
	if p.WebhookURL != "" {
		given = append(given, "a webhook URL")
	}
	if p.Destination != nil {
		given = append(given, "Destination")
	}
	if p.Endpoints {
		given = append(given, "endpoints")
	}
	return given
}
