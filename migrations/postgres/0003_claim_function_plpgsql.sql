-- fawn_claim_next_run (0002) as PL/pgSQL: a LANGUAGE sql function with a SET clause is
-- planned again on every call; PL/pgSQL keeps the plan for the session's connection.
CREATE OR REPLACE FUNCTION fawn_claim_next_run(p_owner TEXT, p_lease_until BIGINT, p_now BIGINT)
RETURNS SETOF runs
LANGUAGE plpgsql
SET enable_sort = off
AS $$
BEGIN
    RETURN QUERY
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
       SET status = 'running', attempt = runs.attempt + 1, owner = p_owner,
           lease_expires_at = p_lease_until, updated_at = p_now
      FROM next
     WHERE runs.seq = next.claim_seq
    RETURNING runs.*;
END
$$;
