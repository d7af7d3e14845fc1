-- Two indexes written on every run for queries that are rare or served otherwise.
--
-- `checkpoints_run` goes, as it went on SQLite (its migration 0010): only a run's rollback
-- looks checkpoints up by run, and it reads the thread's checkpoints through the primary
-- key instead. A run writes about ten checkpoints, each an entry here.
--
-- `threads_status` keeps only threads that are not idle. Every run writes its thread's row
-- twice (busy at its creation, idle or interrupted or failed at its end), and status is
-- indexed, so each version took an entry; idle versions, the common case, take none now.
-- A filter on a rarer status (busy, interrupted, error) still finds its threads through
-- the index (Postgres proves that `status = 'busy'` implies `status <> 'idle'`); a filter
-- on idle matches most threads, which the index did not narrow much before either. A
-- search sorted by status now sorts the matching rows instead of reading this index.
DROP INDEX IF EXISTS checkpoints_run;
DROP INDEX IF EXISTS threads_status;
CREATE INDEX threads_status ON threads (status) WHERE status <> 'idle';
