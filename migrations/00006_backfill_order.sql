-- Backfill order and slot records (issue "nothing lost, in order", sections 2 and 4). Adds only.
-- +goose Up
-- insert_seq numbers rows in insertion order, for plain SQL inserts too, so a backfill keeps the
-- order of the rows of one transaction (created_at is the transaction's start: they all tie).
-- The column is added without a default first, so existing rows stay NULL and the table is not
-- rewritten; they are older than every numbered row.
CREATE SEQUENCE outbox_events_insert_seq;
ALTER TABLE outbox_events ADD COLUMN insert_seq bigint;
ALTER TABLE outbox_events ALTER COLUMN insert_seq SET DEFAULT nextval('outbox_events_insert_seq');
ALTER SEQUENCE outbox_events_insert_seq OWNED BY outbox_events.insert_seq;

-- One row per slot the relay created: when, and the xmin of the snapshot the slot was created
-- in. A pending row whose transaction is older than that xmin committed before the slot and is
-- never carried by it; `outbox-relay status` reports such rows unless a backfill holds them.
CREATE TABLE outbox_slots (
    slot          text PRIMARY KEY,
    created_at    timestamptz NOT NULL DEFAULT now(),
    snapshot_xmin bigint NOT NULL,
    backfill      boolean NOT NULL
);

-- +goose Down
DROP TABLE outbox_slots;
ALTER TABLE outbox_events DROP COLUMN insert_seq;
