-- Resharding a pipeline without loss or reordering (issue "Scale out past one process"). Adds only.
-- +goose Up
-- One row per pipeline being (or last) resharded by `outbox-relay reshard`. fence is the highest
-- start position of the new shards' slots: the new shards deliver only what commits after it,
-- and only once every old slot has confirmed it; the relays read this row to gate the new shards
-- and retire the old ones, and refuse a shard count that does not match it.
CREATE TABLE outbox_reshard (
    pipeline    text PRIMARY KEY,
    from_shards int NOT NULL,
    to_shards   int NOT NULL,
    old_slots   text[] NOT NULL,
    old_pubs    text[] NOT NULL,
    new_slots   text[] NOT NULL,
    fence       pg_lsn,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

-- +goose Down
DROP TABLE outbox_reshard;
