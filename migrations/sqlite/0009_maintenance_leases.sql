-- Leases of background maintenance jobs (the retention sweeper): one row per job, held by
-- one node until `expires_at` (microseconds), so that with several nodes on one database
-- only one of them sweeps at a time. A node takes a free or expired lease, or renews its
-- own, with one upsert.
CREATE TABLE maintenance_leases (
    name       TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
