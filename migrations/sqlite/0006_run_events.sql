-- The run-event journal (DeerFlow's `run_events`) and per-user run feedback. `seq` is
-- thread-global and strictly increasing: appends lock the thread, read the thread's last
-- seq and insert after it, and (thread_id, seq) is the key, so two runs of one thread can
-- never share a seq. Rows are append-only; they go with their thread.
CREATE TABLE run_events (
    thread_id   TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    run_id      TEXT NOT NULL,
    event_type  TEXT NOT NULL,
    category    TEXT NOT NULL,
    content     TEXT NOT NULL,
    metadata    TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
CREATE INDEX run_events_run ON run_events (thread_id, run_id, seq);
CREATE INDEX run_events_category ON run_events (thread_id, category, seq);

-- Thumbs up/down on a run: at most one per (thread, run, user); `user_id` is '' without
-- authentication.
CREATE TABLE feedback (
    feedback_id TEXT PRIMARY KEY,
    thread_id   TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    message_id  TEXT,
    rating      INTEGER NOT NULL,
    comment     TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (thread_id, run_id, user_id)
);
