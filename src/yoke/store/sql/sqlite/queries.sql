-- Named queries of the SQLite backend. `-- name: x` starts query x; parameters are :name.
-- Writes run inside BEGIN IMMEDIATE (see yoke/store/sqlite.py), so no row locks are needed.

-- name: insert_start
-- A start is logged QUEUED, or GRANTED at once (with its execution id) by a grant batch that
-- logs it because it fits.
INSERT INTO yoke_starts (start_id, kind, workflow, session, priority, input, fingerprint,
    principal, idem_scope, idempotency_key, source_execution_id, from_step, status,
    execution_id, instance_id, created_at, decided_at)
VALUES (:start_id, :kind, :workflow, :session, :priority, :input, :fingerprint,
    :principal, coalesce(:principal, ''), :idempotency_key, :source_execution_id, :from_step,
    CASE WHEN :execution_id IS NULL THEN 'QUEUED' ELSE 'GRANTED' END,
    :execution_id, :instance_id, :created_at, :decided_at)
ON CONFLICT DO NOTHING;

-- name: get_start_by_key
SELECT * FROM yoke_starts WHERE idem_scope = :idem_scope AND idempotency_key = :idempotency_key;

-- name: get_start
SELECT * FROM yoke_starts WHERE start_id = :start_id;



-- name: release_slot
UPDATE yoke_ledger SET running = running - :n WHERE key = :key;

-- name: insert_execution
INSERT INTO yoke_executions (execution_id, start_id, workflow, session, input, status,
    parent_id, restarted_from, resumed_from, slot_keys, instance_id, created_at, leader_epoch)
VALUES (:execution_id, :start_id, :workflow, :session, :input, 'RUNNING',
    :parent_id, :restarted_from, :resumed_from, :slot_keys, :instance_id, :created_at,
    :leader_epoch);

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
RETURNING execution_id, slot_keys;

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

-- name: tenant_executions
-- One tenant's, newest first: a range of the yoke_executions_tenant index (same expression).
SELECT * FROM yoke_executions
WHERE CASE WHEN instr(session, '/') > 0 THEN substr(session, 1, instr(session, '/') - 1) ELSE session END = :tenant
  AND seq < coalesce(:before_seq, 9223372036854775807)
  AND (:status IS NULL OR status = :status)
  AND (:session IS NULL OR session = :session)
  AND (:workflow IS NULL OR workflow = :workflow)
ORDER BY seq DESC
LIMIT :limit;

-- name: children_of
SELECT * FROM yoke_executions WHERE parent_id = :execution_id ORDER BY seq LIMIT :limit;

-- name: reruns_of
-- The executions restarted or resumed from one (two partial indexes, one each).
SELECT * FROM (
  SELECT * FROM yoke_executions WHERE restarted_from = :execution_id
  UNION ALL
  SELECT * FROM yoke_executions WHERE resumed_from = :execution_id
) AS reruns ORDER BY seq LIMIT :limit;

-- name: insert_step
INSERT INTO yoke_steps (execution_id, position, name, result, recorded_at)
VALUES (:execution_id, :position, :name, :result, :now);

-- name: steps_of
SELECT * FROM yoke_steps WHERE execution_id = :execution_id ORDER BY position;

-- name: steps_page
SELECT * FROM yoke_steps WHERE execution_id = :execution_id AND position > :after
ORDER BY position LIMIT :limit;

-- name: append_control
INSERT INTO yoke_control_log (kind, principal, tenant, roles, subject, before, after, at)
VALUES (:kind, :principal, :tenant, :roles, :subject, :before, :after, :now)
RETURNING *;

-- name: control_log
SELECT * FROM yoke_control_log ORDER BY seq LIMIT :limit OFFSET :offset;

-- name: recent_controls
SELECT * FROM yoke_control_log
WHERE (:kind IS NULL OR kind = :kind)
  AND (:before_seq IS NULL OR seq < :before_seq)
ORDER BY seq DESC
LIMIT :limit;

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

-- name: find_answer
SELECT * FROM yoke_idempotency
WHERE principal = :principal AND idem_key = :idem_key AND expires_at > :now;

-- name: drop_expired_answer
DELETE FROM yoke_idempotency
WHERE principal = :principal AND idem_key = :idem_key AND expires_at <= :now;

-- name: insert_answer
INSERT INTO yoke_idempotency (principal, idem_key, fingerprint, status, body, headers,
    created_at, expires_at)
VALUES (:principal, :idem_key, :fingerprint, :status, :body, :headers, :created_at, :expires_at)
ON CONFLICT DO NOTHING;

-- name: get_answer
SELECT * FROM yoke_idempotency WHERE principal = :principal AND idem_key = :idem_key;

-- name: forget_answers
DELETE FROM yoke_idempotency WHERE expires_at <= :now;

-- ===================================================================================
-- actors (the actors specification, docs/decisions.md). Writes run inside BEGIN IMMEDIATE, so a
-- claim, a takeover and a timer firing never interleave and need no row locks. Batches travel
-- as one JSON array parameter read with json_each. Queue rows carry their instance's owner and
-- epoch (see the PostgreSQL queries). RETURNING may only name the modified table here, so a
-- claim marks its rows, then reads them with their events.

-- name: alloc_event_ids
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n)
SELECT (SELECT coalesce(max(event_id), 0) FROM stream_events) + i AS id FROM s;

-- name: insert_events
-- :rows is a JSON array of [event_id, tenant, stream, data].
INSERT INTO stream_events (event_id, tenant, stream, data, appended_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
    json_extract(value, '$[3]'), :now
FROM json_each(:rows);

-- name: insert_instances
-- :rows is a JSON array of [tenant, actor, instance_id, owner].
INSERT INTO actor_instances (tenant, actor, instance_id, worker_id, created_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
    json_extract(value, '$[3]'), :now
FROM json_each(:rows)
WHERE true
ON CONFLICT DO NOTHING;

-- name: insert_queue_rows
-- Each row copies its instance's owner and epoch (the IMMEDIATE transaction keeps them still).
-- :keys lists the batch's instances once, as [tenant, actor, instance_id]; :rows holds
-- [event_id, position of the instance in :keys, group_id], so each instance is read once.
WITH k AS MATERIALIZED (
    SELECT kj.key AS pos, i.tenant, i.actor, i.instance_id, i.worker_id, i.owner_epoch
    FROM json_each(:keys) kj
    JOIN actor_instances i
        ON i.tenant = json_extract(kj.value, '$[0]') AND i.actor = json_extract(kj.value, '$[1]')
        AND i.instance_id = json_extract(kj.value, '$[2]')
)
INSERT INTO actor_queues (event_id, tenant, actor, instance_id, group_id, available_at,
    worker_id, owner_epoch)
SELECT json_extract(r.value, '$[0]'), k.tenant, k.actor, k.instance_id,
    json_extract(r.value, '$[2]'), :now, k.worker_id, k.owner_epoch
FROM json_each(:rows) r
JOIN k ON k.pos = json_extract(r.value, '$[1]')
ORDER BY r.key;

-- name: notify_actor_queue
SELECT 1;

-- name: pending_tenants
-- Tenants with pending rows for this worker, in name order after :after: a loose index scan.
WITH RECURSIVE t(tenant) AS (
    SELECT (SELECT tenant FROM actor_queues
            WHERE status = 'pending' AND worker_id = :worker_id AND tenant > :after
            ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT q.tenant FROM actor_queues q
            WHERE q.status = 'pending' AND q.worker_id = :worker_id AND q.tenant > t.tenant
            ORDER BY q.tenant LIMIT 1)
    FROM t WHERE t.tenant IS NOT NULL
    LIMIT :limit + 1
)
SELECT tenant FROM t WHERE tenant IS NOT NULL LIMIT :limit;

-- name: claim_quotas
-- The fair claim: up to its own quota of oldest due rows for each tenant in :quotas (a JSON
-- array of {"tenant", "quota"}); :most is the largest quota (a LIMIT here cannot read the
-- outer row, so each tenant's first :most rows are numbered and cut at its own quota).
UPDATE actor_queues
SET status = 'claimed', claimed_by = :worker_id, claim_epoch = owner_epoch
WHERE queue_id IN (
    SELECT c.queue_id FROM (
        SELECT p.queue_id, json_extract(t.value, '$.quota') AS quota,
            row_number() OVER (PARTITION BY t.key ORDER BY p.queue_id) AS n
        FROM json_each(:quotas) t
        JOIN actor_queues p ON p.queue_id IN (
            SELECT x.queue_id FROM actor_queues x
            WHERE x.status = 'pending' AND x.worker_id = :worker_id
                AND x.tenant = json_extract(t.value, '$.tenant') AND x.available_at <= :now
                AND NOT EXISTS (
                    SELECT 1 FROM actor_queues h
                    WHERE h.status = 'pending' AND h.attempts > 0 AND h.tenant = x.tenant
                        AND h.actor = x.actor AND h.instance_id = x.instance_id
                        AND h.group_id = x.group_id AND h.queue_id < x.queue_id
                        AND h.available_at > :now)
            ORDER BY x.queue_id
            LIMIT :most)) c
    WHERE c.n <= c.quota)
RETURNING queue_id;

-- name: claimed_rows
SELECT q.queue_id, q.event_id, q.tenant, q.actor, q.instance_id, q.group_id, e.stream,
    e.data, q.attempts, q.claim_epoch AS epoch, e.appended_at
FROM actor_queues q JOIN stream_events e ON e.event_id = q.event_id
WHERE q.queue_id IN (SELECT value FROM json_each(:ids))
ORDER BY q.queue_id;

-- name: complete
DELETE FROM actor_queues
WHERE queue_id IN (
    SELECT q.queue_id
    FROM json_each(:done) c
    JOIN actor_queues q ON q.queue_id = json_extract(c.value, '$[0]')
    WHERE q.status = 'claimed' AND q.claimed_by = :worker_id AND q.worker_id = :worker_id
        AND q.claim_epoch = q.owner_epoch AND q.claim_epoch = json_extract(c.value, '$[1]'))
RETURNING queue_id;

-- name: requeue
UPDATE actor_queues
SET attempts = attempts + 1, available_at = :available_at, error = :error
WHERE queue_id = :queue_id AND status = 'claimed' AND claimed_by = :worker_id
    AND worker_id = :worker_id AND claim_epoch = :epoch AND owner_epoch = :epoch;

-- name: dead_letter
UPDATE actor_queues
SET attempts = attempts + 1, status = 'dead', error = :error, dead_at = :now,
    claimed_by = NULL
WHERE queue_id = :queue_id AND status = 'claimed' AND claimed_by = :worker_id
    AND worker_id = :worker_id AND claim_epoch = :epoch AND owner_epoch = :epoch;

-- name: list_active_groups
SELECT DISTINCT group_id FROM actor_queues
WHERE tenant = :tenant AND actor = :actor AND instance_id = :instance_id
    AND status <> 'dead'
ORDER BY group_id;

-- name: dead_letters
SELECT q.queue_id, q.event_id, e.stream, q.group_id, e.data, q.attempts,
    q.crash_attempts, q.error, q.dead_at
FROM actor_queues q JOIN stream_events e ON e.event_id = q.event_id
WHERE q.tenant = :tenant AND q.actor = :actor AND q.instance_id = :instance_id
    AND q.status = 'dead'
ORDER BY q.queue_id
LIMIT :limit;

-- name: queue_depths
SELECT tenant, actor, instance_id, count(*) AS depth FROM actor_queues
WHERE status <> 'dead'
GROUP BY tenant, actor, instance_id
ORDER BY depth DESC, tenant, actor, instance_id
LIMIT :limit;

-- name: get_state
SELECT state, version, worker_id, owner_epoch FROM actor_instances
WHERE tenant = :tenant AND actor = :actor AND instance_id = :instance_id;

-- name: get_states
SELECT tenant, actor, instance_id, state, version, worker_id, owner_epoch FROM actor_instances
WHERE (tenant, actor, instance_id) IN (
    SELECT json_extract(value, '$.tenant'), json_extract(value, '$.actor'),
        json_extract(value, '$.instance_id')
    FROM json_each(:rows));

-- name: update_state
UPDATE actor_instances SET state = :state, version = version + 1
WHERE tenant = :tenant AND actor = :actor AND instance_id = :instance_id
    AND version = :expected_version AND worker_id = :worker_id AND owner_epoch = :epoch;

-- name: get_instance
SELECT i.tenant, i.actor, i.instance_id, i.state, i.version, i.worker_id, i.owner_epoch,
    i.created_at,
    (SELECT count(*) FROM actor_queues q WHERE q.tenant = i.tenant AND q.actor = i.actor
        AND q.instance_id = i.instance_id AND q.status = 'pending') AS pending,
    (SELECT count(*) FROM actor_queues q WHERE q.tenant = i.tenant AND q.actor = i.actor
        AND q.instance_id = i.instance_id AND q.status = 'claimed') AS in_flight,
    (SELECT count(*) FROM actor_queues q WHERE q.tenant = i.tenant AND q.actor = i.actor
        AND q.instance_id = i.instance_id AND q.status = 'dead') AS dead
FROM actor_instances i
WHERE i.tenant = :tenant AND i.actor = :actor AND i.instance_id = :instance_id;

-- name: schedule_events
INSERT INTO scheduled_events (tenant, stream, data, fire_at_ms, created_at)
SELECT json_extract(value, '$.tenant'), json_extract(value, '$.stream'),
    json_extract(value, '$.data'), json_extract(value, '$.fire_at_ms'), :now
FROM json_each(:rows)
WHERE true
RETURNING timer_id;
-- name: notify_schedule_change
SELECT 1;

-- name: next_fire_at
SELECT min(fire_at_ms) AS fire_at_ms FROM scheduled_events;

-- name: upcoming_timers
SELECT timer_id, tenant, stream, data, fire_at_ms FROM scheduled_events
WHERE fire_at_ms >= :after_ms AND (fire_at_ms > :after_ms OR timer_id > :after_id)
ORDER BY fire_at_ms, timer_id
LIMIT :limit;

-- name: tenant_timers
-- One tenant's next timers, soonest first (scheduled_events_tenant_due).
SELECT timer_id, tenant, stream, data, fire_at_ms FROM scheduled_events
WHERE tenant = :tenant
ORDER BY fire_at_ms, timer_id
LIMIT :limit;

-- name: take_timers
-- Delete these timers unless fired already (one writer at a time: no row locks needed).
DELETE FROM scheduled_events
WHERE timer_id IN (SELECT value FROM json_each(:ids))
RETURNING timer_id;

-- name: register_worker
INSERT INTO runtime_workers (worker_id, hostname, pid, started_at, heartbeat_at)
VALUES (:worker_id, :hostname, :pid, :now, :now)
ON CONFLICT (worker_id) DO UPDATE
SET hostname = excluded.hostname, pid = excluded.pid, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at, stopped_at = NULL;

-- name: worker_heartbeat
UPDATE runtime_workers SET heartbeat_at = :now
WHERE worker_id = :worker_id AND stopped_at IS NULL;

-- name: mark_worker_stopped
UPDATE runtime_workers SET stopped_at = :now WHERE worker_id = :worker_id;

-- name: list_workers
SELECT worker_id, hostname, pid, started_at, heartbeat_at, stopped_at FROM runtime_workers
ORDER BY worker_id;

-- name: lock_instances_of_worker
SELECT tenant, actor, instance_id FROM actor_instances
WHERE worker_id = :worker_id
ORDER BY tenant, actor, instance_id;

-- name: gone_workers
-- Workers stopped or silent since `stale_before`: a takeover never places an orphan on one.
SELECT worker_id FROM runtime_workers
WHERE stopped_at IS NOT NULL OR heartbeat_at < :stale_before;

-- name: lock_orphans
SELECT tenant, actor, instance_id, worker_id FROM actor_instances
WHERE worker_id IS NULL OR worker_id IN (
    SELECT worker_id FROM runtime_workers
    WHERE worker_id <> :worker_id
        AND (stopped_at IS NOT NULL OR heartbeat_at < :stale_before))
ORDER BY tenant, actor, instance_id;

-- name: set_owner
UPDATE actor_instances SET worker_id = :owner, owner_epoch = owner_epoch + 1,
    moving_to = NULL, moving_since = NULL
WHERE (tenant, actor, instance_id) IN (
    SELECT json_extract(value, '$.tenant'), json_extract(value, '$.actor'),
        json_extract(value, '$.instance_id')
    FROM json_each(:rows));

-- name: unclaim
UPDATE actor_queues SET status = 'pending', claimed_by = NULL
WHERE status = 'claimed' AND (tenant, actor, instance_id) IN (
    SELECT json_extract(value, '$.tenant'), json_extract(value, '$.actor'),
        json_extract(value, '$.instance_id')
    FROM json_each(:rows));

-- name: reown_queue_rows
UPDATE actor_queues
SET worker_id = (SELECT i.worker_id FROM actor_instances i
        WHERE i.tenant = actor_queues.tenant AND i.actor = actor_queues.actor
            AND i.instance_id = actor_queues.instance_id),
    owner_epoch = (SELECT i.owner_epoch FROM actor_instances i
        WHERE i.tenant = actor_queues.tenant AND i.actor = actor_queues.actor
            AND i.instance_id = actor_queues.instance_id)
WHERE status <> 'dead' AND (tenant, actor, instance_id) IN (
    SELECT json_extract(value, '$.tenant'), json_extract(value, '$.actor'),
        json_extract(value, '$.instance_id')
    FROM json_each(:rows));

-- name: list_pending
-- A custom-mode select chooses among these: the first due pending rows of one group of an
-- instance this worker owns, in arrival order.
SELECT q.queue_id, q.event_id, q.tenant, q.actor, q.instance_id, q.group_id, e.stream,
    e.data, q.attempts, e.appended_at
FROM actor_queues q JOIN stream_events e ON e.event_id = q.event_id
WHERE q.tenant = :tenant AND q.actor = :actor AND q.instance_id = :instance_id
    AND q.status = 'pending' AND q.group_id = :group_id AND q.worker_id = :worker_id
    AND q.available_at <= :now
ORDER BY q.queue_id
LIMIT :limit;

-- name: claim_event
-- The row a select chose, claimed specifically under the owner's epoch (one writer at a time:
-- the IMMEDIATE transaction).
UPDATE actor_queues
SET status = 'claimed', claimed_by = :worker_id, claim_epoch = owner_epoch
WHERE queue_id = :queue_id AND status = 'pending' AND worker_id = :worker_id
    AND owner_epoch = :epoch
RETURNING queue_id;

-- name: add_slot
-- A batch of grants takes each ledger row once, by the number of its grants.
INSERT INTO yoke_ledger (key, running) VALUES (:key, :n)
ON CONFLICT (key) DO UPDATE SET running = yoke_ledger.running + :n
RETURNING running;
-- name: unmark_granted
-- A grant of a batch that did not fit: the start is QUEUED again, as if never picked.
UPDATE yoke_starts SET status = 'QUEUED', execution_id = NULL, decided_at = NULL
WHERE start_id = :start_id AND status = 'GRANTED';
-- name: delete_steps_of
DELETE FROM yoke_steps WHERE execution_id = :execution_id;
-- name: delete_execution
DELETE FROM yoke_executions WHERE execution_id = :execution_id;
-- name: peek_slots
-- Counts without a lock: a batch skips the grants that cannot fit before writing anything.
SELECT key, running FROM yoke_ledger WHERE key IN (SELECT value FROM json_each(:keys));

-- ===================================================================================
-- actor inspection (the HTTP API): reads only. `:tenant` NULL means every tenant.

-- name: actor_instance_counts
SELECT actor, count(*) AS instances FROM actor_instances
WHERE :tenant IS NULL OR tenant = :tenant
GROUP BY actor;

-- name: actor_queue_counts
SELECT actor, status, count(*) AS n FROM actor_queues
WHERE :tenant IS NULL OR tenant = :tenant
GROUP BY actor, status;

-- name: instances_page
-- Keyset paging on (tenant, instance_id): a page starts after the last row of the one before.
SELECT i.tenant, i.actor, i.instance_id, i.state, i.version, i.worker_id, i.owner_epoch,
    i.created_at,
    (SELECT count(*) FROM actor_queues q WHERE q.tenant = i.tenant AND q.actor = i.actor
        AND q.instance_id = i.instance_id AND q.status = 'pending') AS pending,
    (SELECT count(*) FROM actor_queues q WHERE q.tenant = i.tenant AND q.actor = i.actor
        AND q.instance_id = i.instance_id AND q.status = 'claimed') AS in_flight,
    (SELECT count(*) FROM actor_queues q WHERE q.tenant = i.tenant AND q.actor = i.actor
        AND q.instance_id = i.instance_id AND q.status = 'dead') AS dead
FROM actor_instances i
WHERE i.actor = :actor AND (:tenant IS NULL OR i.tenant = :tenant)
    AND (:after_tenant IS NULL OR (i.tenant, i.instance_id) > (:after_tenant, :after_id))
ORDER BY i.tenant, i.instance_id
LIMIT :limit;

-- name: owned_instances
SELECT worker_id, count(*) AS instances FROM actor_instances
WHERE worker_id IS NOT NULL
GROUP BY worker_id;

-- name: add_slot_counts
-- :counts is a JSON object {key: n}: each ledger row is taken once, by its count.
INSERT INTO yoke_ledger (key, running)
SELECT key, value FROM json_each(:counts) WHERE true ORDER BY key
ON CONFLICT (key) DO UPDATE SET running = yoke_ledger.running + excluded.running
RETURNING key, running;
-- name: release_slot_counts
UPDATE yoke_ledger SET running = running - c.value
FROM json_each(:counts) AS c WHERE yoke_ledger.key = c.key;


-- ===================================================================================
-- executors (per-tenant processes that run process()) and leases.

-- name: pending_tenants_among
-- Which of :tenants have pending rows for this worker: one index probe per tenant.
SELECT t.value AS tenant FROM json_each(:tenants) t
WHERE EXISTS (
    SELECT 1 FROM actor_queues q
    WHERE q.status = 'pending' AND q.worker_id = :worker_id AND q.tenant = t.value)
ORDER BY t.value;

-- name: release_claims
-- Claims back to pending with no attempt counted: what a dead executor was running or held.
UPDATE actor_queues SET status = 'pending', claimed_by = NULL
WHERE queue_id IN (
    SELECT q.queue_id
    FROM json_each(:done) c
    JOIN actor_queues q ON q.queue_id = json_extract(c.value, '$[0]')
    WHERE q.status = 'claimed' AND q.claimed_by = :worker_id AND q.worker_id = :worker_id
        AND q.claim_epoch = q.owner_epoch AND q.claim_epoch = json_extract(c.value, '$[1]'))
RETURNING queue_id;

-- name: charge_crash
-- One crash attempt more; at :dead_after the row is a dead letter, else pending again.
UPDATE actor_queues
SET crash_attempts = crash_attempts + 1, error = :error, claimed_by = NULL,
    status = CASE WHEN crash_attempts + 1 >= :dead_after THEN 'dead' ELSE 'pending' END,
    dead_at = CASE WHEN crash_attempts + 1 >= :dead_after THEN :now ELSE dead_at END
WHERE queue_id = :queue_id AND status = 'claimed' AND claimed_by = :worker_id
    AND worker_id = :worker_id AND claim_epoch = :epoch AND owner_epoch = :epoch
RETURNING status;

-- name: timer_tenants
-- Tenants with a timer due before :before_ms and an instance this worker owns (its executor
-- is started before the timer fires), soonest first.
SELECT s.tenant, min(s.fire_at_ms) AS fire_at_ms FROM scheduled_events s
WHERE s.fire_at_ms <= :before_ms AND EXISTS (
    SELECT 1 FROM actor_instances i WHERE i.tenant = s.tenant AND i.worker_id = :worker_id)
GROUP BY s.tenant
ORDER BY min(s.fire_at_ms), s.tenant
LIMIT :limit;

-- name: record_executors
INSERT INTO runtime_executors (worker_id, tenant, pid, state, started_at, boot_ms, dispatches,
    active_dispatch, crashes, isolation, stop_reason, updated_at)
SELECT json_extract(value, '$.worker_id'), json_extract(value, '$.tenant'),
    json_extract(value, '$.pid'), json_extract(value, '$.state'),
    json_extract(value, '$.started_at'), json_extract(value, '$.boot_ms'),
    json_extract(value, '$.dispatches'), json_extract(value, '$.active_dispatch'),
    json_extract(value, '$.crashes'), json_extract(value, '$.isolation'),
    json_extract(value, '$.stop_reason'), json_extract(value, '$.updated_at')
FROM json_each(:rows) WHERE true
ON CONFLICT (worker_id, tenant) DO UPDATE SET pid = excluded.pid, state = excluded.state,
    started_at = excluded.started_at, boot_ms = excluded.boot_ms,
    dispatches = excluded.dispatches, active_dispatch = excluded.active_dispatch,
    crashes = excluded.crashes, isolation = excluded.isolation,
    stop_reason = excluded.stop_reason, updated_at = excluded.updated_at;

-- name: record_spares
INSERT INTO runtime_spares (worker_id, slot, pid, state, started_at, boot_ms, isolation,
    stop_reason, updated_at)
SELECT json_extract(value, '$.worker_id'), json_extract(value, '$.slot'),
    json_extract(value, '$.pid'), json_extract(value, '$.state'),
    json_extract(value, '$.started_at'), json_extract(value, '$.boot_ms'),
    json_extract(value, '$.isolation'), json_extract(value, '$.stop_reason'),
    json_extract(value, '$.updated_at')
FROM json_each(:rows) WHERE true
ON CONFLICT (worker_id, slot) DO UPDATE SET pid = excluded.pid, state = excluded.state,
    started_at = excluded.started_at, boot_ms = excluded.boot_ms,
    isolation = excluded.isolation, stop_reason = excluded.stop_reason,
    updated_at = excluded.updated_at;

-- name: list_executors
-- The tenants' executors, then (when no tenant is asked for) the warm spares, tenant null.
SELECT worker_id, tenant, pid, state, started_at, boot_ms, dispatches, active_dispatch,
    crashes, isolation, stop_reason, updated_at
FROM runtime_executors
WHERE :tenant IS NULL OR tenant = :tenant
UNION ALL
SELECT worker_id, NULL, pid, state, started_at, boot_ms, 0, 0, 0, isolation, stop_reason,
    updated_at
FROM runtime_spares
WHERE :tenant IS NULL
ORDER BY tenant NULLS LAST, worker_id, pid
LIMIT :limit;

-- Leases: times are the database's (epoch seconds from julianday('now')), never a caller's,
-- so hosts whose clocks disagree still agree on who holds a lease. A lease is taken only when
-- free or expired, and every take bumps its epoch (the fencing token of that term); a renewal
-- or a release names the term (holder and epoch), so a holder that lost its term changes
-- nothing.

-- name: acquire_lease
-- `force`: take it even while another holder's term runs (that holder is known to be gone).
INSERT INTO yoke_leases (name, holder, epoch, expires_at, acquired_at)
VALUES (:name, :holder, 1, (julianday('now') - 2440587.5) * 86400.0 + :ttl, (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = yoke_leases.epoch + 1,
    expires_at = excluded.expires_at, acquired_at = excluded.acquired_at
WHERE yoke_leases.holder IS NULL
    OR yoke_leases.expires_at < (julianday('now') - 2440587.5) * 86400.0
    OR :force
RETURNING name, holder, epoch, expires_at, acquired_at, (julianday('now') - 2440587.5) * 86400.0 AS now;

-- name: renew_lease
UPDATE yoke_leases SET expires_at = (julianday('now') - 2440587.5) * 86400.0 + :ttl
WHERE name = :name AND holder = :holder AND epoch = :epoch
RETURNING name, holder, epoch, expires_at, acquired_at, (julianday('now') - 2440587.5) * 86400.0 AS now;

-- name: release_lease
UPDATE yoke_leases SET holder = NULL, expires_at = 0
WHERE name = :name AND holder = :holder AND epoch = :epoch;

-- name: get_lease
SELECT name, holder, epoch, expires_at, acquired_at, (julianday('now') - 2440587.5) * 86400.0 AS now
FROM yoke_leases WHERE name = :name;

-- ===================================================================================
-- tenants: fleet-wide settings (weight, max_running) and the per-tenant cap's counters.

-- name: tenant_settings
SELECT tenant, weight, max_running, updated_by, updated_at, version FROM tenant_settings
ORDER BY tenant LIMIT :limit;

-- name: get_tenant_settings
SELECT tenant, weight, max_running, updated_by, updated_at, version FROM tenant_settings
WHERE tenant = :tenant;

-- name: notify_tenant_settings
SELECT 1;

-- name: put_tenant_settings
-- A compare-and-set: an existing row changes only if it is still at the version the change was
-- decided on (0: there was none), so two changes decided on the same row never both land.
INSERT INTO tenant_settings (tenant, weight, max_running, updated_by, updated_at, version)
VALUES (:tenant, :weight, :max_running, :updated_by, :now, 1)
ON CONFLICT (tenant) DO UPDATE SET weight = excluded.weight,
    max_running = excluded.max_running, updated_by = excluded.updated_by,
    updated_at = excluded.updated_at, version = tenant_settings.version + 1
WHERE tenant_settings.version = :expect
RETURNING tenant, weight, max_running, updated_by, updated_at, version;

-- name: lock_tenant_cap
-- The write transaction is IMMEDIATE: takers of every tenant run one at a time.
SELECT max_running FROM tenant_settings WHERE tenant = :tenant;

-- name: tenant_running_now
-- The tenant's calls running on live workers (a stale or stopped worker's count lapses) and on
-- the asking worker itself.
SELECT coalesce(sum(r.running), 0) AS running
FROM tenant_running r LEFT JOIN runtime_workers w ON w.worker_id = r.worker_id
WHERE r.tenant = :tenant AND r.running > 0
    AND (r.worker_id = :worker_id
        OR (w.stopped_at IS NULL AND w.heartbeat_at >= :live_after));

-- name: take_tenant_slot
INSERT INTO tenant_running (tenant, worker_id, running) VALUES (:tenant, :worker_id, 1)
ON CONFLICT (tenant, worker_id) DO UPDATE SET running = tenant_running.running + 1;

-- name: free_tenant_slot
UPDATE tenant_running SET running = running - 1
WHERE tenant = :tenant AND worker_id = :worker_id AND running > 0;

-- name: clear_tenant_slots
DELETE FROM tenant_running WHERE worker_id = :worker_id;

-- name: lease_running
SELECT holder FROM yoke_leases
WHERE name = :name AND holder IS NOT NULL
    AND expires_at >= (julianday('now') - 2440587.5) * 86400.0;

-- name: end_lapsed_holder
-- One process holds a SQLite file's write lock at a time: no session of a former holder can
-- hold a take back.
SELECT 0 AS ended;

-- name: gate_lease
-- The takeover's side of the fence: the lease's advisory lock, EXCLUSIVE, before its epoch is
-- bumped; it waits for every fenced write in flight (each holds it SHARED) to end.
SELECT 1;

-- name: check_fence
-- The writer's side: true, or (PostgreSQL) SQLSTATE YK001 unless the term is still running.
SELECT EXISTS (SELECT 1 FROM yoke_leases WHERE name = :name AND epoch = :epoch
    AND holder IS NOT NULL AND expires_at > (julianday('now') - 2440587.5) * 86400.0) AS ok;

-- name: ha_peers
SELECT 0 AS n;

-- name: notify_lease
SELECT 1;

-- name: adopt_queued_starts
-- A new leader takes every QUEUED start into its own queue: those a former leader left, and
-- its own from an earlier term (its queue was emptied when that term ended).
UPDATE yoke_starts SET instance_id = :instance_id
WHERE status = 'QUEUED'
RETURNING *;

-- name: abort_queued_starts
UPDATE yoke_starts SET status = 'ABORTED', reason = :reason, decided_at = :now
WHERE status = 'QUEUED'
RETURNING start_id;

-- the fleet: placement and rebalancing (yoke.actors.fleet); see the PostgreSQL file.

-- name: fleet_counts
SELECT w.worker_id, sum(w.owned) AS owned, sum(w.moving_out) AS moving_out,
    sum(w.moving_in) AS moving_in, sum(w.pending) AS pending
FROM (
    SELECT worker_id, 1 AS owned, CASE WHEN moving_to IS NULL THEN 0 ELSE 1 END AS moving_out,
        0 AS moving_in, 0 AS pending
    FROM actor_instances
    WHERE worker_id IS NOT NULL AND (:tenant IS NULL OR tenant = :tenant)
    UNION ALL
    SELECT moving_to, 0, 0, 1, 0 FROM actor_instances
    WHERE moving_to IS NOT NULL AND (:tenant IS NULL OR tenant = :tenant)
    UNION ALL
    SELECT worker_id, 0, 0, 0, 1 FROM actor_queues
    WHERE status = 'pending' AND worker_id IS NOT NULL AND :with_pending
        AND (:tenant IS NULL OR tenant = :tenant)
) AS w
GROUP BY w.worker_id;

-- name: owned_page
SELECT tenant, actor, instance_id, worker_id FROM actor_instances
WHERE worker_id IS NOT NULL AND moving_to IS NULL
    AND (:worker_id IS NULL OR worker_id = :worker_id)
    AND (tenant, actor, instance_id) > (:after_tenant, :after_actor, :after_id)
ORDER BY tenant, actor, instance_id
LIMIT :limit;

-- name: mark_moves
UPDATE actor_instances SET moving_to = (
        SELECT json_extract(value, '$.taker') FROM json_each(:rows)
        WHERE json_extract(value, '$.tenant') = actor_instances.tenant
            AND json_extract(value, '$.actor') = actor_instances.actor
            AND json_extract(value, '$.instance_id') = actor_instances.instance_id),
    moving_since = :now
WHERE moving_to IS NULL AND (tenant, actor, instance_id, worker_id) IN (
    SELECT json_extract(value, '$.tenant'), json_extract(value, '$.actor'),
        json_extract(value, '$.instance_id'), json_extract(value, '$.giver')
    FROM json_each(:rows));

-- name: moves_from
SELECT tenant, actor, instance_id, moving_to, owner_epoch FROM actor_instances
WHERE worker_id = :worker_id AND moving_to IS NOT NULL
ORDER BY tenant, actor, instance_id
LIMIT :limit;

-- name: lock_move
SELECT i.tenant, i.actor, i.instance_id, i.moving_to,
    EXISTS (SELECT 1 FROM runtime_workers w WHERE w.worker_id = i.moving_to
        AND w.stopped_at IS NULL AND w.heartbeat_at >= :stale_before) AS taker_live
FROM actor_instances i
WHERE i.tenant = :tenant AND i.actor = :actor AND i.instance_id = :instance_id
    AND i.worker_id = :worker_id AND i.owner_epoch = :epoch AND i.moving_to IS NOT NULL;

-- name: pending_heads
-- The instances of one worker with the most pending rows (not moving): the balancer's heavy
-- candidates when pending events, not instance counts, are uneven.
SELECT q.tenant, q.actor, q.instance_id, count(*) AS n
FROM actor_queues q
JOIN actor_instances i ON i.tenant = q.tenant AND i.actor = q.actor
    AND i.instance_id = q.instance_id
WHERE q.status = 'pending' AND q.worker_id = :worker_id AND i.moving_to IS NULL
GROUP BY q.tenant, q.actor, q.instance_id
ORDER BY n DESC, q.tenant, q.actor, q.instance_id
LIMIT :limit;

-- ===================================================================================
-- Idempotency-Keys of appended events, in the append's transaction (append_event_once).

-- name: claim_event_key
-- The key's row, unless a live one is kept: a concurrent claim of the same key waits for the
-- first one's transaction, then returns nothing (an expired row is taken over).
INSERT INTO yoke_event_keys (principal, idem_key, fingerprint, event_id, expires_at)
VALUES (:principal, :idem_key, :fingerprint, NULL, :expires_at)
ON CONFLICT (principal, idem_key) DO UPDATE
SET fingerprint = excluded.fingerprint, event_id = NULL, expires_at = excluded.expires_at
WHERE yoke_event_keys.expires_at <= :now
RETURNING idem_key;

-- name: event_key
SELECT fingerprint, event_id FROM yoke_event_keys WHERE principal = :principal AND idem_key = :idem_key;

-- name: set_event_key
UPDATE yoke_event_keys SET event_id = :event_id WHERE principal = :principal AND idem_key = :idem_key;

-- name: forget_event_keys
DELETE FROM yoke_event_keys WHERE expires_at <= :now;
