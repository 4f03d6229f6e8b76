-- 0017: workflows that survive failures.
-- A step's record carries its attempts: a failed attempt is written (RETRYING, with the time
-- of the next) before the pause, so a resumed or recovered execution counts on; a step that
-- gave up is FAILED with its error. `first_attempt` is where the step's current budget of
-- attempts began (past 1 when a resume runs again a step that had given up).
-- A start carries how many automatic recoveries in a row made it (0: asked by a caller).
-- A request to an execution (a cancel) is a row its owner hears and marks handled.
-- Finished rows are pruned by their time, found in seq order (no index on a time: one would
-- cost every grant and finish).
-- An execution's error becomes a JSON object {type, message, traceback, step, attempt}.

ALTER TABLE yoke_steps ADD COLUMN status TEXT NOT NULL DEFAULT 'SUCCEEDED';
ALTER TABLE yoke_steps ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
ALTER TABLE yoke_steps ADD COLUMN first_attempt INTEGER NOT NULL DEFAULT 1;
ALTER TABLE yoke_steps ADD COLUMN error TEXT;
ALTER TABLE yoke_steps ADD COLUMN retry_at DOUBLE PRECISION;
ALTER TABLE yoke_starts ADD COLUMN recovery INTEGER NOT NULL DEFAULT 0;

CREATE TABLE yoke_requests (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    principal TEXT,
    payload TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    handled_at DOUBLE PRECISION
);

CREATE INDEX yoke_requests_pending ON yoke_requests (instance_id, seq) WHERE handled_at IS NULL;
CREATE INDEX yoke_requests_execution ON yoke_requests (execution_id);

UPDATE yoke_executions
SET error = json_build_object('type', NULL, 'message', error, 'traceback', NULL, 'step', NULL,
    'attempt', NULL)::text
WHERE error IS NOT NULL AND left(error, 1) <> '{';
