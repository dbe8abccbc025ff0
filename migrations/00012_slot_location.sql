-- Where each slot lives and the fences of moves (issue "gaps at the edges": a live move to a
-- standby, shards). Adds only.
-- +goose Up
-- One row per slot the relay decodes on a standby, or moves between servers of one cluster
-- (README: Moving decoding between the primary and a standby). server is where the slot lives:
-- NULL for the primary (--dsn), else host:port of the standby (the first host of
-- --replication-dsn), so that a relay started without --replication-dsn finds the slot it must
-- drain. A move under way has a move_fence: the start position of the new slot on move_to (NULL:
-- the primary); the old slot keeps delivering until it has confirmed that fence
-- (move_reached_at), then it is dropped and the row names the new server.
CREATE TABLE outbox_slot_location (
    slot            text PRIMARY KEY,
    server          text,
    move_to         text,
    move_fence      pg_lsn,
    move_reached_at timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- A reshard's fence is reached once every old slot has confirmed it (and a backfill of a
-- recreated old slot is delivered): recorded once, so that an old slot missing afterwards is
-- known to have been retired by `outbox-relay reshard`, and one missing before is known to have
-- been dropped by hand. Reshards under way keep the rule of the version that started them: an
-- old slot already gone had reached the fence.
ALTER TABLE outbox_reshard ADD COLUMN fence_reached_at timestamptz;
UPDATE outbox_reshard SET fence_reached_at = coalesce(finished_at, now())
WHERE fence IS NOT NULL AND (finished_at IS NOT NULL OR NOT EXISTS (
    SELECT 1 FROM pg_replication_slots
    WHERE slot_name = ANY (old_slots) AND (confirmed_flush_lsn IS NULL OR confirmed_flush_lsn < fence)));

-- +goose Down
ALTER TABLE outbox_reshard DROP COLUMN fence_reached_at;
DROP TABLE outbox_slot_location;
