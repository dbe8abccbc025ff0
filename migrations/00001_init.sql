-- +goose Up
CREATE TABLE outbox_events (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    event_type     text NOT NULL,
    payload        jsonb NOT NULL,
    dedup_key      text,
    status         text NOT NULL DEFAULT 'pending',
    retries        int NOT NULL DEFAULT 0,
    available_at   timestamptz NOT NULL DEFAULT now(),
    created_at     timestamptz NOT NULL DEFAULT now(),
    processed_at   timestamptz
);

CREATE INDEX idx_outbox_status_available ON outbox_events (status, available_at);
CREATE UNIQUE INDEX uq_outbox_dedup_key ON outbox_events (dedup_key) WHERE dedup_key IS NOT NULL;

-- IF NOT EXISTS (added after release; a no-op where this version already ran): the inbox's own
-- set (`migrate --inbox-only`, inbox.Migrate) may have created the same table first.
CREATE TABLE IF NOT EXISTS inbox_events (
    id             uuid PRIMARY KEY,
    received_at    timestamptz NOT NULL DEFAULT now(),
    processed_at   timestamptz,
    handler_status text NOT NULL,
    payload        jsonb NOT NULL,
    signature      text
);

CREATE INDEX IF NOT EXISTS idx_inbox_handler_status ON inbox_events (handler_status);

-- +goose Down
DROP TABLE inbox_events;
DROP TABLE outbox_events;
