-- The partner portal and the operator console (issue 36, package portal): their sign-in
-- sessions. Adds only.
-- +goose Up

-- One row per session. The browser holds a random value in a cookie; only its SHA-256 is stored,
-- so a copy of this table signs nobody in. A portal link opens one session only: its token's
-- SHA-256 is recorded with the session it opened, and kept until the link has expired too, so a
-- link used once (or seen by someone else) opens nothing more.
CREATE TABLE outbox_portal_sessions (
    id_hash    bytea       PRIMARY KEY,           -- SHA-256 of the cookie's value
    kind       text        NOT NULL CONSTRAINT outbox_portal_sessions_kind_check CHECK (kind IN ('tenant', 'operator')),
    principal  text        NOT NULL,              -- the tenant's id, or the operator token's name
    link_hash  bytea       CONSTRAINT outbox_portal_sessions_link_key UNIQUE, -- SHA-256 of the link's token (NULL: an operator's sign-in)
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,              -- the session ends then, or at its sign-out (then set to it)
    keep_until timestamptz NOT NULL               -- the row is removed after the later of expires_at and the link's expiry
);
CREATE INDEX outbox_portal_sessions_keep ON outbox_portal_sessions (keep_until);

-- +goose Down
DROP TABLE outbox_portal_sessions;
