-- Fawn persistence schema (Postgres). Timestamps are BIGINT microseconds since the Unix
-- epoch (UTC), as in the SQLite schema, so both backends share their queries; read them
-- with to_timestamp(col / 1e6). Filterable JSON is JSONB; checkpoint payloads are TEXT so
-- their bytes (and key order) round-trip exactly. Keep in step with migrations/sqlite.

CREATE TABLE assistants (
    assistant_id TEXT PRIMARY KEY,
    graph_id     TEXT NOT NULL,
    config       JSONB NOT NULL,
    context      JSONB NOT NULL,
    metadata     JSONB NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT,
    version      BIGINT NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX assistants_created ON assistants (created_at);

CREATE TABLE assistant_versions (
    assistant_id TEXT NOT NULL,
    version      BIGINT NOT NULL,
    graph_id     TEXT NOT NULL,
    config       JSONB NOT NULL,
    context      JSONB NOT NULL,
    metadata     JSONB NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (assistant_id, version)
);

CREATE TABLE threads (
    thread_id        TEXT PRIMARY KEY,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    state_updated_at BIGINT NOT NULL,
    metadata         JSONB NOT NULL,
    status           TEXT NOT NULL,
    config           JSONB NOT NULL,
    state_values     JSONB,
    interrupts       JSONB NOT NULL,
    error            JSONB,
    has_next         BOOLEAN NOT NULL DEFAULT FALSE,
    ttl_minutes      DOUBLE PRECISION,
    ttl_strategy     TEXT,
    expires_at       BIGINT
);
CREATE INDEX threads_created ON threads (created_at);
CREATE INDEX threads_updated ON threads (updated_at);
CREATE INDEX threads_status ON threads (status);
CREATE INDEX threads_expires ON threads (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX threads_metadata ON threads USING GIN (metadata jsonb_path_ops);

CREATE TABLE checkpoints (
    thread_id     TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    parent_id     TEXT,
    run_id        TEXT,
    metadata      JSONB NOT NULL,
    writes        TEXT NOT NULL,
    snapshot      TEXT,
    snap_bytes    BIGINT NOT NULL,
    delta_bytes   BIGINT NOT NULL,
    next          JSONB NOT NULL,
    tasks         JSONB NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX checkpoints_run ON checkpoints (thread_id, run_id) WHERE run_id IS NOT NULL;
CREATE INDEX checkpoints_parent ON checkpoints (thread_id, checkpoint_ns, parent_id);

CREATE TABLE checkpoint_writes (
    thread_id     TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    idx           BIGINT NOT NULL,
    channel       TEXT NOT NULL,
    value         TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

CREATE TABLE runs (
    seq                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id             TEXT NOT NULL UNIQUE,
    thread_id          TEXT NOT NULL,
    assistant_id       TEXT NOT NULL,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    status             TEXT NOT NULL,
    metadata           JSONB NOT NULL,
    kwargs             JSONB NOT NULL,
    multitask_strategy TEXT NOT NULL,
    attempt            BIGINT NOT NULL DEFAULT 0,
    available_at       BIGINT NOT NULL,
    cancel_requested   TEXT,
    error              JSONB,
    stop_reason        TEXT,
    owner              TEXT,
    lease_expires_at   BIGINT
);
CREATE INDEX runs_thread ON runs (thread_id, created_at);
CREATE INDEX runs_thread_active ON runs (thread_id, status) WHERE status IN ('pending', 'running');
CREATE INDEX runs_queue ON runs (created_at, seq) WHERE status = 'pending';
CREATE INDEX runs_leases ON runs (lease_expires_at) WHERE status = 'running';
-- At most one running run per thread, whatever the workers do.
CREATE UNIQUE INDEX runs_one_running_per_thread ON runs (thread_id) WHERE status = 'running';

CREATE TABLE crons (
    cron_id          TEXT PRIMARY KEY,
    assistant_id     TEXT NOT NULL,
    thread_id        TEXT,
    user_id          TEXT,
    schedule         TEXT NOT NULL,
    timezone         TEXT,
    end_time         BIGINT,
    payload          JSONB NOT NULL,
    next_run_date    BIGINT,
    metadata         JSONB NOT NULL,
    on_run_completed TEXT,
    enabled          BOOLEAN NOT NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX crons_due ON crons (next_run_date) WHERE enabled;
CREATE INDEX crons_thread ON crons (thread_id);

CREATE TABLE store_items (
    namespace   TEXT COLLATE "C" NOT NULL,
    key         TEXT NOT NULL,
    value       JSONB NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    ttl_minutes DOUBLE PRECISION,
    expires_at  BIGINT,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX store_items_expires ON store_items (expires_at) WHERE expires_at IS NOT NULL;
