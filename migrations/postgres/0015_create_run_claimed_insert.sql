-- A run claimed at creation is inserted as running, instead of inserted pending and then
-- updated to running by a second statement in the same transaction. The update wrote a
-- second version of the row (status is indexed, so never a HOT update) and an entry in
-- each of the table's indexes again, and left a dead row for vacuum; now the row is
-- written once, with the claim's owner, lease and attempt.
-- The function's signature and results are those of 0014, so nodes of the previous version
-- read them unchanged during a rolling upgrade: the thread's in-flight runs (oldest
-- first), the new run as a pending run (what the creation returns to the client), then,
-- when claimed, the new run as claimed. Errors as in 0004: P0002 = no such thread,
-- P0001 'reject' = the thread is busy and the strategy is reject; a duplicate run id is
-- the unique violation of runs.run_id.
-- The body restates 0014's, changed only from the insert on: a migration replaces a function
-- whole, and the migrations already applied stay as they were.
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
    v_claim BOOLEAN;
    v_run runs%ROWTYPE;
    v_pending runs%ROWTYPE;
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
    v_claim := p_claim_worker IS NOT NULL AND NOT v_busy AND p_available_at <= p_now;
    INSERT INTO runs (run_id, thread_id, assistant_id, created_at, updated_at, status,
                      metadata, kwargs, multitask_strategy, attempt, available_at, owner,
                      lease_expires_at)
    VALUES (p_run_id, p_thread_id, p_assistant_id, p_now, p_now,
            CASE WHEN v_claim THEN 'running' ELSE 'pending' END, p_metadata, p_kwargs,
            p_strategy, CASE WHEN v_claim THEN 1 ELSE 0 END, p_available_at,
            CASE WHEN v_claim THEN p_claim_worker END,
            CASE WHEN v_claim THEN p_lease_until END)
    RETURNING * INTO v_run;
    IF NOT v_claim THEN
        RETURN NEXT v_run;
        RETURN;
    END IF;
    -- The run as a pending run first, as the creation without a claim returns it.
    v_pending := v_run;
    v_pending.status := 'pending';
    v_pending.attempt := 0;
    v_pending.owner := NULL;
    v_pending.lease_expires_at := NULL;
    RETURN NEXT v_pending;
    RETURN NEXT v_run;
END
$$;
