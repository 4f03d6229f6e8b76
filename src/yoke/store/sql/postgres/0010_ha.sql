-- 0010: high availability of the admission server (`yoke serve --ha`). A lease records when its
-- term began (`acquired_at`, the database's clock), which `GET /v1/ha` shows as the leader's
-- `since`; an execution the epoch it was granted under. `yoke_fence(name, epoch)` is the fence
-- every leader write runs first in its own transaction: it takes the lease's advisory lock
-- SHARED (a takeover takes it EXCLUSIVE before it bumps the epoch, so no fenced write
-- interleaves with a takeover), then reads the lease with a fresh snapshot (a VOLATILE
-- function's query sees what committed while it waited) and raises SQLSTATE YK001 unless the
-- term is still the caller's and unexpired.

ALTER TABLE yoke_leases ADD COLUMN acquired_at DOUBLE PRECISION NOT NULL DEFAULT 0;

-- The term an execution was granted under (NULL without a fence), so that a check after a
-- failover finds a grant of an old term in one WHERE.
ALTER TABLE yoke_executions ADD COLUMN leader_epoch BIGINT;

CREATE FUNCTION yoke_fence(p_name TEXT, p_epoch BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(2035382117, hashtext(p_name));
    IF NOT EXISTS (
        SELECT 1 FROM yoke_leases
        WHERE name = p_name AND epoch = p_epoch AND holder IS NOT NULL
            AND expires_at > extract(epoch FROM clock_timestamp())
    ) THEN
        RAISE EXCEPTION 'the lease % is no longer held under epoch %', p_name, p_epoch
            USING ERRCODE = 'YK001';
    END IF;
    RETURN TRUE;
END
$$;
