-- From this version on, snapshots of 1 KiB or more are stored deflated, as BLOBs starting
-- with the bytes 00 'f' 'z' '1' (`backend/pack.rs`); older rows keep their text. Nothing
-- changes in the schema: this migration only marks the database, so that an older Fawn,
-- which could not read such rows, refuses it at start instead of failing on them later.
SELECT 1;
