-- The event-type catalog and safe egress (issue 35, points 5 and 6). Adds only.
-- +goose Up

-- The event types an application emits, one row each: managed by SQL, by
-- `outbox-relay event-types sync FILE.yaml`, by the API and by package catalog. When the table
-- is not empty, an endpoint's event-type pattern that matches no row is refused (with the
-- nearest names), and a producer that opts in has each payload checked against its type's
-- schema. An empty table checks nothing: the catalog is opt-in.
CREATE TABLE outbox_event_types (
    -- the event type, as outbox_events.event_type carries it: no '*' (that is a pattern's), no
    -- spaces or control characters, at most 255 bytes (a pattern's bound)
    name        text PRIMARY KEY
        CONSTRAINT outbox_event_types_name_check
        CHECK (octet_length(name) BETWEEN 1 AND 255 AND name !~ '[*,[:space:][:cntrl:]]'
               AND left(name, 1) <> '.' AND right(name, 1) <> '.' AND strpos(name, '..') = 0),
    description text    NOT NULL DEFAULT '',
    schema      jsonb,                         -- a JSON Schema (draft 2020-12 unless $schema says); NULL: any payload
    example     jsonb,                         -- an example payload, valid against schema; NULL: none
    deprecated  boolean NOT NULL DEFAULT false,
    replaced_by text                           -- what to use instead of a deprecated type; NULL: nothing named
        CONSTRAINT outbox_event_types_replaced_by_check CHECK (replaced_by IS NULL OR (deprecated AND replaced_by <> name)),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- deny_private: the endpoint's URL came from a tenant (the API sets it on every endpoint a
-- tenant token creates or changes), so loopback, private, CGNAT, link-local, unspecified and
-- metadata addresses are refused for it when it is written and at every connection, whatever
-- the relay's --egress-deny-private; allow_private_url cannot lift it.
ALTER TABLE outbox_endpoints ADD COLUMN deny_private boolean NOT NULL DEFAULT false;
ALTER TABLE outbox_endpoints ADD CONSTRAINT outbox_endpoints_deny_private_check
    CHECK (NOT (deny_private AND allow_private_url));
-- egress_proxy: the outbound proxy of this endpoint's connections (http:// or https://, no
-- user:password), or 'direct' for none; NULL: the relay's --egress-proxy.
ALTER TABLE outbox_endpoints ADD COLUMN egress_proxy text
    CONSTRAINT outbox_endpoints_egress_proxy_check
    CHECK (egress_proxy = 'direct' OR (egress_proxy ~ '^https?://[^/@[:space:]]+/?$' AND octet_length(egress_proxy) <= 2048));

-- +goose Down
ALTER TABLE outbox_endpoints DROP COLUMN egress_proxy;
ALTER TABLE outbox_endpoints DROP CONSTRAINT outbox_endpoints_deny_private_check;
ALTER TABLE outbox_endpoints DROP COLUMN deny_private;
DROP TABLE outbox_event_types;
