-- Dead letters and parked aggregates (issue 4). Adds only.
-- +goose Up
ALTER TABLE outbox_events ADD COLUMN last_error text;

-- An aggregate whose event was dead-lettered: later events of it are held back (status
-- 'parked') until `outbox-relay replay` re-sends them in order. The relay reloads this table at
-- start, so parking survives restarts.
CREATE TABLE outbox_parked_aggregates (
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    first_event_id uuid NOT NULL,
    reason         text NOT NULL,
    parked_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (aggregate_type, aggregate_id)
);

-- +goose Down
DROP TABLE outbox_parked_aggregates;
ALTER TABLE outbox_events DROP COLUMN last_error;
