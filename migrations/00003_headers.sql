-- Trace context and extra request headers (issue 5). Adds only.
-- +goose Up
-- Optional JSON object of extra request headers: traceparent, tracestate and X-* entries are
-- forwarded with the webhook (not signed).
ALTER TABLE outbox_events ADD COLUMN headers jsonb;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN headers;
