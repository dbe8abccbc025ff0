-- The endpoints' data plane (issue "Endpoints"): every change of outbox_endpoints reaches every
-- relay through its slot, at its place in commit order, and each pipeline records the endpoint
-- state it applied and what its lanes report. Adds only.
--
-- A change travels as a transactional logical decoding message (prefix outbox-relay.endpoint),
-- written by a trigger: such a message reaches every slot of the database at its
-- transaction's commit, whatever the slot's publication carries. (Publishing the table instead
-- would need a second publication per pipeline and shard, with updates and deletes, created,
-- checked, moved and dropped with every slot.) Its content is a JSON object: {"op": "upsert",
-- "schema", "id", "row"} (row: to_jsonb of the new row, whose keys are the column names), {"op":
-- "delete", "schema", "id"} or {"op": "truncate", "schema"}; "schema" is the table's schema, so a
-- relay ignores another schema's endpoints. An UPDATE that changes an endpoint's id removes the
-- old id first.
--
-- The function lives in the relay's schema (the migrations run with it alone on the
-- search_path) and calls pg_catalog's functions by their qualified names, so a writer's
-- search_path cannot lend it another function of the same name.
-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION outbox_endpoints_emit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_catalog.pg_logical_emit_message(true, 'outbox-relay.endpoint',
            pg_catalog.jsonb_build_object('op', 'truncate', 'schema', TG_TABLE_SCHEMA)::text);
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.id IS DISTINCT FROM NEW.id) THEN
        PERFORM pg_catalog.pg_logical_emit_message(true, 'outbox-relay.endpoint',
            pg_catalog.jsonb_build_object('op', 'delete', 'schema', TG_TABLE_SCHEMA, 'id', OLD.id)::text);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM pg_catalog.pg_logical_emit_message(true, 'outbox-relay.endpoint',
            pg_catalog.jsonb_build_object('op', 'upsert', 'schema', TG_TABLE_SCHEMA, 'id', NEW.id,
                                          'row', pg_catalog.to_jsonb(NEW))::text);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_endpoints_emit_row AFTER INSERT OR UPDATE OR DELETE ON outbox_endpoints
    FOR EACH ROW EXECUTE FUNCTION outbox_endpoints_emit();
CREATE TRIGGER outbox_endpoints_emit_truncate AFTER TRUNCATE ON outbox_endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_endpoints_emit();

-- The endpoint state a pipeline applied, keyed by the commit LSN of the change: a relay that
-- starts (or takes over) routes each transaction with the versions committed before it.
CREATE TABLE outbox_endpoint_versions (
    pipeline    text   NOT NULL,          -- the pipeline's (or shard's) name, as its dead letters use
    endpoint_id text   NOT NULL,          -- '' is the bootstrap marker row (row NULL)
    lsn         pg_lsn NOT NULL,          -- commit LSN of the change; 0/0 for a bootstrap of an existing slot
    row         jsonb,                    -- to_jsonb of the row; NULL: removed (or the marker)
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, endpoint_id, lsn)
);

-- What each pipeline's lanes last reported, for `outbox-relay status --endpoints`.
CREATE TABLE outbox_endpoint_status (
    pipeline              text NOT NULL,
    endpoint_id           text NOT NULL,
    undelivered           bigint NOT NULL DEFAULT 0,
    oldest_undelivered_at timestamptz,
    last_success_at       timestamptz,
    last_error            text,
    last_error_at         timestamptz,
    failures_in_row       integer NOT NULL DEFAULT 0,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, endpoint_id)
);

-- +goose Down
DROP TABLE outbox_endpoint_status;
DROP TABLE outbox_endpoint_versions;
DROP TRIGGER outbox_endpoints_emit_truncate ON outbox_endpoints;
DROP TRIGGER outbox_endpoints_emit_row ON outbox_endpoints;
DROP FUNCTION outbox_endpoints_emit();
