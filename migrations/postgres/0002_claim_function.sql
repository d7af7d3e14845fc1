-- The queue claim as a function, so that it can run with `enable_sort = off`: with stale
-- statistics (a burst of new runs before autovacuum's next ANALYZE) the planner otherwise
-- sorts every pending run on each claim instead of walking `runs_queue` in order, turning
-- a sub-millisecond claim into one that grows with the queue.
CREATE FUNCTION fawn_claim_next_run(p_owner TEXT, p_lease_until BIGINT, p_now BIGINT)
RETURNS SETOF runs
LANGUAGE sql
SET enable_sort = off
AS $$
    WITH next AS (
        SELECT r.seq AS claim_seq
          FROM runs r
         WHERE r.status = 'pending'
           AND r.available_at <= p_now
           AND NOT EXISTS (
               SELECT 1 FROM runs o
                WHERE o.thread_id = r.thread_id
                  AND o.seq <> r.seq
                  AND o.status IN ('pending', 'running')
                  AND (o.status = 'running'
                       OR o.created_at < r.created_at
                       OR (o.created_at = r.created_at AND o.seq < r.seq)))
         ORDER BY r.created_at, r.seq
         LIMIT 1
           FOR UPDATE OF r SKIP LOCKED
    )
    UPDATE runs
       SET status = 'running', attempt = attempt + 1, owner = p_owner,
           lease_expires_at = p_lease_until, updated_at = p_now
      FROM next
     WHERE runs.seq = next.claim_seq
    RETURNING runs.*
$$;
