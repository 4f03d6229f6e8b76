-- Named queries of the SQLite backend. `-- name: x` starts query x; parameters are :name.
-- Writes run inside BEGIN IMMEDIATE (see yoke/store/sqlite.py), so no row locks are needed.

-- name: insert_start
INSERT INTO yoke_starts (start_id, kind, workflow, session, priority, input, fingerprint,
    principal, idem_scope, idempotency_key, source_execution_id, from_step, status,
    instance_id, created_at)
VALUES (:start_id, :kind, :workflow, :session, :priority, :input, :fingerprint,
    :principal, :idem_scope, :idempotency_key, :source_execution_id, :from_step, 'QUEUED',
    :instance_id, :created_at)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: get_start_by_key
SELECT * FROM yoke_starts WHERE idem_scope = :idem_scope AND idempotency_key = :idempotency_key;

-- name: get_start
SELECT * FROM yoke_starts WHERE start_id = :start_id;

-- name: take_slots
-- :keys is a JSON array of ledger keys, sorted. `WHERE true` tells SQLite's parser that the
-- ON CONFLICT clause belongs to the INSERT, not to the SELECT.
INSERT INTO yoke_ledger (key, running)
SELECT value, 1 FROM json_each(:keys) WHERE true ORDER BY value
ON CONFLICT (key) DO UPDATE SET running = yoke_ledger.running + 1
RETURNING key, running;

-- name: release_slots
UPDATE yoke_ledger SET running = running - 1 WHERE key IN (SELECT value FROM json_each(:keys));

-- name: release_slot
UPDATE yoke_ledger SET running = running - :n WHERE key = :key;

-- name: insert_execution
INSERT INTO yoke_executions (execution_id, start_id, workflow, session, input, status,
    parent_id, restarted_from, resumed_from, slot_keys, instance_id, created_at)
VALUES (:execution_id, :start_id, :workflow, :session, :input, 'RUNNING',
    :parent_id, :restarted_from, :resumed_from, :slot_keys, :instance_id, :created_at)
RETURNING *;

-- name: mark_granted
UPDATE yoke_starts SET status = 'GRANTED', execution_id = :execution_id, decided_at = :now
WHERE start_id = :start_id AND status = 'QUEUED'
RETURNING *;

-- name: copy_steps
INSERT INTO yoke_steps (execution_id, position, name, result, recorded_at)
SELECT :new_id, position, name, result, recorded_at FROM yoke_steps
WHERE execution_id = :old_id AND (:before IS NULL OR position < :before);

-- name: decide_start
UPDATE yoke_starts
SET status = :status, reason = :reason, decided_at = :now,
    idempotency_key = CASE WHEN :forget_key THEN NULL ELSE idempotency_key END
WHERE start_id = :start_id AND status = 'QUEUED'
RETURNING *;

-- name: set_start_priority
UPDATE yoke_starts SET priority = :priority
WHERE start_id = :start_id AND status = 'QUEUED'
RETURNING *;

-- name: finish_execution
UPDATE yoke_executions
SET status = :status, output = :output, error = :error, finished_at = :now
WHERE execution_id = :execution_id AND status = 'RUNNING'
RETURNING slot_keys;

-- name: get_execution
SELECT * FROM yoke_executions WHERE execution_id = :execution_id;

-- name: list_executions
SELECT * FROM yoke_executions
WHERE (:status IS NULL OR status = :status)
  AND (:session IS NULL OR session = :session)
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:before_seq IS NULL OR seq < :before_seq)
ORDER BY seq DESC
LIMIT :limit;

-- name: insert_step
INSERT INTO yoke_steps (execution_id, position, name, result, recorded_at)
VALUES (:execution_id, :position, :name, :result, :now);

-- name: steps_of
SELECT * FROM yoke_steps WHERE execution_id = :execution_id ORDER BY position;

-- name: append_control
INSERT INTO yoke_control_log (kind, principal, tenant, roles, subject, before, after, at)
VALUES (:kind, :principal, :tenant, :roles, :subject, :before, :after, :now)
RETURNING *;

-- name: control_log
SELECT * FROM yoke_control_log ORDER BY seq LIMIT :limit OFFSET :offset;

-- name: latest_limits
SELECT after FROM yoke_control_log WHERE kind = 'limits' ORDER BY seq DESC LIMIT 1;

-- name: ledger
SELECT key, running FROM yoke_ledger WHERE running <> 0 ORDER BY key;

-- name: register_instance
INSERT INTO yoke_instances (instance_id, started_at, heartbeat_at) VALUES (:instance_id, :now, :now)
ON CONFLICT (instance_id) DO UPDATE
SET heartbeat_at = :now, stopped_at = NULL, dead_at = NULL;

-- name: heartbeat
UPDATE yoke_instances SET heartbeat_at = :now
WHERE instance_id = :instance_id AND dead_at IS NULL;

-- name: stop_instance
UPDATE yoke_instances SET stopped_at = :now, heartbeat_at = :now WHERE instance_id = :instance_id;

-- name: declare_dead
UPDATE yoke_instances SET dead_at = :now
WHERE dead_at IS NULL AND instance_id <> :exclude
  AND (stopped_at IS NOT NULL OR heartbeat_at < :stale_before)
RETURNING instance_id;

-- name: running_of_instance
SELECT execution_id, slot_keys FROM yoke_executions
WHERE instance_id = :instance_id AND status = 'RUNNING'
ORDER BY execution_id;

-- name: abort_executions_of_instance
UPDATE yoke_executions
SET status = 'ABORTED', error = :error, finished_at = :now
WHERE instance_id = :instance_id AND status = 'RUNNING';

-- name: abort_starts_of_instance
UPDATE yoke_starts SET status = 'ABORTED', reason = :reason, decided_at = :now
WHERE instance_id = :instance_id AND status = 'QUEUED'
RETURNING start_id;

