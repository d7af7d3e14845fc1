-- No query looks checkpoints up by parent: chains are walked child to parent through the
-- primary key. The index only cost an index insert (and its WAL) per checkpoint.
DROP INDEX IF EXISTS checkpoints_parent;
