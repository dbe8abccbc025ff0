-- The stream position (X-Event-Sequence) of dead-lettered and parked rows, so a replay re-sends
-- them in their original commit order. Adds only.
-- +goose Up
ALTER TABLE outbox_events ADD COLUMN event_sequence text;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN event_sequence;
