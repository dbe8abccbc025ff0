-- Backfill (issue 4): the pending rows that existed when a slot was created, in the order the
-- relay delivers them before that slot's streamed events. Adds only.
-- +goose Up
CREATE TABLE outbox_backfill (
    slot     text   NOT NULL,
    position bigint NOT NULL,
    event_id uuid   NOT NULL,
    PRIMARY KEY (slot, position)
);

-- +goose Down
DROP TABLE outbox_backfill;
