-- Pause, resume and replay requests per pipeline (issue "Recover and control"). Adds only.
-- +goose Up
-- One row per pipeline that was ever paused or resumed. The process that leads the pipeline
-- polls its row, so a pause written by `outbox-relay pause` (or by the relay itself on a 410
-- Gone) holds whichever process leads, a standby that takes over included. version grows with
-- every write, so a pause and a resume between two polls are both seen.
CREATE TABLE outbox_pipeline_control (
    pipeline   text PRIMARY KEY,
    paused     boolean NOT NULL DEFAULT false,
    reason     text NOT NULL DEFAULT '',
    paused_at  timestamptz,
    version    bigint NOT NULL DEFAULT 1,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per `outbox-relay replay --since` request. The request itself travels through the WAL
-- (a transactional logical message naming the row's id), so the relay meets it in commit order;
-- the row holds what to re-send and how far the relay got: the keyset position after the last
-- page it delivered, so a relay restarted in the middle resumes there.
CREATE TABLE outbox_replays (
    id             bigserial PRIMARY KEY,
    pipeline       text NOT NULL,
    since          timestamptz NOT NULL,
    until          timestamptz,
    aggregate_type text,
    event_type     text,
    requested_at   timestamptz NOT NULL DEFAULT now(),
    total          bigint NOT NULL,
    sent           bigint NOT NULL DEFAULT 0,
    after_sequence text,
    after_insert   bigint,
    after_id       uuid,
    -- the WAL position when the request was written: once the slot has confirmed past it, a
    -- request that is not done was abandoned (its slot was dropped or recreated).
    request_lsn    pg_lsn NOT NULL,
    state          text NOT NULL DEFAULT 'requested',
    finished_at    timestamptz
);

-- +goose Down
DROP TABLE outbox_replays;
DROP TABLE outbox_pipeline_control;
