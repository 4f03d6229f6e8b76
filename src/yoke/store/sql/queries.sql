-- Named queries that both backends run as written. `-- name: x` starts query x; parameters
-- are :name, rewritten to %(name)s for PostgreSQL when the file is loaded (yoke/store/sqlfiles.py).
-- A query whose text must differ between SQLite and PostgreSQL lives in each backend's own
-- queries.sql instead, never here and there (tests/store/test_migrations.py checks both ways).
-- How each backend isolates its writes: the header of its own queries.sql.

-- name: get_start_by_key
SELECT * FROM yoke_starts WHERE idem_scope = :idem_scope AND idempotency_key = :idempotency_key;

-- name: get_start
SELECT * FROM yoke_starts WHERE start_id = :start_id;

-- name: release_slot
UPDATE yoke_ledger SET running = running - :n WHERE key = :key;

-- name: drop_idle_slot
-- A ledger row back at zero is removed (a row per session ever seen would otherwise stay).
DELETE FROM yoke_ledger WHERE key = :key AND running = 0;

-- name: set_start_priority
UPDATE yoke_starts SET priority = :priority
WHERE start_id = :start_id AND status = 'QUEUED'
RETURNING *;

-- name: get_execution
SELECT * FROM yoke_executions WHERE execution_id = :execution_id;

-- name: children_of
SELECT * FROM yoke_executions WHERE parent_id = :execution_id ORDER BY seq LIMIT :limit;

-- name: reruns_of
-- The executions restarted or resumed from one (two partial indexes, one each).
SELECT * FROM (
  SELECT * FROM yoke_executions WHERE restarted_from = :execution_id
  UNION ALL
  SELECT * FROM yoke_executions WHERE resumed_from = :execution_id
) AS reruns ORDER BY seq LIMIT :limit;

-- name: record_step
-- A step's record replaces its earlier one of the same name (an attempt that failed), never a
-- SUCCEEDED one: a recorded result is final (the same record again, a retry of a write whose
-- answer was lost, changes nothing and is answered as written).
INSERT INTO yoke_steps (execution_id, position, name, result, recorded_at, status, attempts,
    first_attempt, error, retry_at)
VALUES (:execution_id, :position, :name, :result, :now, :status, :attempts, :first_attempt,
    :error, :retry_at)
ON CONFLICT (execution_id, position) DO UPDATE SET result = excluded.result,
    recorded_at = excluded.recorded_at, status = excluded.status,
    attempts = excluded.attempts, first_attempt = excluded.first_attempt,
    error = excluded.error, retry_at = excluded.retry_at
WHERE yoke_steps.name = excluded.name AND (yoke_steps.status <> 'SUCCEEDED'
    OR (excluded.status = 'SUCCEEDED' AND yoke_steps.result = excluded.result));

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

-- name: end_dead_execution
-- An execution of a dead instance ends (ABORTED, or CANCELLED when a cancel was asked), each
-- with its own reason; its row is locked already (running_of_instance).
UPDATE yoke_executions
SET status = :status, error = :error, finished_at = :now
WHERE execution_id = :execution_id AND status = 'RUNNING';

-- name: cancels_asked_of_instance
SELECT DISTINCT execution_id FROM yoke_requests
WHERE instance_id = :instance_id AND kind = 'cancel' AND handled_at IS NULL;

-- name: handle_requests_of_instance
-- A dead instance's requests are done with: the executions they were for have ended.
UPDATE yoke_requests SET handled_at = :now
WHERE instance_id = :instance_id AND handled_at IS NULL;

-- name: adopt_starts_of_instance
-- A dead instance's queued starts become the recovering instance's, still QUEUED.
UPDATE yoke_starts SET instance_id = :to
WHERE instance_id = :instance_id AND status = 'QUEUED'
RETURNING *;

-- name: set_start_recovery
UPDATE yoke_starts SET recovery = :recovery WHERE start_id = :start_id;

-- name: abort_starts_of_instance
UPDATE yoke_starts SET status = 'ABORTED', reason = :reason, decided_at = :now
WHERE instance_id = :instance_id AND status = 'QUEUED'
RETURNING start_id;

-- ===================================================================================
-- requests to executions (a cancel): a row the execution's owner hears and marks handled.

-- name: request_cancel
-- Only while it runs; the request names the instance that runs it, which alone acts on it.
INSERT INTO yoke_requests (execution_id, kind, instance_id, principal, payload, created_at)
SELECT execution_id, 'cancel', instance_id, :principal, NULL, :now FROM yoke_executions
WHERE execution_id = :execution_id AND status = 'RUNNING'
RETURNING seq, instance_id;

-- name: pending_requests
SELECT * FROM yoke_requests
WHERE instance_id = :instance_id AND handled_at IS NULL
ORDER BY seq
LIMIT :limit;

-- ===================================================================================
-- retention: finished rows older than the cutoff, a batch at a time (one pruner at a time).

-- name: prune_executions
-- Finished before :before, oldest first. Rows are numbered (seq) as they are created, so those
-- created before :before lie below the first created since, found by the primary key in a
-- walk no longer than the rows to prune: no index on a time, which would cost every finish.
DELETE FROM yoke_executions WHERE seq IN (
    SELECT seq FROM yoke_executions
    WHERE seq < coalesce((SELECT n.seq FROM yoke_executions n WHERE n.created_at >= :before
                          ORDER BY n.seq LIMIT 1), 9223372036854775807)
        AND finished_at < :before
    ORDER BY seq LIMIT :batch)
RETURNING execution_id;

-- name: prune_starts
-- Decided starts whose execution is gone (or that never had one), found as executions are;
-- a QUEUED start is kept.
DELETE FROM yoke_starts WHERE seq IN (
    SELECT s.seq FROM yoke_starts s
    WHERE s.seq < coalesce((SELECT n.seq FROM yoke_starts n WHERE n.created_at >= :before
                            ORDER BY n.seq LIMIT 1), 9223372036854775807)
        AND s.decided_at < :before AND s.status <> 'QUEUED'
        AND NOT EXISTS (SELECT 1 FROM yoke_executions e WHERE e.execution_id = s.execution_id)
    ORDER BY s.seq LIMIT :batch);

-- name: prune_answers
DELETE FROM yoke_idempotency WHERE (principal, idem_key) IN (
    SELECT principal, idem_key FROM yoke_idempotency WHERE expires_at <= :now
    ORDER BY expires_at LIMIT :batch);

-- name: prune_controls
-- Oldest first (entries are numbered as written). The newest limits entry stays whatever its
-- age: it is the limits in force at the next boot.
DELETE FROM yoke_control_log WHERE seq IN (
    SELECT seq FROM yoke_control_log
    WHERE at < :before AND seq <> coalesce(
        (SELECT max(seq) FROM yoke_control_log WHERE kind = 'limits'), 0)
    ORDER BY seq LIMIT :batch);

-- name: find_answer
SELECT * FROM yoke_idempotency
WHERE principal = :principal AND idem_key = :idem_key AND expires_at > :now;

-- name: drop_expired_answer
DELETE FROM yoke_idempotency
WHERE principal = :principal AND idem_key = :idem_key AND expires_at <= :now
RETURNING tenant;

-- name: insert_answer
INSERT INTO yoke_idempotency (principal, tenant, idem_key, fingerprint, status, body, headers,
    created_at, expires_at)
VALUES (:principal, :tenant, :idem_key, :fingerprint, :status, :body, :headers, :created_at,
    :expires_at)
ON CONFLICT DO NOTHING;

-- name: evict_oldest_answers
-- A tenant past its bound forgets its oldest answers first (yoke_idempotency_tenant).
DELETE FROM yoke_idempotency WHERE (principal, idem_key) IN (
    SELECT principal, idem_key FROM yoke_idempotency WHERE tenant = :tenant
    ORDER BY expires_at, principal, idem_key LIMIT :n);


-- name: get_answer
SELECT * FROM yoke_idempotency WHERE principal = :principal AND idem_key = :idem_key;

-- name: forget_answers
DELETE FROM yoke_idempotency WHERE expires_at <= :now RETURNING tenant;

-- ===================================================================================
-- actors (the actors specification, docs/decisions.md): streams, instances, queues, timers.

-- name: unclaim_lost
-- The rows a claim of this worker took (:claim_id) and still holds, back to pending, no
-- attempt counted: the claim committed but its answer was lost, so no one holds them.
UPDATE actor_queues SET status = 'pending', claimed_by = NULL, claim_id = NULL
WHERE claim_id = :claim_id AND status = 'claimed' AND claimed_by = :worker_id;

-- name: requeue
-- process() raised: it ended, so it is no suspect of a worker's death any more.
UPDATE actor_queues
SET attempts = attempts + 1, available_at = :available_at, error = :error, suspect = 0,
    solo = 0
WHERE queue_id = :queue_id AND status = 'claimed' AND claimed_by = :worker_id
    AND worker_id = :worker_id AND claim_epoch = :epoch AND owner_epoch = :epoch;

-- name: dead_letter
UPDATE actor_queues
SET attempts = attempts + 1, status = 'dead', error = :error, dead_at = :now,
    claimed_by = NULL, solo = 0
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

-- name: next_fire_at
SELECT min(fire_at_ms) AS fire_at_ms FROM scheduled_events;

-- name: upcoming_timers
-- The earliest timers after (after_ms, after_id), due or not: a timer loop holds them and fires
-- them when due (append_events with timers), so that the fire itself is one statement.
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

-- name: worker_heartbeat
UPDATE runtime_workers SET heartbeat_at = :now
WHERE worker_id = :worker_id AND stopped_at IS NULL;

-- name: mark_worker_stopped
UPDATE runtime_workers SET stopped_at = :now WHERE worker_id = :worker_id;

-- name: list_workers
SELECT worker_id, hostname, pid, started_at, heartbeat_at, stopped_at FROM runtime_workers
ORDER BY worker_id;

-- name: forget_workers
-- Workers stopped or silent since `before` that own no instance and take no move: a takeover
-- re-owns a gone worker's instances long before (`stale_after`), so their rows can go.
DELETE FROM runtime_workers
WHERE coalesce(stopped_at, heartbeat_at) < :before
    AND NOT EXISTS (SELECT 1 FROM actor_instances i WHERE i.worker_id = runtime_workers.worker_id)
    AND NOT EXISTS (SELECT 1 FROM actor_instances i WHERE i.moving_to = runtime_workers.worker_id)
RETURNING worker_id;

-- name: forget_executors
DELETE FROM runtime_executors
WHERE NOT EXISTS (SELECT 1 FROM runtime_workers w WHERE w.worker_id = runtime_executors.worker_id);

-- name: forget_spares
DELETE FROM runtime_spares
WHERE NOT EXISTS (SELECT 1 FROM runtime_workers w WHERE w.worker_id = runtime_spares.worker_id);

-- name: forget_tenant_counters
DELETE FROM tenant_running
WHERE NOT EXISTS (SELECT 1 FROM runtime_workers w WHERE w.worker_id = tenant_running.worker_id);

-- name: gone_workers
-- Workers stopped or silent since `stale_before`: a takeover never places an orphan on one.
SELECT worker_id FROM runtime_workers
WHERE stopped_at IS NOT NULL OR heartbeat_at < :stale_before;

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

-- name: add_slot
-- A batch of grants takes each ledger row once, by the number of its grants; the caller
-- runs these in key order, so rows are locked in key order (no deadlock).
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

-- ===================================================================================
-- actor inspection (the HTTP API): reads only. `:tenant` NULL means every tenant.

-- name: owned_instances
SELECT worker_id, count(*) AS instances FROM actor_instances
WHERE worker_id IS NOT NULL
GROUP BY worker_id;

-- ===================================================================================
-- executors (per-tenant processes that run process()) and leases.

-- name: charge_crash
-- One crash attempt more; at `dead_after` the row is a dead letter, else pending again.
UPDATE actor_queues
SET crash_attempts = crash_attempts + 1, error = :error, claimed_by = NULL, solo = 0,
    status = CASE WHEN crash_attempts + 1 >= :dead_after THEN 'dead' ELSE 'pending' END,
    dead_at = CASE WHEN crash_attempts + 1 >= :dead_after THEN :now ELSE dead_at END
WHERE queue_id = :queue_id AND status = 'claimed' AND claimed_by = :worker_id
    AND worker_id = :worker_id AND claim_epoch = :epoch AND owner_epoch = :epoch
RETURNING status;

-- name: mark_solo
-- A suspect about to run alone on its worker: if that worker dies now, its recovery charges it.
UPDATE actor_queues SET solo = 1
WHERE queue_id = :queue_id AND status = 'claimed' AND claimed_by = :worker_id
    AND worker_id = :worker_id AND claim_epoch = :epoch AND owner_epoch = :epoch;

-- name: timer_tenants
-- Tenants with a timer due before `before_ms` and an instance this worker owns (its executor
-- is started before the timer fires), soonest first.
SELECT s.tenant, min(s.fire_at_ms) AS fire_at_ms FROM scheduled_events s
WHERE s.fire_at_ms <= :before_ms AND EXISTS (
    SELECT 1 FROM actor_instances i WHERE i.tenant = s.tenant AND i.worker_id = :worker_id)
GROUP BY s.tenant
ORDER BY min(s.fire_at_ms), s.tenant
LIMIT :limit;

-- name: release_lease
UPDATE yoke_leases SET holder = NULL, expires_at = 0
WHERE name = :name AND holder = :holder AND epoch = :epoch;

-- ===================================================================================
-- tenants: one row of settings per tenant (`*`: the defaults), the actors' per-tenant cap
-- counters, token buckets and usage counters.

-- name: tenant_settings
SELECT * FROM tenant_settings ORDER BY tenant LIMIT :limit;

-- name: get_tenant_settings
SELECT * FROM tenant_settings WHERE tenant = :tenant;

-- name: put_tenant_settings
-- A compare-and-set: an existing row changes only if it is still at the version the change was
-- decided on (0: there was none), so two changes decided on the same row never both land.
INSERT INTO tenant_settings (tenant, weight, max_running, append_rate, append_burst,
    max_instances, max_timers, exec_max_running, exec_max_queued, exec_rate, exec_burst,
    updated_by, updated_at, version)
VALUES (:tenant, :weight, :max_running, :append_rate, :append_burst, :max_instances,
    :max_timers, :exec_max_running, :exec_max_queued, :exec_rate, :exec_burst, :updated_by,
    :now, 1)
ON CONFLICT (tenant) DO UPDATE SET weight = excluded.weight,
    max_running = excluded.max_running, append_rate = excluded.append_rate,
    append_burst = excluded.append_burst, max_instances = excluded.max_instances,
    max_timers = excluded.max_timers, exec_max_running = excluded.exec_max_running,
    exec_max_queued = excluded.exec_max_queued, exec_rate = excluded.exec_rate,
    exec_burst = excluded.exec_burst, updated_by = excluded.updated_by,
    updated_at = excluded.updated_at, version = tenant_settings.version + 1
WHERE tenant_settings.version = :expect
RETURNING *;

-- name: tenant_actor_cap
-- The tenant's cap on concurrent process() calls: its own, else the defaults' (`*`).
SELECT coalesce((SELECT max_running FROM tenant_settings WHERE tenant = :tenant),
    (SELECT max_running FROM tenant_settings WHERE tenant = '*')) AS max_running;

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

-- name: moves_from
SELECT tenant, actor, instance_id, moving_to, owner_epoch FROM actor_instances
WHERE worker_id = :worker_id AND moving_to IS NOT NULL
ORDER BY tenant, actor, instance_id
LIMIT :limit;

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

-- name: drop_expired_event_key
-- An expired key gives its row up before a claim (its tenant's count goes down with it).
DELETE FROM yoke_event_keys
WHERE principal = :principal AND idem_key = :idem_key AND expires_at <= :now
RETURNING tenant;

-- name: claim_event_key
-- The key's row, unless one is kept: a concurrent claim of the same key waits for the first
-- one's transaction, then returns nothing.
INSERT INTO yoke_event_keys (principal, tenant, idem_key, fingerprint, event_id, expires_at)
VALUES (:principal, :tenant, :idem_key, :fingerprint, NULL, :expires_at)
ON CONFLICT (principal, idem_key) DO NOTHING
RETURNING idem_key;

-- name: event_key
SELECT fingerprint, event_id FROM yoke_event_keys WHERE principal = :principal AND idem_key = :idem_key;

-- name: set_event_key
UPDATE yoke_event_keys SET event_id = :event_id WHERE principal = :principal AND idem_key = :idem_key;

-- name: forget_event_keys
DELETE FROM yoke_event_keys WHERE expires_at <= :now RETURNING tenant;

-- name: evict_oldest_event_keys
-- A tenant past its bound forgets its oldest keys first (yoke_event_keys_tenant).
DELETE FROM yoke_event_keys WHERE (principal, idem_key) IN (
    SELECT principal, idem_key FROM yoke_event_keys WHERE tenant = :tenant
    ORDER BY expires_at, principal, idem_key LIMIT :n);

-- ===================================================================================
-- what tenants hold (`store/usage.py`): yoke_tenant_usage, counted in the writes that change it.

-- name: add_usage
-- An increment (no quota: `cap` NULL).
INSERT INTO yoke_tenant_usage (tenant, kind, used, cap) VALUES (:tenant, :kind, :n, NULL)
ON CONFLICT (tenant, kind) DO UPDATE
SET used = yoke_tenant_usage.used + excluded.used, cap = NULL
RETURNING used;

-- name: tenant_usage
SELECT kind, used FROM yoke_tenant_usage WHERE tenant = :tenant ORDER BY kind;

-- name: take_back_usage
-- A decrement (of what an increment counted: the row exists); it clears `cap`, since only an
-- increment is checked against a quota.
UPDATE yoke_tenant_usage SET used = used + :n, cap = NULL
WHERE tenant = :tenant AND kind = :kind
RETURNING used;

-- ===================================================================================
-- schedules: one row per (tenant, name) and the ticker's state (see migration 0019).

-- name: put_schedule
-- A new schedule, or a change of one: the ticker's state starts again from `next_at` (a tick
-- decided but not yet started under the old definition is dropped with it).
INSERT INTO yoke_schedules (tenant, name, schedule_id, workflow, input, session, cron, every,
    timezone, catch_up, updated_by, updated_at, seq, next_at)
VALUES (:tenant, :name, :schedule_id, :workflow, :input, :session, :cron, :every, :timezone,
    :catch_up, :updated_by, :now, 1, :next_at)
ON CONFLICT (tenant, name) DO UPDATE SET workflow = excluded.workflow,
    input = excluded.input, session = excluded.session, cron = excluded.cron,
    every = excluded.every, timezone = excluded.timezone, catch_up = excluded.catch_up,
    updated_by = excluded.updated_by, updated_at = excluded.updated_at,
    seq = yoke_schedules.seq + 1, next_at = excluded.next_at, firing = NULL,
    firing_until = NULL
RETURNING *;

-- name: get_schedule
SELECT * FROM yoke_schedules WHERE tenant = :tenant AND name = :name;

-- name: list_schedules
-- By (tenant, name) after the key given; `:tenant` '' lists every tenant's.
SELECT * FROM yoke_schedules
WHERE (:tenant = '' OR tenant = :tenant)
    AND (tenant > :after_tenant OR (tenant = :after_tenant AND name > :after_name))
ORDER BY tenant, name LIMIT :limit;

-- name: count_schedules
SELECT count(*) AS n FROM yoke_schedules WHERE tenant = :tenant;

-- name: delete_schedule
DELETE FROM yoke_schedules WHERE tenant = :tenant AND name = :name;

-- name: due_schedules
-- Schedules with a tick due and none claimed, then those whose claimed ticks' server has not
-- finished them in time (each half read by its own partial index).
SELECT * FROM (
    SELECT * FROM (SELECT * FROM yoke_schedules WHERE firing IS NULL AND next_at <= :now
        ORDER BY next_at LIMIT :limit) AS ticking
    UNION ALL
    SELECT * FROM (SELECT * FROM yoke_schedules WHERE firing IS NOT NULL
        AND firing_until <= :now ORDER BY firing_until LIMIT :limit) AS stale
) AS due
LIMIT :limit;

-- name: next_schedule_due
SELECT min(due) AS due FROM (
    SELECT min(next_at) AS due FROM yoke_schedules WHERE firing IS NULL
    UNION ALL
    SELECT min(firing_until) AS due FROM yoke_schedules WHERE firing IS NOT NULL
) AS soonest;

-- name: claim_ticks
-- The compare-and-set of one server's decision: only the server that read the row at `seq`
-- moves it on, so a tick is decided once however many servers saw it due.
UPDATE yoke_schedules SET next_at = :next_at, firing = :firing, firing_until = :until,
    missed = missed + :missed, seq = seq + 1
WHERE tenant = :tenant AND name = :name AND seq = :seq
RETURNING seq;

-- name: finish_ticks
-- The pending ticks were started (or refused): the row says so, if no change came meanwhile.
UPDATE yoke_schedules SET firing = NULL, firing_until = NULL, last_tick_at = :last_tick_at,
    last_fired_at = :now, last_start_id = :last_start_id, last_outcome = :last_outcome,
    fired = fired + :fired, seq = seq + 1
WHERE tenant = :tenant AND name = :name AND seq = :seq;

-- time in workflows (store/timeverbs.py): scheduled starts, waits, signals.

-- name: schedule_start
UPDATE yoke_starts SET status = 'SCHEDULED', due_at_ms = :due_at_ms
WHERE start_id = :start_id AND status = 'QUEUED'
RETURNING *;

-- name: upcoming_starts
-- The earliest scheduled starts after (after_ms, after_id), by (due_at_ms, seq): the partial
-- index yoke_starts_scheduled.
SELECT seq, due_at_ms FROM yoke_starts
WHERE status = 'SCHEDULED' AND due_at_ms IS NOT NULL
  AND (due_at_ms > :after_ms OR (due_at_ms = :after_ms AND seq > :after_id))
ORDER BY due_at_ms, seq
LIMIT :limit;

-- name: scheduled_starts
-- Delayed starts not yet due (a sleeping execution's wake-up is not one), soonest first.
SELECT * FROM yoke_starts
WHERE status = 'SCHEDULED' AND kind <> 'wake' AND due_at_ms IS NOT NULL
ORDER BY due_at_ms, seq
LIMIT :limit;

-- name: scheduled_starts_of
-- The same, one tenant's.
SELECT * FROM yoke_starts
WHERE status = 'SCHEDULED' AND kind <> 'wake' AND due_at_ms IS NOT NULL AND tenant = :tenant
ORDER BY due_at_ms, seq
LIMIT :limit;

-- name: cancel_scheduled_start
UPDATE yoke_starts SET status = 'CANCELLED', reason = :reason, decided_at = :now
WHERE start_id = :start_id AND status = 'SCHEDULED'
RETURNING *;

-- name: suspend_execution
-- A run gives its slot back to wait: only while it runs here.
UPDATE yoke_executions SET status = 'WAITING', waiting_for = :waiting_for
WHERE execution_id = :execution_id AND status = 'RUNNING' AND instance_id = :instance_id
RETURNING slot_keys;

-- name: insert_wake
-- A WAITING execution's wake-up: a start SCHEDULED at its time (NULL: only a signal wakes it).
INSERT INTO yoke_starts (start_id, kind, workflow, session, tenant, priority, input,
    fingerprint, principal, idem_scope, idempotency_key, source_execution_id, from_step, status,
    execution_id, instance_id, created_at, decided_at, due_at_ms)
VALUES (:start_id, 'wake', :workflow, :session, :tenant, :priority, 'null', '', NULL, '', NULL,
    :source_execution_id, NULL, 'SCHEDULED', NULL, :instance_id, :created_at, NULL, :due_at_ms);

-- name: oldest_signal
SELECT seq, payload FROM yoke_signals
WHERE execution_id = :execution_id AND name = :name AND taken_at IS NULL
ORDER BY seq
LIMIT 1;

-- name: take_signal
UPDATE yoke_signals SET taken_at = :now WHERE seq = :seq AND taken_at IS NULL;

-- name: count_kept_signals
-- The execution's signals not yet taken, counted up to :limit (the partial index yoke_signals_kept).
SELECT count(*) AS n FROM (
    SELECT 1 FROM yoke_signals WHERE execution_id = :execution_id AND taken_at IS NULL LIMIT :limit
) AS kept;

-- name: insert_signal
INSERT INTO yoke_signals (execution_id, name, payload, principal, created_at)
VALUES (:execution_id, :name, :payload, :principal, :now);

-- name: wake_now
-- A signal the execution waits for: its wake-up is due now (not later than it was).
UPDATE yoke_starts SET due_at_ms = :now_ms
WHERE source_execution_id = :execution_id AND kind = 'wake' AND status = 'SCHEDULED'
  AND (due_at_ms IS NULL OR due_at_ms > :now_ms);

-- name: wake_of
SELECT * FROM yoke_starts
WHERE source_execution_id = :execution_id AND kind = 'wake' AND status = 'SCHEDULED';

-- name: wake_execution
-- A wake-up's grant: the WAITING execution runs again, here, on the slots just taken.
UPDATE yoke_executions
SET status = 'RUNNING', instance_id = :instance_id, slot_keys = :slot_keys,
    leader_epoch = :leader_epoch
WHERE execution_id = :execution_id AND status = 'WAITING'
RETURNING *;

-- name: unwake_execution
-- A wake-up's grant that did not fit after all: WAITING again, as before the grant.
UPDATE yoke_executions SET status = 'WAITING'
WHERE execution_id = :execution_id AND status = 'RUNNING';

-- name: end_waiting_execution
UPDATE yoke_executions SET status = :status, error = :error, finished_at = :now
WHERE execution_id = :execution_id AND status = 'WAITING'
RETURNING *;

-- name: cancel_wake
UPDATE yoke_starts SET status = 'CANCELLED', reason = :reason, decided_at = :now
WHERE source_execution_id = :execution_id AND kind = 'wake' AND status IN ('SCHEDULED', 'QUEUED');
