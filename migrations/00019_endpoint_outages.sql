-- An endpoint's outage shared by the shards and relays that deliver to it (issue 38), so that
-- the operator hears of its recovery once, not once per shard. Adds only.
-- +goose Up

-- One row per endpoint whose circuit breaker opened on some shard or relay and has not closed
-- since: the first to open it inserts the row, the first to see the endpoint recover deletes it
-- and sends endpoint.recovered; the others find no row and send nothing.
CREATE TABLE outbox_endpoint_outages (
    endpoint_id text        PRIMARY KEY,
    began_at    timestamptz NOT NULL DEFAULT now()   -- when the first breaker opened
);

-- +goose Down
DROP TABLE outbox_endpoint_outages;
