-- From this version on, large checkpoint writes (deltas), thread values, run kwargs and
-- run-event contents are stored deflated like snapshots (migration 0008): BLOBs starting
-- with the bytes 00 'f' 'z' '1' (`backend/pack.rs`); older rows keep their text. This
-- also marks the database, so that an older Fawn, which could not read such rows, refuses
-- it at start instead of failing on them later.
--
-- The index of a thread's checkpoints by run goes: only a run's rollback (rare, under the
-- writer) looks checkpoints up by run, and it reads the thread's checkpoints through the
-- primary key instead. It cost about 90 bytes per checkpoint.
DROP INDEX IF EXISTS checkpoints_run;
