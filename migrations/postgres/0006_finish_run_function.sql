-- Finishing a run in one round trip instead of five (BEGIN, the run's update, the thread's
-- lock, the thread's update, COMMIT). Each statement of a PL/pgSQL function takes a fresh
-- snapshot, so the thread's in-flight runs are counted after its row lock is held, exactly
-- as the transaction it replaces did. Errors roll everything back: P0003 = the run is not
-- running on this worker, P0002 = its thread is gone.
CREATE OR REPLACE FUNCTION fawn_finish_run(
    p_run_id TEXT, p_worker TEXT, p_status TEXT, p_error JSONB, p_stop_reason TEXT,
    p_now BIGINT, p_values JSONB, p_interrupts JSONB, p_has_next BOOLEAN,
    p_thread_error JSONB, p_metadata JSONB, p_config JSONB)
RETURNS SETOF runs
LANGUAGE plpgsql
AS $$
DECLARE
    v_run runs%ROWTYPE;
BEGIN
    UPDATE runs SET status = p_status, error = p_error, stop_reason = p_stop_reason,
           owner = NULL, lease_expires_at = NULL, updated_at = p_now
     WHERE run_id = p_run_id AND owner = p_worker AND status = 'running'
    RETURNING * INTO v_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run not running on this worker' USING ERRCODE = 'P0003';
    END IF;
    PERFORM 1 FROM threads WHERE thread_id = v_run.thread_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'thread not found' USING ERRCODE = 'P0002';
    END IF;
    UPDATE threads SET state_values = COALESCE(p_values, state_values),
           state_updated_at = CASE WHEN p_values IS NULL THEN state_updated_at ELSE p_now END,
           interrupts = p_interrupts, has_next = p_has_next, error = p_thread_error,
           metadata = metadata || p_metadata, config = COALESCE(p_config, config),
           updated_at = p_now,
           expires_at = CASE WHEN ttl_minutes IS NULL THEN expires_at
                        ELSE p_now + CAST(ttl_minutes * 60000000 AS BIGINT) END,
           status = CASE WHEN EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = v_run.thread_id
                                        AND r.status IN ('pending', 'running')) THEN 'busy'
                         WHEN p_thread_error IS NOT NULL THEN 'error'
                         WHEN p_has_next THEN 'interrupted'
                         ELSE 'idle' END
     WHERE thread_id = v_run.thread_id;
    RETURN NEXT v_run;
END
$$;
