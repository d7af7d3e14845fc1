-- Fawn persistence schema (SQLite). Timestamps are INTEGER microseconds since the Unix
-- epoch (UTC); JSON columns hold JSON text. Keep in step with migrations/postgres.

CREATE TABLE assistants (
    assistant_id TEXT PRIMARY KEY,
    graph_id     TEXT NOT NULL,
    config       TEXT NOT NULL,
    context      TEXT NOT NULL,
    metadata     TEXT NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT,
    version      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX assistants_created ON assistants (created_at);

CREATE TABLE assistant_versions (
    assistant_id TEXT NOT NULL,
    version      INTEGER NOT NULL,
    graph_id     TEXT NOT NULL,
    config       TEXT NOT NULL,
    context      TEXT NOT NULL,
    metadata     TEXT NOT NULL,
    name         TEXT NOT NULL,
    description  TEXT,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (assistant_id, version)
);

CREATE TABLE threads (
    thread_id        TEXT PRIMARY KEY,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    state_updated_at INTEGER NOT NULL,
    metadata         TEXT NOT NULL,
    status           TEXT NOT NULL,
    config           TEXT NOT NULL,
    state_values     TEXT,
    interrupts       TEXT NOT NULL,
    error            TEXT,
    -- the latest checkpoint has nodes scheduled next (status `interrupted` when idle)
    has_next         INTEGER NOT NULL DEFAULT 0,
    ttl_minutes      REAL,
    ttl_strategy     TEXT,
    expires_at       INTEGER
);
CREATE INDEX threads_created ON threads (created_at);
CREATE INDEX threads_updated ON threads (updated_at);
CREATE INDEX threads_status ON threads (status);
CREATE INDEX threads_expires ON threads (expires_at) WHERE expires_at IS NOT NULL;

-- One row per checkpoint: the step's writes (the delta), and a full snapshot of the state
-- only when the deltas written since the branch's last snapshot outweigh that snapshot.
CREATE TABLE checkpoints (
    thread_id     TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    parent_id     TEXT,
    run_id        TEXT,
    metadata      TEXT NOT NULL,
    writes        TEXT NOT NULL,
    snapshot      TEXT,
    -- size of the snapshot this checkpoint's chain starts from
    snap_bytes    INTEGER NOT NULL,
    -- bytes of deltas since that snapshot, this one included (0 for a snapshot)
    delta_bytes   INTEGER NOT NULL,
    next          TEXT NOT NULL,
    tasks         TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX checkpoints_run ON checkpoints (thread_id, run_id) WHERE run_id IS NOT NULL;
CREATE INDEX checkpoints_parent ON checkpoints (thread_id, checkpoint_ns, parent_id);

-- Pending writes of tasks that finished inside a step that did not complete.
CREATE TABLE checkpoint_writes (
    thread_id     TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    channel       TEXT NOT NULL,
    value         TEXT NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);

-- The runs table is the run queue.
CREATE TABLE runs (
    seq                INTEGER PRIMARY KEY,
    run_id             TEXT NOT NULL UNIQUE,
    thread_id          TEXT NOT NULL,
    assistant_id       TEXT NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    status             TEXT NOT NULL,
    metadata           TEXT NOT NULL,
    kwargs             TEXT NOT NULL,
    multitask_strategy TEXT NOT NULL,
    attempt            INTEGER NOT NULL DEFAULT 0,
    available_at       INTEGER NOT NULL,
    cancel_requested   TEXT,
    error              TEXT,
    stop_reason        TEXT,
    owner              TEXT,
    lease_expires_at   INTEGER
);
CREATE INDEX runs_thread ON runs (thread_id, created_at);
CREATE INDEX runs_thread_active ON runs (thread_id, status) WHERE status IN ('pending', 'running');
CREATE INDEX runs_queue ON runs (created_at, seq) WHERE status = 'pending';
CREATE INDEX runs_leases ON runs (lease_expires_at) WHERE status = 'running';
CREATE UNIQUE INDEX runs_one_running_per_thread ON runs (thread_id) WHERE status = 'running';

CREATE TABLE crons (
    cron_id          TEXT PRIMARY KEY,
    assistant_id     TEXT NOT NULL,
    thread_id        TEXT,
    user_id          TEXT,
    schedule         TEXT NOT NULL,
    timezone         TEXT,
    end_time         INTEGER,
    payload          TEXT NOT NULL,
    next_run_date    INTEGER,
    metadata         TEXT NOT NULL,
    on_run_completed TEXT,
    enabled          INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX crons_due ON crons (next_run_date) WHERE enabled = 1;
CREATE INDEX crons_thread ON crons (thread_id);

-- `namespace` is the labels, each escaped and followed by '.', so that a prefix of labels
-- is a prefix of the text (see json::encode_namespace).
CREATE TABLE store_items (
    namespace   TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    ttl_minutes REAL,
    expires_at  INTEGER,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX store_items_expires ON store_items (expires_at) WHERE expires_at IS NOT NULL;
