package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// PipelineStatus is one pipeline's part of `outbox-relay status`: its slot, its publication
// and filter, and its own dead letters and parked aggregates.
type PipelineStatus struct {
	Name              string  `json:"name"`
	Healthy           bool    `json:"healthy"`
	Reason            string  `json:"reason"`
	Slot              Slot    `json:"slot"`
	Publication       string  `json:"publication"`
	PublicationExists bool    `json:"publication_exists"`
	Filter            *string `json:"filter"` // the publication's row filter as PostgreSQL prints it; null: none
	ParkedAggregates  int64   `json:"parked_aggregates"`
	// FailedEvents and AbandonedEvents count the events this pipeline dead-lettered or gave up
	// on (a shadow after its attempts; an endpoint's lane at its removal, or at a disable with
	// no backlog), as recorded in outbox_pipeline_events; the status owner's dead letters are
	// the rows with status failed instead. They, and ParkedAggregates, include the pipeline's
	// endpoints' lanes (<pipeline>/<endpoint id>).
	FailedEvents    int64 `json:"failed_events"`
	AbandonedEvents int64 `json:"abandoned_events"`
}

// PipelineOf reads one pipeline's status from the relay's tables in schema s (empty: as the
// search_path resolves them). An empty publication is not checked.
func PipelineOf(ctx context.Context, db DB, s, name, slot, publication string) (PipelineStatus, error) {
	p := PipelineStatus{Name: name, Publication: publication}
	db = inSchema(db, s)
	sv, err := readServer(ctx, db)
	if err != nil {
		return p, err
	}
	if p.Slot, err = readSlot(ctx, db, sv, slot); err != nil {
		return p, err
	}
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, publication).
		Scan(&p.PublicationExists); err != nil {
		return p, fmt.Errorf("look up publication: %w", err)
	}
	checkPub := publication != "" // empty: not known (the flag path's status has no --publication)
	if p.PublicationExists && sv.VersionNum >= 150000 {
		var f string
		err := db.QueryRow(ctx, `SELECT coalesce(pg_get_expr(pr.prqual, pr.prrelid), '')
			FROM pg_publication pb JOIN pg_publication_rel pr ON pr.prpubid = pb.oid
			WHERE pb.pubname = $1 AND pr.prrelid = $2::regclass`, publication, schema.Qualify(s, schema.Events)).Scan(&f)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return p, fmt.Errorf("read the filter of publication %q: %w", publication, err)
		}
		if f != "" {
			p.Filter = &f
		}
	}
	// The pipeline's own, and its endpoints' lanes' (named <pipeline>/<endpoint id>): an
	// endpoint's dead letters, and what it gave up at its removal, are recorded there.
	if err := db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM {outbox_parked_aggregates} WHERE pipeline = $1 OR starts_with(pipeline, $1 || '/')),
		(SELECT count(*) FROM {outbox_pipeline_events} WHERE (pipeline = $1 OR starts_with(pipeline, $1 || '/')) AND status = 'failed'),
		(SELECT count(*) FROM {outbox_pipeline_events} WHERE (pipeline = $1 OR starts_with(pipeline, $1 || '/')) AND status = 'abandoned')`, name).
		Scan(&p.ParkedAggregates, &p.FailedEvents, &p.AbandonedEvents); err != nil {
		return p, fmt.Errorf("count the dead letters of pipeline %q: %w", name, err)
	}
	p.Healthy, p.Reason = Report{Slot: p.Slot, Server: sv}.Healthy()
	if p.Healthy && checkPub && !p.PublicationExists {
		p.Healthy, p.Reason = false, fmt.Sprintf("publication %q does not exist: start `outbox-relay run` (it creates it)", publication)
	}
	return p, nil
}

// Unused returns the slots and publications whose names this relay gives (outbox_relay and
// outbox_relay_*) that none of the given ones is: left by a pipeline removed from the
// configuration. A slot among them retains WAL until it is dropped.
func Unused(ctx context.Context, db DB, slots, publications []string) (unusedSlots, unusedPublications []string, err error) {
	rows, err := db.Query(ctx, `SELECT slot_name::text FROM pg_replication_slots
		WHERE database = current_database() AND (slot_name = 'outbox_relay' OR slot_name LIKE 'outbox\_relay\_%') ORDER BY 1`)
	if err != nil {
		return nil, nil, fmt.Errorf("list slots: %w", err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("list slots: %w", err)
	}
	for _, s := range all {
		if !slices.Contains(slots, s) {
			unusedSlots = append(unusedSlots, s)
		}
	}
	rows, err = db.Query(ctx, `SELECT pubname::text FROM pg_publication
		WHERE (pubname = 'outbox_relay' OR pubname LIKE 'outbox\_relay\_%') AND pubname <> 'outbox_relay_filter_check' ORDER BY 1`)
	if err != nil {
		return nil, nil, fmt.Errorf("list publications: %w", err)
	}
	if all, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, nil, fmt.Errorf("list publications: %w", err)
	}
	for _, p := range all {
		if !slices.Contains(publications, p) {
			unusedPublications = append(unusedPublications, p)
		}
	}
	return unusedSlots, unusedPublications, nil
}

// SlotsActive returns, for each of the named slots that exists in this database, whether a
// process streams from it: one query for any number of pipelines and shards.
func SlotsActive(ctx context.Context, db DB, names []string) (map[string]bool, error) {
	rows, err := db.Query(ctx, `SELECT slot_name::text, active FROM pg_replication_slots
		WHERE database = current_database() AND slot_name = ANY($1)`, names)
	if err != nil {
		return nil, fmt.Errorf("read the slots: %w", err)
	}
	out := map[string]bool{}
	var name string
	var active bool
	_, err = pgx.ForEachRow(rows, []any{&name, &active}, func() error { out[name] = active; return nil })
	return out, err
}
