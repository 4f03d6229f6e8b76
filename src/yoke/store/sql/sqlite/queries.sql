-- Named queries of the SQLite backend. `-- name: x` starts query x; parameters are :name.
-- Only the queries whose SQLite text differs from the other backend's live here; the rest
-- are in ../queries.sql, shared.
-- Writes run inside BEGIN IMMEDIATE (see yoke/store/sqlite.py), so no row locks are needed.

-- name: insert_start
-- A start is logged QUEUED, or GRANTED at once (with its execution id) by a grant batch that
-- logs it because it fits.
INSERT INTO yoke_starts (start_id, kind, workflow, session, tenant, priority, input,
    fingerprint, principal, idem_scope, idempotency_key, source_execution_id, from_step, status,
    execution_id, instance_id, created_at, decided_at)
VALUES (:start_id, :kind, :workflow, :session, :tenant, :priority, :input, :fingerprint,
    :principal, coalesce(:principal, ''), :idempotency_key, :source_execution_id, :from_step,
    CASE WHEN :execution_id IS NULL THEN 'QUEUED' ELSE 'GRANTED' END,
    :execution_id, :instance_id, :created_at, :decided_at)
ON CONFLICT DO NOTHING;

-- name: insert_execution
INSERT INTO yoke_executions (execution_id, start_id, workflow, session, tenant, input, status,
    parent_id, restarted_from, resumed_from, slot_keys, instance_id, created_at, leader_epoch)
VALUES (:execution_id, :start_id, :workflow, :session, :tenant, :input, 'RUNNING',
    :parent_id, :restarted_from, :resumed_from, :slot_keys, :instance_id, :created_at,
    :leader_epoch);

-- name: mark_granted
UPDATE yoke_starts SET status = 'GRANTED', execution_id = :execution_id, decided_at = :now
WHERE start_id = :start_id AND status = 'QUEUED'
RETURNING *;

-- name: copy_steps
INSERT INTO yoke_steps (execution_id, position, name, result, recorded_at, status, attempts,
    first_attempt, error, retry_at)
SELECT :new_id, position, name, result, recorded_at, status, attempts, first_attempt, error,
    retry_at
FROM yoke_steps
WHERE execution_id = :old_id AND (:before IS NULL OR position < :before);

-- name: decide_start
UPDATE yoke_starts
SET status = :status, reason = :reason, decided_at = :now,
    idempotency_key = CASE WHEN :forget_key THEN NULL ELSE idempotency_key END
WHERE start_id = :start_id AND status = 'QUEUED'
RETURNING *;

-- name: finish_execution
UPDATE yoke_executions
SET status = :status, output = :output, error = :error, finished_at = :now
WHERE execution_id = :execution_id AND status = 'RUNNING'
RETURNING execution_id, slot_keys;

-- name: list_executions
SELECT * FROM yoke_executions
WHERE (:status IS NULL OR status = :status)
  AND (:session IS NULL OR session = :session)
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:before_seq IS NULL OR seq < :before_seq)
ORDER BY seq DESC
LIMIT :limit;

-- name: tenant_executions
-- One tenant's, newest first: a range of the yoke_executions_tenant index.
SELECT * FROM yoke_executions
WHERE tenant = :tenant
  AND seq < coalesce(:before_seq, 9223372036854775807)
  AND (:status IS NULL OR status = :status)
  AND (:session IS NULL OR session = :session)
  AND (:workflow IS NULL OR workflow = :workflow)
ORDER BY seq DESC
LIMIT :limit;

-- name: recent_controls
SELECT * FROM yoke_control_log
WHERE (:kind IS NULL OR kind = :kind)
  AND (:before_seq IS NULL OR seq < :before_seq)
ORDER BY seq DESC
LIMIT :limit;

-- name: running_of_instance
SELECT execution_id, slot_keys, parent_id, start_id FROM yoke_executions
WHERE instance_id = :instance_id AND status = 'RUNNING'
ORDER BY execution_id;

-- name: notify_request
SELECT 1;

-- name: handle_requests
UPDATE yoke_requests SET handled_at = :now
WHERE seq IN (SELECT value FROM json_each(:seqs)) AND handled_at IS NULL;

-- name: prune_steps_of
DELETE FROM yoke_steps WHERE execution_id IN (SELECT value FROM json_each(:ids));

-- name: prune_requests_of
DELETE FROM yoke_requests WHERE execution_id IN (SELECT value FROM json_each(:ids));


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
ON CONFLICT DO NOTHING
RETURNING tenant;

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
SET status = 'claimed', claimed_by = :worker_id, claim_epoch = owner_epoch, claim_id = :claim_id
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
    e.data, q.attempts, q.claim_epoch AS epoch, e.appended_at, q.suspect
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

-- name: get_states
SELECT tenant, actor, instance_id, state, version, worker_id, owner_epoch FROM actor_instances
WHERE (tenant, actor, instance_id) IN (
    SELECT json_extract(value, '$.tenant'), json_extract(value, '$.actor'),
        json_extract(value, '$.instance_id')
    FROM json_each(:rows));

-- name: schedule_events
INSERT INTO scheduled_events (tenant, stream, data, fire_at_ms, created_at)
SELECT json_extract(value, '$.tenant'), json_extract(value, '$.stream'),
    json_extract(value, '$.data'), json_extract(value, '$.fire_at_ms'), :now
FROM json_each(:rows)
WHERE true
RETURNING timer_id;

-- name: notify_schedule_change
SELECT 1;

-- name: take_timers
-- Delete these timers unless fired already (one writer at a time: no row locks needed).
DELETE FROM scheduled_events
WHERE timer_id IN (SELECT value FROM json_each(:ids))
RETURNING timer_id, tenant;

-- name: add_held
-- What tenants now hold more of (:counts, a JSON object {tenant: n}, `kind` instances or
-- timers), each increment carrying its tenant's quota (its own, else `*`'s; none with
-- :capped false) as `cap`: the CHECK yoke_tenant_quota refuses one past it, and with it the
-- whole transaction.
INSERT INTO yoke_tenant_usage (tenant, kind, used, cap)
SELECT c.key, :kind, c.value,
    CASE WHEN NOT :capped THEN NULL
        WHEN :kind = 'instances' THEN coalesce(t.max_instances, d.max_instances)
        ELSE coalesce(t.max_timers, d.max_timers) END
FROM json_each(:counts) AS c
LEFT JOIN tenant_settings t ON t.tenant = c.key
LEFT JOIN tenant_settings d ON d.tenant = '*'
WHERE true
ON CONFLICT (tenant, kind) DO UPDATE
SET used = yoke_tenant_usage.used + excluded.used, cap = excluded.cap;

-- name: register_worker
INSERT INTO runtime_workers (worker_id, hostname, pid, started_at, heartbeat_at)
VALUES (:worker_id, :hostname, :pid, :now, :now)
ON CONFLICT (worker_id) DO UPDATE
SET hostname = excluded.hostname, pid = excluded.pid, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at, stopped_at = NULL;

-- name: lock_instances_of_worker
SELECT tenant, actor, instance_id FROM actor_instances
WHERE worker_id = :worker_id
ORDER BY tenant, actor, instance_id;

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
UPDATE actor_queues SET status = 'pending', claimed_by = NULL, solo = 0
WHERE status = 'claimed' AND (tenant, actor, instance_id) IN (
    SELECT json_extract(value, '$.tenant'), json_extract(value, '$.actor'),
        json_extract(value, '$.instance_id')
    FROM json_each(:rows));

-- name: unclaim_dead
-- The claimed rows of a worker that died: each a suspect (it may be the call that killed its
-- worker), pending again; the one it ran alone (`solo`) is charged a crash attempt, and is a
-- dead letter at `dead_after`.
UPDATE actor_queues SET claimed_by = NULL, suspect = 1, solo = 0,
    crash_attempts = crash_attempts + solo,
    error = CASE WHEN solo = 1 THEN :error ELSE error END,
    status = CASE WHEN solo = 1 AND crash_attempts + 1 >= :dead_after THEN 'dead'
        ELSE 'pending' END,
    dead_at = CASE WHEN solo = 1 AND crash_attempts + 1 >= :dead_after THEN :now
        ELSE dead_at END
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

-- name: claim_event
-- The row a select chose, claimed specifically under the owner's epoch (one writer at a time:
-- the IMMEDIATE transaction).
UPDATE actor_queues
SET status = 'claimed', claimed_by = :worker_id, claim_epoch = owner_epoch, claim_id = NULL
WHERE queue_id = :queue_id AND status = 'pending' AND worker_id = :worker_id
    AND owner_epoch = :epoch
RETURNING queue_id;

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

-- name: add_slot_counts
-- :counts is a JSON object {key: n}: each ledger row is taken once, by its count.
INSERT INTO yoke_ledger (key, running)
SELECT key, value FROM json_each(:counts) WHERE true ORDER BY key
ON CONFLICT (key) DO UPDATE SET running = yoke_ledger.running + excluded.running
RETURNING key, running;

-- name: release_slot_counts
UPDATE yoke_ledger SET running = running - c.value
FROM json_each(:counts) AS c WHERE yoke_ledger.key = c.key;

-- name: drop_idle_slots
-- A ledger row back at zero is removed (a row per session ever seen would otherwise stay).
DELETE FROM yoke_ledger WHERE running = 0 AND key IN (SELECT c.key FROM json_each(:counts) AS c);


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
UPDATE actor_queues SET status = 'pending', claimed_by = NULL, solo = 0
WHERE queue_id IN (
    SELECT q.queue_id
    FROM json_each(:done) c
    JOIN actor_queues q ON q.queue_id = json_extract(c.value, '$[0]')
    WHERE q.status = 'claimed' AND q.claimed_by = :worker_id AND q.worker_id = :worker_id
        AND q.claim_epoch = q.owner_epoch AND q.claim_epoch = json_extract(c.value, '$[1]'))
RETURNING queue_id;

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

-- name: get_lease
SELECT name, holder, epoch, expires_at, acquired_at, (julianday('now') - 2440587.5) * 86400.0 AS now
FROM yoke_leases WHERE name = :name;


-- ===================================================================================
-- tenants: fleet-wide settings (weight, max_running) and the per-tenant cap's counters.

-- name: notify_tenant_settings
SELECT 1;

-- name: lock_tenant
-- The write transaction is IMMEDIATE: takers of every tenant run one at a time.
SELECT 1;

-- name: take_tokens
-- A token bucket as GCRA on the database's clock: the row holds the bucket's theoretical
-- arrival time (tat); `n` tokens conform when max(tat, now) + n/rate - burst/rate <= now, and
-- taking them moves tat to max(tat, now) + n/rate. One statement: a row is returned when the
-- tokens were taken, none when they were not (and nothing changed). A bucket seen for the
-- first time is full.
INSERT INTO yoke_tenant_rates (tenant, kind, tat)
SELECT :tenant, :kind, ((julianday('now') - 2440587.5) * 86400.0) + :n * 1.0 / :rate
WHERE :n <= :burst
ON CONFLICT (tenant, kind) DO UPDATE
SET tat = max(tat, ((julianday('now') - 2440587.5) * 86400.0)) + :n * 1.0 / :rate
WHERE max(tat, ((julianday('now') - 2440587.5) * 86400.0)) + (:n - :burst) * 1.0 / :rate <= ((julianday('now') - 2440587.5) * 86400.0)
RETURNING tat;

-- name: bucket_state
SELECT (SELECT tat FROM yoke_tenant_rates WHERE tenant = :tenant AND kind = :kind) AS tat,
    ((julianday('now') - 2440587.5) * 86400.0) AS now;

-- name: forget_full_buckets
-- A bucket whose tat has passed is full: the same as no row.
DELETE FROM yoke_tenant_rates WHERE tat < ((julianday('now') - 2440587.5) * 86400.0);

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

-- name: lock_move
SELECT i.tenant, i.actor, i.instance_id, i.moving_to,
    EXISTS (SELECT 1 FROM runtime_workers w WHERE w.worker_id = i.moving_to
        AND w.stopped_at IS NULL AND w.heartbeat_at >= :stale_before) AS taker_live
FROM actor_instances i
WHERE i.tenant = :tenant AND i.actor = :actor AND i.instance_id = :instance_id
    AND i.worker_id = :worker_id AND i.owner_epoch = :epoch AND i.moving_to IS NOT NULL;

-- name: notify_schedules
-- No NOTIFY: the changing process wakes its own ticker; the others' poll finds the change.
SELECT 1;

-- name: notify_timers
SELECT 1;

-- name: lock_execution
-- One writer at a time: the write transaction is the lock.
SELECT * FROM yoke_executions WHERE execution_id = :execution_id;

-- name: fire_starts
-- Due scheduled starts become QUEUED on the firing instance (one writer: each once).
UPDATE yoke_starts SET status = 'QUEUED', instance_id = :instance_id
WHERE seq IN (SELECT value FROM json_each(:seqs)) AND status = 'SCHEDULED'
  AND due_at_ms <= :now_ms
RETURNING *;

-- name: prune_signals_of
DELETE FROM yoke_signals WHERE execution_id IN (SELECT value FROM json_each(:ids));
