-- Endpoints for partners (issue "Endpoints"): one row per partner webhook that a pipeline run
-- with endpoints fans its events out to, and the tenant an event belongs to. Adds only.
--
-- Every rule the relay needs of a row is a named CHECK, so plain SQL cannot store an endpoint
-- the relay cannot use; the README ("Endpoints for partners") lists each constraint's name with
-- what it refuses. The Go API (outbox.AddEndpoint and friends) and `outbox-relay endpoint`
-- check the same rules first, and more (the URL guard, a secret's encoding), with the reason.
-- +goose Up
CREATE TABLE outbox_endpoints (
    id                text PRIMARY KEY
                      DEFAULT 'ep_' || substr(md5(gen_random_uuid()::text), 1, 16)
                      CONSTRAINT outbox_endpoints_id_check CHECK (id ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    url               text NOT NULL
                      CONSTRAINT outbox_endpoints_url_check
                      CHECK (url ~* '^https?://[^/?#@[:space:][:cntrl:]]+([/?#][^[:space:][:cntrl:]]*)?$'
                             AND octet_length(url) <= 2048),
    -- A JSON array, newest first, of {"secret", "fingerprint", "created_at", "expires_at"}:
    -- each delivery is signed with every secret whose expires_at is absent or in the future.
    -- "secret" is the signing secret in clear, or sealed ("sealed:v1:<key id>:<base64>",
    -- AES-256-GCM under a key of the relay's secrets key file).
    secrets           jsonb NOT NULL
                      CONSTRAINT outbox_endpoints_secrets_check
                      CHECK (jsonb_typeof(secrets) = 'array'
                             AND jsonb_array_length(secrets) BETWEEN 1 AND 10
                             AND NOT jsonb_path_exists(secrets, 'strict $[*] ? (@.type() != "object")')
                             AND NOT jsonb_path_exists(secrets, 'lax $[*] ? (!exists(@.secret) || @.secret.type() != "string")')
                             AND NOT jsonb_path_exists(secrets, 'lax $[*].secret ? (@ starts with "sealed:" && !(@ like_regex "^sealed:v1:[0-9a-f]{8}:[A-Za-z0-9_-]+$"))')
                             AND NOT jsonb_path_exists(secrets, 'lax $[*].fingerprint ? (!(@ like_regex "^[0-9a-f]{8}$"))')
                             AND NOT jsonb_path_exists(secrets, 'lax $[*].expires_at ? (@ != null && !(@ like_regex "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"))')
                             AND NOT jsonb_path_exists(secrets, 'lax $[*].created_at ? (@ != null && !(@ like_regex "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"))')
                             AND jsonb_path_exists(secrets, 'lax $[*] ? (!exists(@.expires_at) || @.expires_at == null)')),
    scheme            text NOT NULL DEFAULT 'x-signature'
                      CONSTRAINT outbox_endpoints_scheme_check CHECK (scheme IN ('x-signature', 'standard-webhooks')),
    format            text NOT NULL DEFAULT 'raw'
                      CONSTRAINT outbox_endpoints_format_check CHECK (format IN ('raw', 'cloudevents')),
    batch_max_events  integer NOT NULL DEFAULT 1
                      CONSTRAINT outbox_endpoints_batch_max_events_check CHECK (batch_max_events BETWEEN 1 AND 10000),
    batch_max_bytes   integer NOT NULL DEFAULT 1048576
                      CONSTRAINT outbox_endpoints_batch_max_bytes_check CHECK (batch_max_bytes BETWEEN 1024 AND 67108864),
    batch_linger_ms   integer NOT NULL DEFAULT 5
                      CONSTRAINT outbox_endpoints_batch_linger_ms_check CHECK (batch_linger_ms BETWEEN 0 AND 60000),
    -- NULL: the endpoint receives every tenant's events (and events without a tenant).
    tenant_id         text
                      CONSTRAINT outbox_endpoints_tenant_id_check
                      CHECK (tenant_id ~ '^[^[:space:]](.*[^[:space:]])?$' AND tenant_id !~ '[[:cntrl:]]'
                             AND octet_length(tenant_id) <= 256),
    -- Patterns: an event type (order.created), a prefix (order.* matches every type that starts
    -- with "order."), or * (every type). Segments are not empty; * stands alone as the last one.
    event_types       text[] NOT NULL DEFAULT '{*}'
                      CONSTRAINT outbox_endpoints_event_types_check
                      CHECK (cardinality(event_types) BETWEEN 1 AND 100
                             AND array_position(event_types, NULL) IS NULL
                             AND array_to_string(event_types, '') !~ '[[:space:][:cntrl:],]'
                             AND array_to_string(event_types, ',') ~
                                 '^(\*|[^*,.]+(\.[^*,.]+)*(\.\*)?)(,(\*|[^*,.]+(\.[^*,.]+)*(\.\*)?))*$'),
    -- NULL: every aggregate type.
    aggregate_types   text[]
                      CONSTRAINT outbox_endpoints_aggregate_types_check
                      CHECK (cardinality(aggregate_types) BETWEEN 1 AND 100
                             AND array_position(aggregate_types, NULL) IS NULL
                             AND array_position(aggregate_types, '') IS NULL
                             AND array_to_string(aggregate_types, '') !~ '[[:space:][:cntrl:],]'),
    -- NULL: no limit. Requests started in any one second.
    rate_limit        integer
                      CONSTRAINT outbox_endpoints_rate_limit_check CHECK (rate_limit BETWEEN 1 AND 1000000),
    -- NULL: the pipeline's setting.
    max_in_flight     integer
                      CONSTRAINT outbox_endpoints_max_in_flight_check CHECK (max_in_flight BETWEEN 1 AND 10000),
    state             text NOT NULL DEFAULT 'enabled'
                      CONSTRAINT outbox_endpoints_state_check CHECK (state IN ('enabled', 'paused', 'disabled')),
    paused_reason     text,
    paused_at         timestamptz,
    disabled_reason   text,
    disabled_at       timestamptz,
    -- true: the URL guard lets this endpoint's URL reach link-local and metadata addresses and
    -- the relay's own metrics address, when adding it and when dialling.
    allow_private_url boolean NOT NULL DEFAULT false,
    metadata          jsonb NOT NULL DEFAULT '{}'
                      CONSTRAINT outbox_endpoints_metadata_check
                      CHECK (jsonb_typeof(metadata) = 'object' AND octet_length(metadata::text) <= 32768),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    -- A clear x-signature secret: 16 to 1024 characters, no control characters, no space at
    -- either end. A clear standard-webhooks secret: whsec_ and the base64 of 16 to 64 bytes.
    CONSTRAINT outbox_endpoints_x_signature_secrets_check CHECK (scheme <> 'x-signature'
        OR NOT jsonb_path_exists(secrets, 'lax $[*].secret ? (!(@ starts with "sealed:") && (!(@ like_regex "^[^[:space:][:cntrl:]][^[:cntrl:]]{14,}[^[:space:][:cntrl:]]$") || @ like_regex "^(.{205}){5}"))')),
    CONSTRAINT outbox_endpoints_standard_webhooks_secrets_check CHECK (scheme <> 'standard-webhooks'
        OR NOT jsonb_path_exists(secrets, 'lax $[*].secret ? (!(@ starts with "sealed:") && !(@ like_regex "^whsec_[A-Za-z0-9+/]{22,88}={0,2}$"))')),
    -- A state's time is set exactly while the endpoint is in it; its reason is optional.
    CONSTRAINT outbox_endpoints_paused_check CHECK ((state = 'paused') = (paused_at IS NOT NULL)
        AND (state = 'paused' OR paused_reason IS NULL)),
    CONSTRAINT outbox_endpoints_disabled_check CHECK ((state = 'disabled') = (disabled_at IS NOT NULL)
        AND (state = 'disabled' OR disabled_reason IS NULL))
);

-- `outbox-relay endpoint list --tenant T` pages through one tenant's endpoints by id.
CREATE INDEX idx_outbox_endpoints_tenant ON outbox_endpoints (tenant_id, id);

-- A pipeline with endpoints streams this table's inserts, updates and deletes. FULL logs the
-- whole old row (its TOASTed values inline) with every UPDATE and DELETE, so a change read from
-- the slot is complete by itself: a new tuple's column marked unchanged-TOAST ('u') takes the
-- old tuple's value, and a DELETE names the endpoint it removed. Endpoint changes are rare, so
-- the extra WAL is small.
ALTER TABLE outbox_endpoints REPLICA IDENTITY FULL;

-- The tenant an event belongs to. NULL: none; such an event goes only to endpoints without a
-- tenant. Nullable without a default: adding it rewrites nothing.
ALTER TABLE outbox_events ADD COLUMN tenant_id text;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN tenant_id;
DROP TABLE outbox_endpoints;
