package relaytest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Committed is an event whose transaction committed.
type Committed struct {
	ID        string
	Aggregate string // type/id
	Seq       int    // 1-based, per aggregate, in commit order
}

// Workload describes what Produce writes.
type Workload struct {
	Events     int     // committed events to write
	Aggregates int     // distinct aggregates
	MaxTxSize  int     // events per transaction, uniformly 1..MaxTxSize
	Rollback   float64 // fraction of transactions rolled back
	Writers    int     // concurrent writers; each owns a disjoint set of aggregates
	Type       string  // aggregate type; default "order"
	Schema     string  // the schema of outbox_events (outbox.Schema); default: the search_path's
}

// Result is what Produce wrote.
type Result struct {
	Committed  []Committed
	RolledBack []string // ids of events written in rolled-back transactions
}

// Produce writes the workload through outbox.Enqueue. Aggregates are partitioned across
// writers, so each aggregate's commit order is its writer's order, and its payloads carry
// {"seq": n} with n rising from 1 without gaps over committed events.
func Produce(ctx context.Context, pool *pgxpool.Pool, w Workload) (Result, error) {
	if w.Writers <= 0 {
		w.Writers = 1
	}
	if w.Type == "" {
		w.Type = "order"
	}
	w.Aggregates = max(w.Aggregates, w.Writers)
	results := make([]Result, w.Writers)
	errs := make([]error, w.Writers)
	var wg sync.WaitGroup
	for i := 0; i < w.Writers; i++ {
		share := w.Events / w.Writers
		if i == 0 {
			share += w.Events % w.Writers
		}
		wg.Add(1)
		go func(i, share int) {
			defer wg.Done()
			results[i], errs[i] = writer(ctx, pool, w, i, share)
		}(i, share)
	}
	wg.Wait()
	var all Result
	for i := range results {
		if errs[i] != nil {
			return all, errs[i]
		}
		all.Committed = append(all.Committed, results[i].Committed...)
		all.RolledBack = append(all.RolledBack, results[i].RolledBack...)
	}
	return all, nil
}

func writer(ctx context.Context, pool *pgxpool.Pool, w Workload, idx, n int) (Result, error) {
	var res Result
	var aggs []string
	for a := idx; a < w.Aggregates; a += w.Writers {
		aggs = append(aggs, fmt.Sprint(a))
	}
	seq := map[string]int{}
	for len(res.Committed) < n {
		size := 1 + rand.IntN(max(w.MaxTxSize, 1))
		size = min(size, n-len(res.Committed))
		rollback := rand.Float64() < w.Rollback
		evs, err := writeTx(ctx, pool, w.Schema, w.Type, aggs, seq, size, rollback)
		if err != nil {
			return res, err
		}
		if rollback {
			for _, e := range evs {
				res.RolledBack = append(res.RolledBack, e.ID)
			}
			continue
		}
		for _, e := range evs {
			seq[e.Aggregate]++
		}
		res.Committed = append(res.Committed, evs...)
	}
	return res, nil
}

func writeTx(ctx context.Context, pool *pgxpool.Pool, schema, typ string, aggs []string, seq map[string]int,
	size int, rollback bool) ([]Committed, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	next := map[string]int{}
	var evs []Committed
	for i := 0; i < size; i++ {
		agg := aggs[rand.IntN(len(aggs))]
		next[agg]++
		s := seq[typ+"/"+agg] + next[agg]
		id, err := outbox.Schema(schema).Enqueue(ctx, tx, outbox.Event{AggregateType: typ, AggregateID: agg,
			EventType: typ + ".changed", Payload: map[string]int{"seq": s}})
		if err != nil {
			return nil, err
		}
		evs = append(evs, Committed{ID: id.String(), Aggregate: typ + "/" + agg, Seq: s})
	}
	if rollback {
		return evs, tx.Rollback(ctx)
	}
	return evs, tx.Commit(ctx)
}

// Pool opens a pool on dsn for producers.
func Pool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 16
	return pgxpool.NewWithConfig(ctx, cfg)
}
