-- Named queries of the PostgreSQL backend. `-- name: x` starts query x; parameters are %(name)s.
-- READ COMMITTED: rows that decide a grant are locked (FOR UPDATE / upsert), in key order.

-- name: insert_start
INSERT INTO yoke_starts (start_id, kind, workflow, session, priority, input, fingerprint,
    principal, idem_scope, idempotency_key, source_execution_id, from_step, status,
    instance_id, created_at)
VALUES (%(start_id)s, %(kind)s, %(workflow)s, %(session)s, %(priority)s, %(input)s, %(fingerprint)s,
    %(principal)s, %(idem_scope)s, %(idempotency_key)s, %(source_execution_id)s, %(from_step)s, 'QUEUED',
    %(instance_id)s, %(created_at)s)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: get_start_by_key
SELECT * FROM yoke_starts WHERE idem_scope = %(idem_scope)s AND idempotency_key = %(idempotency_key)s;

-- name: get_start
SELECT * FROM yoke_starts WHERE start_id = %(start_id)s;

-- name: take_slots
-- %(keys)s is a sorted text[]: rows are upserted, hence locked, in key order (no deadlock).
INSERT INTO yoke_ledger (key, running)
SELECT k, 1 FROM unnest(%(keys)s::text[]) WITH ORDINALITY AS t(k, o) ORDER BY o
ON CONFLICT (key) DO UPDATE SET running = yoke_ledger.running + 1
RETURNING key, running;

-- name: release_slots
-- The CTE locks the rows in key order before the update touches them (no deadlock with a
-- grant, which locks in the same order).
-- NOTIFY rides along: it is delivered at commit, only if the slots really were freed.
WITH locked AS (
    SELECT key FROM yoke_ledger WHERE key = ANY(%(keys)s::text[]) ORDER BY key FOR UPDATE
), released AS (
    UPDATE yoke_ledger l SET running = l.running - 1 FROM locked WHERE l.key = locked.key
    RETURNING 1
)
SELECT pg_notify('yoke_slot_freed', '') FROM (SELECT count(*) AS n FROM released) r
WHERE r.n > 0;

-- name: release_slot
UPDATE yoke_ledger SET running = running - %(n)s WHERE key = %(key)s;

-- name: insert_execution
INSERT INTO yoke_executions (execution_id, start_id, workflow, session, input, status,
    parent_id, restarted_from, resumed_from, slot_keys, instance_id, created_at)
VALUES (%(execution_id)s, %(start_id)s, %(workflow)s, %(session)s, %(input)s, 'RUNNING',
    %(parent_id)s, %(restarted_from)s, %(resumed_from)s, %(slot_keys)s, %(instance_id)s, %(created_at)s)
RETURNING *;

-- name: mark_granted
UPDATE yoke_starts SET status = 'GRANTED', execution_id = %(execution_id)s, decided_at = %(now)s
WHERE start_id = %(start_id)s AND status = 'QUEUED'
RETURNING *;

-- name: copy_steps
INSERT INTO yoke_steps (execution_id, position, name, result, recorded_at)
SELECT %(new_id)s, position, name, result, recorded_at FROM yoke_steps
WHERE execution_id = %(old_id)s AND (%(before)s::integer IS NULL OR position < %(before)s);

-- name: decide_start
UPDATE yoke_starts
SET status = %(status)s, reason = %(reason)s, decided_at = %(now)s,
    idempotency_key = CASE WHEN %(forget_key)s::boolean THEN NULL ELSE idempotency_key END
WHERE start_id = %(start_id)s AND status = 'QUEUED'
RETURNING *;

-- name: set_start_priority
UPDATE yoke_starts SET priority = %(priority)s
WHERE start_id = %(start_id)s AND status = 'QUEUED'
RETURNING *;

-- name: finish_execution
UPDATE yoke_executions
SET status = %(status)s, output = %(output)s, error = %(error)s, finished_at = %(now)s
WHERE execution_id = %(execution_id)s AND status = 'RUNNING'
RETURNING slot_keys;

-- name: get_execution
SELECT * FROM yoke_executions WHERE execution_id = %(execution_id)s;

-- name: list_executions
SELECT * FROM yoke_executions
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(session)s::text IS NULL OR session = %(session)s)
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
  AND (%(before_seq)s::bigint IS NULL OR seq < %(before_seq)s)
ORDER BY seq DESC
LIMIT %(limit)s;

-- name: insert_step
INSERT INTO yoke_steps (execution_id, position, name, result, recorded_at)
VALUES (%(execution_id)s, %(position)s, %(name)s, %(result)s, %(now)s);

-- name: steps_of
SELECT * FROM yoke_steps WHERE execution_id = %(execution_id)s ORDER BY position;

-- name: append_control
INSERT INTO yoke_control_log (kind, principal, tenant, roles, subject, before, after, at)
VALUES (%(kind)s, %(principal)s, %(tenant)s, %(roles)s, %(subject)s, %(before)s, %(after)s, %(now)s)
RETURNING *;

-- name: control_log
SELECT * FROM yoke_control_log ORDER BY seq LIMIT %(limit)s OFFSET %(offset)s;

-- name: latest_limits
SELECT after FROM yoke_control_log WHERE kind = 'limits' ORDER BY seq DESC LIMIT 1;

-- name: ledger
SELECT key, running FROM yoke_ledger WHERE running <> 0 ORDER BY key;

-- name: register_instance
INSERT INTO yoke_instances (instance_id, started_at, heartbeat_at) VALUES (%(instance_id)s, %(now)s, %(now)s)
ON CONFLICT (instance_id) DO UPDATE
SET heartbeat_at = %(now)s, stopped_at = NULL, dead_at = NULL;

-- name: heartbeat
UPDATE yoke_instances SET heartbeat_at = %(now)s
WHERE instance_id = %(instance_id)s AND dead_at IS NULL;

-- name: stop_instance
UPDATE yoke_instances SET stopped_at = %(now)s, heartbeat_at = %(now)s WHERE instance_id = %(instance_id)s;

-- name: declare_dead
UPDATE yoke_instances SET dead_at = %(now)s
WHERE dead_at IS NULL AND instance_id <> %(exclude)s
  AND (stopped_at IS NOT NULL OR heartbeat_at < %(stale_before)s)
RETURNING instance_id;

-- name: running_of_instance
SELECT execution_id, slot_keys FROM yoke_executions
WHERE instance_id = %(instance_id)s AND status = 'RUNNING'
ORDER BY execution_id
FOR UPDATE;

-- name: abort_executions_of_instance
UPDATE yoke_executions
SET status = 'ABORTED', error = %(error)s, finished_at = %(now)s
WHERE instance_id = %(instance_id)s AND status = 'RUNNING';

-- name: abort_starts_of_instance
UPDATE yoke_starts SET status = 'ABORTED', reason = %(reason)s, decided_at = %(now)s
WHERE instance_id = %(instance_id)s AND status = 'QUEUED'
RETURNING start_id;

-- name: notify_slot_freed
SELECT pg_notify('yoke_slot_freed', '');
