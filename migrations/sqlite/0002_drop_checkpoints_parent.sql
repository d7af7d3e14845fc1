-- No query looks checkpoints up by parent: chains are walked child to parent through the
-- primary key. The index only cost a page write per checkpoint (one of ~6 per commit).
DROP INDEX IF EXISTS checkpoints_parent;
