-- Accounts (DeerFlow's `users`) and the API keys that act for them. Emails are stored
-- lower-cased; a password hash is argon2id in PHC form; `token_version` is bumped to revoke
-- every session cookie of a user (password change). An API key is stored as the SHA-256 of
-- the key; `prefix` is what lists show.
CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE,
    password_hash TEXT,
    system_role   TEXT NOT NULL,
    token_version INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    prefix       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);
CREATE INDEX api_keys_user ON api_keys (user_id);
CREATE INDEX crons_user ON crons (user_id);
