-- Pipelines (issue "several destinations from one outbox"): dead letters and parked aggregates
-- belong to a pipeline. Adds only; existing rows belong to the pipeline named 'default', whose
-- slot and publication keep the names of a relay from before pipelines.
-- +goose Up
ALTER TABLE outbox_parked_aggregates ADD COLUMN pipeline text NOT NULL DEFAULT 'default';
-- own_state: the pipeline keeps its failed and parked events in outbox_pipeline_events, not in
-- the row's status columns (which one pipeline, the status owner, writes).
ALTER TABLE outbox_parked_aggregates ADD COLUMN own_state boolean NOT NULL DEFAULT false;
ALTER TABLE outbox_parked_aggregates DROP CONSTRAINT outbox_parked_aggregates_pkey;
ALTER TABLE outbox_parked_aggregates ADD PRIMARY KEY (pipeline, aggregate_type, aggregate_id);

-- The per-pipeline truth of the pipelines that do not own the row's status columns: events
-- they dead-lettered ('failed'), held behind a dead letter ('parked'), or, for a shadow
-- pipeline, gave up on ('abandoned': recorded, never parked, never replayed). A row delivered by
-- such a pipeline has no entry here.
CREATE TABLE outbox_pipeline_events (
    pipeline       text NOT NULL,
    event_id       uuid NOT NULL,
    status         text NOT NULL CHECK (status IN ('failed', 'parked', 'abandoned')),
    retries        integer NOT NULL DEFAULT 0,
    last_error     text,
    event_sequence text,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, event_id)
);

-- +goose Down
DROP TABLE outbox_pipeline_events;
DELETE FROM outbox_parked_aggregates WHERE pipeline <> 'default';
ALTER TABLE outbox_parked_aggregates DROP CONSTRAINT outbox_parked_aggregates_pkey;
ALTER TABLE outbox_parked_aggregates ADD PRIMARY KEY (aggregate_type, aggregate_id);
ALTER TABLE outbox_parked_aggregates DROP COLUMN own_state;
ALTER TABLE outbox_parked_aggregates DROP COLUMN pipeline;
