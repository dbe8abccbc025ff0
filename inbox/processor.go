package inbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/rs/zerolog"
)

// Processor is the inbox without HTTP, for a consumer that reads the relay's events from a
// broker (NATS JetStream, Kafka): Process verifies nothing (the broker authenticated the
// publisher), and otherwise does what the Handler does after the signature check: read the
// event from the message's headers and body, record its id in inbox_events and run the
// ProcessFunc in the same transaction, once per event id. It is safe for concurrent use.
type Processor struct {
	store  store
	q      queries
	schema string
	log    zerolog.Logger
	stats  counters

	retention *retention // nil: Config.Retention is zero
	closeOnce sync.Once
}

// NewProcessor returns a Processor that records events through db and applies first-seen ones
// with process, tuned by cfg (Schema, Retention, RetryHorizon and Logger; the rest of Config
// is for the Handler). With cfg.Retention set it starts a goroutine that Close stops. The
// table must exist (Migrate, or `outbox-relay migrate --inbox-only`).
func NewProcessor(db DB, process ProcessFunc, cfg Config) (*Processor, error) {
	if nilDB(db) || process == nil {
		return nil, errors.New("inbox: NewProcessor needs a database and a process func")
	}
	return newProcessor(pgxStore{db: db, fn: process}, cfg)
}

// NewSQLProcessor is NewProcessor for database/sql: process gets the inbox's transaction as a
// *sql.Tx.
func NewSQLProcessor(db SQLDB, process SQLProcessFunc, cfg Config) (*Processor, error) {
	if nilDB(db) || process == nil {
		return nil, errors.New("inbox: NewSQLProcessor needs a database and a process func")
	}
	return newProcessor(sqlStore{db: db, fn: process}, cfg)
}

func newProcessor(s store, cfg Config) (*Processor, error) {
	p := &Processor{store: s, q: newQueries(cfg.Schema), schema: cfg.Schema, log: cfg.Logger}
	if cfg.Retention != 0 {
		opts := PruneOptions{OlderThan: cfg.Retention, RetryHorizon: cfg.RetryHorizon, Schema: cfg.Schema}
		if err := opts.check(); err != nil {
			return nil, fmt.Errorf("inbox: Config.Retention: %w", err)
		}
		if singleConn(s) {
			return nil, errors.New("inbox: Config.Retention prunes beside the deliveries, so it needs a pool " +
				"(*pgxpool.Pool, *sql.DB), not a single connection")
		}
		p.retention = startRetention(s, opts, cfg.Logger)
	}
	return p, nil
}

// Result is what Process did with one message.
type Result struct {
	// Processed counts the events applied and committed: 1 for a new event, up to the batch's
	// size for a CloudEvents batch.
	Processed int
	// Duplicates counts events already recorded, skipped without running the ProcessFunc.
	Duplicates int
}

// Process reads the events of one message (the relay's headers, in any case, and its body as
// the payload: see ParseEvents; a CloudEvents batch is one transaction, as over HTTP) and
// applies each event that inbox_events has not recorded, in one transaction with its record.
// header takes an http.Header, a nats.Header, or a map built from Kafka record headers.
//
// Acknowledge the message only after Process returned nil: the effect has committed (or it
// had before, and this was a duplicate). On an error nothing was committed. An error wrapping
// ErrMalformed or ErrUnsupported will fail on every redelivery: terminate or park the message.
// Any other error (the ProcessFunc's, a panic's, the database's) is worth a redelivery.
func (p *Processor) Process(ctx context.Context, header map[string][]string, body []byte) (Result, error) {
	h := make(http.Header, len(header))
	for k, vs := range header {
		for _, v := range vs {
			h.Add(k, v) // canonicalises the name, as an http.Header's are
		}
	}
	evs, f, err := ParseEvents(h, body)
	if err != nil {
		p.stats.rejected.Add(1)
		return Result{}, fmt.Errorf("inbox: %w", err)
	}
	if f != FormatBatch {
		dup, err := p.deliver(ctx, evs[0], "")
		if err != nil {
			p.count(err)
			return Result{}, fmt.Errorf("inbox: event %s: %w", evs[0].ID, err)
		}
		if dup {
			p.stats.duplicates.Add(1)
			return Result{Duplicates: 1}, nil
		}
		p.stats.processed.Add(1)
		return Result{Processed: 1}, nil
	}
	applied, err := p.deliverBatch(ctx, evs, "")
	if err != nil {
		p.count(err)
		return Result{}, fmt.Errorf("inbox: batch of %d events: %w", len(evs), err)
	}
	var r Result
	for _, a := range applied {
		if a {
			r.Processed++
		} else {
			r.Duplicates++
		}
	}
	p.stats.processed.Add(uint64(r.Processed))
	p.stats.duplicates.Add(uint64(r.Duplicates))
	return r, nil
}

// count adds a failed delivery to the Stats field its status code belongs to.
func (p *Processor) count(err error) {
	switch StatusCode(err) {
	case http.StatusBadRequest:
		p.stats.rejected.Add(1)
	case http.StatusServiceUnavailable:
		p.stats.unavailable.Add(1)
	default:
		p.stats.failed.Add(1)
	}
}

// Stats returns the counts so far: see Stats for the fields; Rejected counts messages that are
// not relay events.
func (p *Processor) Stats() Stats { return p.stats.snapshot() }

// Close stops the background pruning of Config.Retention and waits for it to return; a prune
// under way is cancelled between statements, and what it deleted stays deleted. It is a no-op
// without Retention, and returns nil. Calling it again does nothing. Process keeps working
// after Close.
func (p *Processor) Close() error {
	p.closeOnce.Do(func() {
		if p.retention != nil {
			p.retention.stop()
		}
	})
	return nil
}
