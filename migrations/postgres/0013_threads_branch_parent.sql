-- Threads made by branching another thread carry `branch_parent_thread_id` and
-- `branch_parent_checkpoint_id` in their metadata. The retention sweeper asks, for every
-- thread it prunes, which checkpoints of it a branch was made from; without an index that
-- question read every thread's metadata, so a sweep cost grew with the square of the
-- number of threads. Only branch threads are in the index.
CREATE INDEX threads_branch_parent ON threads ((metadata->>'branch_parent_thread_id'))
    WHERE metadata->>'branch_parent_thread_id' IS NOT NULL;
