-- Run creation that may also claim the new run: fawn_create_run with 12 arguments. When
-- p_claim_worker is set, the run is due now (p_available_at <= p_now) and nothing else of
-- its thread is pending or running, the new run is claimed for that worker with a lease
-- until p_lease_until in the same transaction, as the separate claim that followed every
-- creation did (one round trip and one commit fewer per run). Returns the thread's
-- in-flight runs (oldest first), the new run as inserted, then, when claimed, the new run
-- as claimed. Errors as in 0004: P0002 = no such thread, P0001 'reject' = the thread is
-- busy and the strategy is reject; a duplicate run id is the unique violation of
-- runs.run_id.
-- This is the definition the server calls. The 10-argument function of 0004 stays only for
-- nodes of the previous version during a rolling upgrade (a later migration may drop it).
-- The body repeats 0004's rather than calling it: the nested PL/pgSQL call cost the
-- database ~5 % more CPU per run in a benchmark.
CREATE OR REPLACE FUNCTION fawn_create_run(
    p_run_id TEXT, p_thread_id TEXT, p_assistant_id TEXT, p_now BIGINT, p_metadata JSONB,
    p_kwargs JSONB, p_strategy TEXT, p_available_at BIGINT, p_create_thread BOOLEAN,
    p_thread_metadata JSONB, p_claim_worker TEXT, p_lease_until BIGINT)
RETURNS SETOF runs
LANGUAGE plpgsql
AS $$
DECLARE
    v_thread TEXT;
    v_busy BOOLEAN;
BEGIN
    IF p_create_thread THEN
        INSERT INTO threads (thread_id, created_at, updated_at, state_updated_at, metadata,
                             status, config, state_values, interrupts, error, has_next)
        VALUES (p_thread_id, p_now, p_now, p_now, p_thread_metadata, 'busy', '{}'::jsonb,
                NULL, '{}'::jsonb, NULL, FALSE)
        ON CONFLICT (thread_id) DO UPDATE SET status = 'busy', updated_at = p_now,
            expires_at = CASE WHEN threads.ttl_minutes IS NULL THEN threads.expires_at
                         ELSE p_now + CAST(threads.ttl_minutes * 60000000 AS BIGINT) END
        RETURNING thread_id INTO v_thread;
    ELSE
        UPDATE threads SET status = 'busy', updated_at = p_now,
            expires_at = CASE WHEN ttl_minutes IS NULL THEN expires_at
                         ELSE p_now + CAST(ttl_minutes * 60000000 AS BIGINT) END
         WHERE thread_id = p_thread_id
        RETURNING thread_id INTO v_thread;
    END IF;
    IF v_thread IS NULL THEN
        RAISE EXCEPTION 'thread not found' USING ERRCODE = 'P0002';
    END IF;
    RETURN QUERY
        SELECT * FROM runs
         WHERE thread_id = p_thread_id AND status IN ('pending', 'running')
         ORDER BY created_at, seq;
    v_busy := FOUND;
    IF v_busy AND p_strategy = 'reject' THEN
        RAISE EXCEPTION 'reject' USING ERRCODE = 'P0001';
    END IF;
    RETURN QUERY
        INSERT INTO runs (run_id, thread_id, assistant_id, created_at, updated_at, status,
                          metadata, kwargs, multitask_strategy, attempt, available_at)
        VALUES (p_run_id, p_thread_id, p_assistant_id, p_now, p_now, 'pending', p_metadata,
                p_kwargs, p_strategy, 0, p_available_at)
        RETURNING *;
    IF p_claim_worker IS NOT NULL AND NOT v_busy AND p_available_at <= p_now THEN
        RETURN QUERY
            UPDATE runs SET status = 'running', attempt = attempt + 1, owner = p_claim_worker,
                   lease_expires_at = p_lease_until, updated_at = p_now
             WHERE run_id = p_run_id
            RETURNING *;
    END IF;
END
$$;
