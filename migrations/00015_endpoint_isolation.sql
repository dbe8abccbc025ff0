-- Endpoint isolation (issue "Endpoint isolation"): a per-endpoint backlog off the WAL, the
-- delivery log (failed attempts one row each, successes one row per flush), and what
-- auto-disable and `status --endpoints` need to remember. Adds only.
-- +goose Up

-- An endpoint's events that waited longer than its spill_after (or passed its queue's size):
-- recorded here in stream order, which settles them for the slot, so that the slot confirms
-- past them; the endpoint delivers them from here in order, then rejoins the live stream. The
-- event itself stays in outbox_events (prune keeps a row while a backlog names it).
CREATE TABLE outbox_endpoint_backlog (
    pipeline    text        NOT NULL,          -- the pipeline's (or shard's) name
    endpoint_id text        NOT NULL,
    lsn         pg_lsn      NOT NULL,          -- the event's stream position: its commit LSN ...
    idx         integer     NOT NULL,          -- ... and its index in the transaction (X-Event-Sequence)
    event_id    uuid        NOT NULL,
    attempts    integer     NOT NULL DEFAULT 0, -- attempts made before it was spilled
    mark        boolean     NOT NULL DEFAULT false, -- its delivery marks the row done (it went to this endpoint alone)
    spilled_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, endpoint_id, lsn, idx)
);
-- prune and `deliveries --event` find an event's backlog entries by its id.
CREATE INDEX outbox_endpoint_backlog_event ON outbox_endpoint_backlog (event_id);

-- prune keeps a row while a pipeline or an endpoint lane (<pipeline>/<endpoint>) dead-lettered
-- or parked it, finding its entries by event id (the primary key leads with the pipeline).
CREATE INDEX outbox_pipeline_events_event ON outbox_pipeline_events (event_id);
-- ... and while a replay --since not done covers it: the few such requests among the done ones.
CREATE INDEX outbox_replays_open ON outbox_replays (since) WHERE state <> 'done';

-- Every failed delivery attempt to an endpoint.
CREATE TABLE outbox_delivery_attempts (
    pipeline    text        NOT NULL,
    endpoint_id text        NOT NULL,
    event_id    uuid        NOT NULL,
    attempt     integer     NOT NULL,
    at          timestamptz NOT NULL,
    status_code integer,                       -- NULL: no HTTP answer (a network error)
    latency_ms  integer     NOT NULL,
    error       text        NOT NULL           -- the error, or the first KB of the answer
);
CREATE INDEX outbox_delivery_attempts_event ON outbox_delivery_attempts (event_id);
CREATE INDEX outbox_delivery_attempts_endpoint ON outbox_delivery_attempts (pipeline, endpoint_id, at);

-- Successful deliveries to an endpoint, one row per flush of the delivery log: the arrays are
-- index for index (event i was delivered at delivered_at[i] on its attempts[i]-th attempt,
-- which took latency_ms[i]). One row holds many deliveries, so recording them costs a fraction
-- of a row update each.
CREATE TABLE outbox_deliveries (
    pipeline     text          NOT NULL,
    endpoint_id  text          NOT NULL,
    first_at     timestamptz   NOT NULL,
    last_at      timestamptz   NOT NULL,
    event_ids    uuid[]        NOT NULL,
    delivered_at timestamptz[] NOT NULL,
    attempts     integer[]     NOT NULL,
    latency_ms   integer[]     NOT NULL
);
CREATE INDEX outbox_deliveries_event ON outbox_deliveries USING gin (event_ids);
CREATE INDEX outbox_deliveries_endpoint ON outbox_deliveries (pipeline, endpoint_id, last_at);

-- NULL: the pipeline's spill_after.
ALTER TABLE outbox_endpoints ADD COLUMN spill_after_ms integer
    CONSTRAINT outbox_endpoints_spill_after_ms_check CHECK (spill_after_ms BETWEEN 100 AND 604800000);

-- failing_since: when the failures in a row began (auto-disable counts from it across restarts).
ALTER TABLE outbox_endpoint_status ADD COLUMN failing_since timestamptz;

-- +goose Down
DROP INDEX outbox_replays_open;
DROP INDEX outbox_pipeline_events_event;
ALTER TABLE outbox_endpoint_status DROP COLUMN failing_since;
ALTER TABLE outbox_endpoints DROP COLUMN spill_after_ms;
DROP TABLE outbox_deliveries;
DROP TABLE outbox_delivery_attempts;
DROP TABLE outbox_endpoint_backlog;
