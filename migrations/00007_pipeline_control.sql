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

-- +goose Down
DROP TABLE outbox_pipeline_control;
