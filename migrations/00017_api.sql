-- The management API (issue 35): what its changes leave behind, and replays of one event.
-- Adds only.
-- +goose Up

-- Every change made through the API (package api), in the transaction of the change: who made
-- it (an operator token's name, or a tenant), what, and to which endpoint. Changes made with
-- SQL, the Go package or `outbox-relay endpoint` are not recorded here.
CREATE TABLE outbox_api_audit (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor_kind  text        NOT NULL CONSTRAINT outbox_api_audit_actor_kind_check CHECK (actor_kind IN ('operator', 'tenant')),
    actor       text        NOT NULL,           -- the operator token's name, or the tenant's id
    action      text        NOT NULL,           -- endpoint.create, endpoint.update, endpoint.pause, ...
    tenant_id   text,                           -- the endpoint's tenant (NULL: none)
    endpoint_id text,                           -- the endpoint changed (NULL: none, e.g. an event type)
    detail      jsonb       NOT NULL DEFAULT '{}' -- what changed: field names, a request's id; never a secret
);
-- A tenant lists its own records, newest first; an operator those of one endpoint.
CREATE INDEX outbox_api_audit_tenant ON outbox_api_audit (tenant_id, id);
CREATE INDEX outbox_api_audit_endpoint ON outbox_api_audit (endpoint_id, id);

-- Idempotency-Key of a create: the first answer, given again to a retried request with the same
-- key from the same caller for a day. The body holds the endpoint's secret, sealed with the
-- secrets key when the API has one.
CREATE TABLE outbox_api_idempotency (
    principal    text        NOT NULL,          -- who sent it: operator:<name> or tenant:<id>
    key          text        NOT NULL,
    request_hash text        NOT NULL,          -- SHA-256 of the method, path and body
    status       integer     NOT NULL,
    body         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, key)
);
CREATE INDEX outbox_api_idempotency_created ON outbox_api_idempotency (created_at);

-- What the endpoint is, in the words of whoever made it (shown by the CLI and the API; the relay
-- does not read it). NULL: none.
ALTER TABLE outbox_endpoints ADD COLUMN description text
    CONSTRAINT outbox_endpoints_description_check CHECK (octet_length(description) <= 1024);

-- A replay of one event (POST /api/v1/endpoints/{id}/events/{event_id}/resend): NULL, every
-- event of the range.
ALTER TABLE outbox_replays ADD COLUMN event_id uuid;

-- +goose Down
ALTER TABLE outbox_replays DROP COLUMN event_id;
ALTER TABLE outbox_endpoints DROP COLUMN description;
DROP TABLE outbox_api_idempotency;
DROP TABLE outbox_api_audit;
