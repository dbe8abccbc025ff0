-- The publication each slot was created against (issue "holes at the edges": a publication
-- dropped and created again while no relay ran). Adds only. A slot older than its publication
-- decodes WAL written while the publication was missing: PostgreSQL 15-17 fail on it for good,
-- PostgreSQL 18 streams on without those rows. The relay compares this oid with the
-- publication's at start and recreates the slot, with a backfill, when they differ. NULL: not
-- known (a slot from before this migration); the relay records the current one.
-- +goose Up
ALTER TABLE outbox_slots ADD COLUMN publication_oid oid;

-- +goose Down
ALTER TABLE outbox_slots DROP COLUMN publication_oid;
