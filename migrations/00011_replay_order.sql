-- Indexes for `replay --since` and prune (issue "gaps at the edges", items 3 and 4). Adds only.
--
-- outbox_events_replay_order is the order a replay --since re-sends rows in (publisher
-- SinceCursor: stream position, insertion order, id), over the rows it can re-send; created_at
-- is a key column too, so a page skips rows outside the time range inside the index, without
-- reading them from the table. Each page resumes where the last ended: one pass over the index
-- for the whole replay, where each page used to scan and sort the table. Pending rows are not
-- in it, so an insert does not touch it; a done-mark adds the row (it rewrites the row anyway).
--
-- outbox_backfill_event lets prune check, per row, whether a backfill still holds it.
--
-- Both are built CONCURRENTLY, so that writers go on while a large table is indexed, and so
-- outside a transaction (NO TRANSACTION). A build that is interrupted (a cancel, a lost
-- connection, a failed check) leaves an invalid index of that name, which IF NOT EXISTS would
-- take for done and the planner never uses: each build therefore first drops whatever index has
-- the name, valid or not, and the next migrate builds it again from the start. The version is
-- recorded only after the last statement succeeded.
-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_replay_order;
CREATE INDEX CONCURRENTLY outbox_events_replay_order ON outbox_events
    ((coalesce(event_sequence, '') COLLATE "C"), (coalesce(insert_seq, 0)), id, created_at)
    WHERE status IN ('done', 'failed', 'parked');
DROP INDEX CONCURRENTLY IF EXISTS outbox_backfill_event;
CREATE INDEX CONCURRENTLY outbox_backfill_event ON outbox_backfill (event_id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS outbox_backfill_event;
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_replay_order;
