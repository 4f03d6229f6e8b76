-- Named queries of the PostgreSQL backend. `-- name: x` starts query x; parameters are %(name)s.
-- Only the queries whose PostgreSQL text differs from the other backend's live here; the rest
-- are in ../queries.sql, shared.
-- READ COMMITTED: rows that decide a grant are locked (FOR UPDATE / upsert), in key order.

-- name: copy_steps
INSERT INTO yoke_steps (execution_id, position, name, result, recorded_at, status, attempts,
    first_attempt, error, retry_at)
SELECT %(new_id)s, position, name, result, recorded_at, status, attempts, first_attempt, error,
    retry_at
FROM yoke_steps
WHERE execution_id = %(old_id)s AND (%(before)s::integer IS NULL OR position < %(before)s);

-- name: record_step_many
-- A batch of step records (a JSON array), each replacing its step's earlier record of the same
-- name unless that one SUCCEEDED (with another result); the rows are written in key order (no
-- deadlock between two batches); each row written is returned.
INSERT INTO yoke_steps (execution_id, position, name, result, recorded_at, status, attempts,
    first_attempt, error, retry_at)
SELECT execution_id, position, name, result, %(now)s, status, attempts, first_attempt, error,
    retry_at
FROM jsonb_to_recordset(%(batch)s::jsonb) AS b(execution_id text, position integer,
    name text, result text, status text, attempts integer, first_attempt integer,
    error text, retry_at double precision)
ORDER BY execution_id, position
ON CONFLICT (execution_id, position) DO UPDATE SET result = EXCLUDED.result,
    recorded_at = EXCLUDED.recorded_at, status = EXCLUDED.status,
    attempts = EXCLUDED.attempts, first_attempt = EXCLUDED.first_attempt,
    error = EXCLUDED.error, retry_at = EXCLUDED.retry_at
WHERE yoke_steps.name = EXCLUDED.name AND (yoke_steps.status <> 'SUCCEEDED'
    OR (EXCLUDED.status = 'SUCCEEDED' AND yoke_steps.result = EXCLUDED.result))
RETURNING execution_id, position;

-- name: decide_start
UPDATE yoke_starts
SET status = %(status)s, reason = %(reason)s, decided_at = %(now)s,
    idempotency_key = CASE WHEN %(forget_key)s::boolean THEN NULL ELSE idempotency_key END
WHERE start_id = %(start_id)s AND status = 'QUEUED'
RETURNING *;

-- name: list_executions
SELECT * FROM yoke_executions
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(session)s::text IS NULL OR session = %(session)s)
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
  AND (%(before_seq)s::bigint IS NULL OR seq < %(before_seq)s)
ORDER BY seq DESC
LIMIT %(limit)s;

-- name: tenant_executions
-- One tenant's, newest first: a range of the yoke_executions_tenant index, also in a generic
-- plan (no `IS NULL OR` on the indexed columns).
SELECT * FROM yoke_executions
WHERE tenant = %(tenant)s
  AND seq < coalesce(%(before_seq)s::bigint, 9223372036854775807)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(session)s::text IS NULL OR session = %(session)s)
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
ORDER BY seq DESC
LIMIT %(limit)s;

-- name: recent_controls
SELECT * FROM yoke_control_log
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(before_seq)s::bigint IS NULL OR seq < %(before_seq)s)
ORDER BY seq DESC
LIMIT %(limit)s;

-- name: running_of_instance
SELECT execution_id, slot_keys, parent_id, start_id FROM yoke_executions
WHERE instance_id = %(instance_id)s AND status = 'RUNNING'
ORDER BY execution_id
FOR UPDATE;

-- name: notify_request
-- Delivered at commit to the owner, which listens on this channel (the payload names it).
SELECT pg_notify('yoke_execution_request', %(instance_id)s);

-- name: handle_requests
UPDATE yoke_requests SET handled_at = %(now)s
WHERE seq = ANY(%(seqs)s::bigint[]) AND handled_at IS NULL;

-- name: prune_steps_of
DELETE FROM yoke_steps WHERE execution_id = ANY(%(ids)s::text[]);

-- name: prune_requests_of
DELETE FROM yoke_requests WHERE execution_id = ANY(%(ids)s::text[]);

-- name: notify_slot_freed
SELECT pg_notify('yoke_slot_freed', '');


-- ===================================================================================
-- actors (the actors specification, docs/decisions.md). Batches travel as one JSON array
-- parameter (json_to_recordset) or as arrays (= ANY, unnest), so a batch is one statement
-- whatever its size; a parameter written with `b` instead of `s` is bound in binary (arrays of
-- text then need no quoting of the JSON they carry).
-- Queue rows carry their instance's owner and epoch, so claims (FOR UPDATE SKIP LOCKED) and
-- completions touch queue rows only; lock order everywhere: instance rows (in key order), then
-- queue rows. An append holds its instances FOR SHARE while it copies their owner, so a
-- takeover (which rewrites instance, then queue rows) sees every row it must move.

-- name: append_events
-- A whole append in one statement, hence one round trip and its own transaction: the events,
-- their new instances (each owned by its k_owner, placement's choice; '' for none), one queue row per target with its instance's owner
-- and epoch, and the NOTIFY. The batch travels as parallel arrays: the events (tenants,
-- streams, datas, timers), the instances they reach (k_*), and the targets, each naming its
-- event and its instance by 1-based position (t_event, t_key), so that joins and sorts are on
-- integers. Firing timers: timers[i] is event i's timer; an event is written only if this
-- statement deleted its timer (rows locked by another firing worker are skipped), so a timer
-- fires exactly once. A plain append passes no timers: that scan is gated off. Ids: nextval
-- runs after the ORDER BY (a volatile output column), so event ids, and the queue ids that
-- follow them, keep the batch's order.
-- Guard: an instance that a concurrent append created after this statement's snapshot is
-- neither inserted (ON CONFLICT) nor read here; its queue rows would get a NULL owner_epoch,
-- and the NOT NULL constraint aborts the whole statement instead. The caller then appends step
-- by step (insert_instances first), as on SQLite.
WITH ev AS MATERIALIZED (
    SELECT e.ord, e.tenant, e.stream, e.data, e.timer_id
    FROM unnest(%(tenants)b::text[], %(streams)b::text[], %(datas)b::text[], %(timers)b::bigint[])
        WITH ORDINALITY AS e(tenant, stream, data, timer_id, ord)
), taken AS (
    DELETE FROM scheduled_events s
    WHERE s.timer_id IN (
        SELECT x.timer_id FROM scheduled_events x
        WHERE cardinality(%(timers)b::bigint[]) > 0 AND x.timer_id = ANY(%(timers)b::bigint[])
        FOR UPDATE SKIP LOCKED)
    RETURNING s.timer_id, s.tenant
), kept AS MATERIALIZED (
    SELECT ev.ord, ev.tenant, ev.stream, ev.data,
        nextval('stream_events_event_id_seq') AS event_id
    FROM ev
    WHERE ev.timer_id IS NULL OR ev.timer_id IN (SELECT t.timer_id FROM taken t)
    ORDER BY ev.ord
), events AS (
    INSERT INTO stream_events (event_id, tenant, stream, data, appended_at)
    SELECT k.event_id, k.tenant, k.stream, k.data, %(now)s FROM kept k
), targets AS MATERIALIZED (
    SELECT k.event_id, t.key_ord, t.group_id, t.ord
    FROM unnest(%(t_event)b::bigint[], %(t_key)b::bigint[], %(t_group)b::text[])
        WITH ORDINALITY AS t(event_ord, key_ord, group_id, ord)
    JOIN kept k ON k.ord = t.event_ord
), keys AS MATERIALIZED (
    SELECT k.ord, k.tenant, k.actor, k.instance_id, k.owner
    FROM unnest(%(k_tenant)b::text[], %(k_actor)b::text[], %(k_instance)b::text[],
            %(k_owner)b::text[])
        WITH ORDINALITY AS k(tenant, actor, instance_id, owner, ord)
    WHERE k.ord IN (SELECT t.key_ord FROM targets t)
), created AS (
    INSERT INTO actor_instances (tenant, actor, instance_id, worker_id, created_at)
    SELECT k.tenant, k.actor, k.instance_id, NULLIF(k.owner, ''), %(now)s FROM keys k
    ORDER BY k.tenant, k.actor, k.instance_id
    ON CONFLICT DO NOTHING
    RETURNING tenant, actor, instance_id, worker_id, owner_epoch
), existing AS (
    SELECT k.ord, i.worker_id, i.owner_epoch
    FROM actor_instances i
    JOIN keys k ON i.tenant = k.tenant AND i.actor = k.actor AND i.instance_id = k.instance_id
    ORDER BY i.tenant, i.actor, i.instance_id
    FOR SHARE OF i
), owners AS (
    SELECT k.ord, c.worker_id, c.owner_epoch
    FROM created c
    JOIN keys k ON k.tenant = c.tenant AND k.actor = c.actor AND k.instance_id = c.instance_id
    UNION ALL
    SELECT e.ord, e.worker_id, e.owner_epoch FROM existing e
), held AS (
    -- What the tenants hold: instances created (each tenant's increment carrying its
    -- actors.max_instances, its own else `*`'s, so the CHECK yoke_tenant_quota refuses the
    -- whole statement past it; none when timers fire: a timer accepted is fired whatever the
    -- quota), in tenant order.
    INSERT INTO yoke_tenant_usage AS u (tenant, kind, used, cap)
    SELECT c.tenant, 'instances', count(*),
        CASE WHEN cardinality(%(timers)b::bigint[]) > 0 THEN NULL
            ELSE coalesce(max(t.max_instances), max(d.max_instances)) END
    FROM created c
    LEFT JOIN tenant_settings t ON t.tenant = c.tenant
    LEFT JOIN tenant_settings d ON d.tenant = '*'
    GROUP BY c.tenant
    ORDER BY c.tenant
    ON CONFLICT (tenant, kind) DO UPDATE SET used = u.used + excluded.used, cap = excluded.cap
    RETURNING 1
), unheld AS (
    -- And the timers fired, counted down (locked in tenant order, as everywhere).
    SELECT u.tenant, f.n FROM yoke_tenant_usage u
    JOIN (SELECT tenant, count(*) AS n FROM taken GROUP BY tenant) f
        ON u.tenant = f.tenant AND u.kind = 'timers'
    ORDER BY u.tenant
    FOR UPDATE OF u
), fired AS (
    UPDATE yoke_tenant_usage u SET used = u.used - unheld.n, cap = NULL FROM unheld
    WHERE u.tenant = unheld.tenant AND u.kind = 'timers'
    RETURNING 1
), queued AS (
    INSERT INTO actor_queues (event_id, tenant, actor, instance_id, group_id, available_at,
        worker_id, owner_epoch)
    SELECT t.event_id, k.tenant, k.actor, k.instance_id, t.group_id, %(now)s, o.worker_id,
        o.owner_epoch
    FROM targets t
    JOIN keys k ON k.ord = t.key_ord
    LEFT JOIN owners o ON o.ord = t.key_ord
    ORDER BY t.ord
    RETURNING 1
)
SELECT (SELECT array_agg(k.event_id ORDER BY k.ord) FROM kept k) AS event_ids,
    (SELECT array_agg(t.timer_id ORDER BY t.timer_id) FROM taken t) AS fired,
    (SELECT count(*) FROM (SELECT pg_notify('yoke_actor_queue', '')
        WHERE EXISTS (SELECT 1 FROM queued)) AS n) AS notified;

-- The step-by-step append (one transaction, several statements): what SQLite always does, and
-- PostgreSQL when append_events hit its guard.

-- name: alloc_event_ids
SELECT nextval('stream_events_event_id_seq') AS id FROM generate_series(1, %(n)s);

-- name: insert_events
-- rows: a JSON array of [event_id, tenant, stream, data].
INSERT INTO stream_events (event_id, tenant, stream, data, appended_at)
SELECT (r.v->>0)::bigint, r.v->>1, r.v->>2, r.v->>3, %(now)s
FROM json_array_elements(%(rows)s::json) AS r(v);

-- name: insert_instances
-- rows: a JSON array of [tenant, actor, instance_id, owner].
INSERT INTO actor_instances (tenant, actor, instance_id, worker_id, created_at)
SELECT r.v->>0, r.v->>1, r.v->>2, r.v->>3, %(now)s
FROM json_array_elements(%(rows)s::json) AS r(v)
ORDER BY r.v->>0, r.v->>1, r.v->>2
ON CONFLICT DO NOTHING
RETURNING tenant;

-- name: insert_queue_rows
-- keys: the batch's instances once, as [tenant, actor, instance_id]; rows: [event_id, position
-- of the instance in keys (from 0), group_id]. The instances are held FOR SHARE (in key order)
-- until commit while their owner and epoch are copied into the new rows, so a takeover waits
-- for this append, then moves its rows too.
WITH owners AS MATERIALIZED (
    SELECT k.pos - 1 AS pos, i.tenant, i.actor, i.instance_id, i.worker_id, i.owner_epoch
    FROM actor_instances i
    JOIN json_array_elements(%(keys)s::json) WITH ORDINALITY AS k(v, pos)
        ON i.tenant = k.v->>0 AND i.actor = k.v->>1 AND i.instance_id = k.v->>2
    ORDER BY i.tenant, i.actor, i.instance_id
    FOR SHARE OF i
), inserted AS (
    INSERT INTO actor_queues (event_id, tenant, actor, instance_id, group_id, available_at,
        worker_id, owner_epoch)
    SELECT (r.v->>0)::bigint, o.tenant, o.actor, o.instance_id, r.v->>2, %(now)s, o.worker_id,
        o.owner_epoch
    FROM json_array_elements(%(rows)s::json) WITH ORDINALITY AS r(v, ord)
    JOIN owners o ON o.pos = (r.v->>1)::bigint
    ORDER BY r.ord  -- queue ids follow the events' order: FIFO across the batch
    RETURNING 1
)
SELECT pg_notify('yoke_actor_queue', '') FROM (SELECT 1) AS one
WHERE EXISTS (SELECT 1 FROM inserted);

-- name: notify_actor_queue
SELECT pg_notify('yoke_actor_queue', '');

-- name: pending_tenants
-- Tenants with pending rows for this worker, in name order after `after`: a loose index scan
-- (one index probe per tenant), never a scan of the pending rows.
WITH RECURSIVE t(tenant) AS (
    SELECT (SELECT tenant FROM actor_queues
            WHERE status = 'pending' AND worker_id = %(worker_id)s AND tenant > %(after)s
            ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT q.tenant FROM actor_queues q
            WHERE q.status = 'pending' AND q.worker_id = %(worker_id)s AND q.tenant > t.tenant
            ORDER BY q.tenant LIMIT 1)
    FROM t WHERE t.tenant IS NOT NULL
)
SELECT tenant FROM t WHERE tenant IS NOT NULL LIMIT %(limit)s;

-- name: claim_quotas
-- The fair claim: up to its own quota of oldest due rows for each tenant in `quotas` (a JSON
-- array of {"tenant", "quota"}), the quotas being what each tenant's window at the worker has
-- room for. Oldest due rows first, never a row of a group behind an earlier one waiting out its backoff
-- (FIFO per group); the first-come claim uses it too, with an even split.
UPDATE actor_queues q
SET status = 'claimed', claimed_by = %(worker_id)s, claim_epoch = q.owner_epoch,
    claim_id = %(claim_id)s
WHERE q.queue_id = ANY(ARRAY(
    SELECT x.queue_id
    FROM json_to_recordset(%(quotas)s::json) AS t(tenant text, quota int)
    CROSS JOIN LATERAL (
        SELECT p.queue_id FROM actor_queues p
        WHERE p.status = 'pending' AND p.worker_id = %(worker_id)s
            AND p.tenant = t.tenant AND p.available_at <= %(now)s
            AND NOT EXISTS (
                SELECT 1 FROM actor_queues h
                WHERE h.status = 'pending' AND h.attempts > 0 AND h.tenant = p.tenant
                    AND h.actor = p.actor AND h.instance_id = p.instance_id
                    AND h.group_id = p.group_id AND h.queue_id < p.queue_id
                    AND h.available_at > %(now)s)
        ORDER BY p.queue_id
        LIMIT t.quota
        FOR UPDATE SKIP LOCKED) x))
RETURNING q.queue_id;

-- name: claimed_rows
SELECT q.queue_id, q.event_id, q.tenant, q.actor, q.instance_id, q.group_id, e.stream,
    e.data, q.attempts, q.claim_epoch AS epoch, e.appended_at, q.suspect
FROM actor_queues q JOIN stream_events e ON e.event_id = q.event_id
WHERE q.queue_id = ANY(%(id_list)s::bigint[])
ORDER BY q.queue_id;

-- name: complete
DELETE FROM actor_queues q
WHERE q.queue_id = ANY(%(ids)s::bigint[]) AND q.status = 'claimed'
    AND q.claimed_by = %(worker_id)s AND q.worker_id = %(worker_id)s
    AND q.claim_epoch = q.owner_epoch
    AND q.claim_epoch = (%(epochs)s::bigint[])[array_position(%(ids)s::bigint[], q.queue_id)]
RETURNING q.queue_id;

-- name: get_states
-- The states of the instances a claim met for the first time, in one read.
SELECT i.tenant, i.actor, i.instance_id, i.state, i.version, i.worker_id, i.owner_epoch
FROM actor_instances i
JOIN json_to_recordset(%(rows)s::json) AS r(tenant TEXT, actor TEXT, instance_id TEXT)
    ON i.tenant = r.tenant AND i.actor = r.actor AND i.instance_id = r.instance_id;

-- name: schedule_events
INSERT INTO scheduled_events (tenant, stream, data, fire_at_ms, created_at)
SELECT r.tenant, r.stream, r.data, r.fire_at_ms, %(now)s
FROM json_to_recordset(%(rows)s::json) AS r(tenant TEXT, stream TEXT, data TEXT, fire_at_ms BIGINT)
RETURNING timer_id;

-- name: notify_schedule_change
SELECT pg_notify('yoke_schedule_change', '');

-- name: take_timers
-- Step by step: delete these timers unless fired already or being fired by another worker.
DELETE FROM scheduled_events
WHERE timer_id IN (
    SELECT timer_id FROM scheduled_events
    WHERE timer_id = ANY(%(id_list)s::bigint[])
    FOR UPDATE SKIP LOCKED)
RETURNING timer_id, tenant;

-- name: add_held
-- What tenants now hold more of (counts, a JSON object {tenant: n}, `kind` instances or
-- timers), in tenant order, each increment carrying its tenant's quota (its own, else `*`'s;
-- none with `capped` false) as `cap`: the CHECK yoke_tenant_quota refuses one past it, and
-- with it the whole transaction.
INSERT INTO yoke_tenant_usage AS u (tenant, kind, used, cap)
SELECT c.key, %(kind)s, c.value::bigint,
    CASE WHEN NOT %(capped)s THEN NULL
        WHEN %(kind)s = 'instances' THEN coalesce(t.max_instances, d.max_instances)
        ELSE coalesce(t.max_timers, d.max_timers) END
FROM jsonb_each_text(%(counts)s::jsonb) AS c
LEFT JOIN tenant_settings t ON t.tenant = c.key
LEFT JOIN tenant_settings d ON d.tenant = '*'
ORDER BY c.key
ON CONFLICT (tenant, kind) DO UPDATE SET used = u.used + excluded.used, cap = excluded.cap;

-- name: register_worker
INSERT INTO runtime_workers (worker_id, hostname, pid, started_at, heartbeat_at)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(now)s, %(now)s)
ON CONFLICT (worker_id) DO UPDATE
SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, started_at = EXCLUDED.started_at,
    heartbeat_at = EXCLUDED.heartbeat_at, stopped_at = NULL;

-- name: lock_instances_of_worker
SELECT tenant, actor, instance_id FROM actor_instances
WHERE worker_id = %(worker_id)s
ORDER BY tenant, actor, instance_id
FOR UPDATE;

-- name: lock_orphans
SELECT tenant, actor, instance_id, worker_id FROM actor_instances
WHERE worker_id IS NULL OR worker_id IN (
    SELECT worker_id FROM runtime_workers
    WHERE worker_id <> %(worker_id)s
        AND (stopped_at IS NOT NULL OR heartbeat_at < %(stale_before)s))
ORDER BY tenant, actor, instance_id
FOR UPDATE SKIP LOCKED;

-- name: set_owner
UPDATE actor_instances i SET worker_id = %(owner)s, owner_epoch = i.owner_epoch + 1,
    moving_to = NULL, moving_since = NULL
FROM json_to_recordset(%(rows)s::json) AS r(tenant TEXT, actor TEXT, instance_id TEXT)
WHERE i.tenant = r.tenant AND i.actor = r.actor AND i.instance_id = r.instance_id;

-- name: unclaim
UPDATE actor_queues q SET status = 'pending', claimed_by = NULL, solo = 0
FROM json_to_recordset(%(rows)s::json) AS r(tenant TEXT, actor TEXT, instance_id TEXT)
WHERE q.tenant = r.tenant AND q.actor = r.actor AND q.instance_id = r.instance_id
    AND q.status = 'claimed';

-- name: unclaim_dead
-- The claimed rows of a worker that died: each a suspect (it may be the call that killed its
-- worker), pending again; the one it ran alone (`solo`) is charged a crash attempt, and is a
-- dead letter at `dead_after`.
UPDATE actor_queues q SET claimed_by = NULL, suspect = 1, solo = 0,
    crash_attempts = q.crash_attempts + q.solo,
    error = CASE WHEN q.solo = 1 THEN %(error)s ELSE q.error END,
    status = CASE WHEN q.solo = 1 AND q.crash_attempts + 1 >= %(dead_after)s THEN 'dead'
        ELSE 'pending' END,
    dead_at = CASE WHEN q.solo = 1 AND q.crash_attempts + 1 >= %(dead_after)s THEN %(now)s
        ELSE q.dead_at END
FROM json_to_recordset(%(rows)s::json) AS r(tenant TEXT, actor TEXT, instance_id TEXT)
WHERE q.tenant = r.tenant AND q.actor = r.actor AND q.instance_id = r.instance_id
    AND q.status = 'claimed';

-- name: reown_queue_rows
UPDATE actor_queues q SET worker_id = i.worker_id, owner_epoch = i.owner_epoch
FROM json_to_recordset(%(rows)s::json) AS r(tenant TEXT, actor TEXT, instance_id TEXT),
    actor_instances i
WHERE q.tenant = r.tenant AND q.actor = r.actor AND q.instance_id = r.instance_id
    AND i.tenant = r.tenant AND i.actor = r.actor AND i.instance_id = r.instance_id
    AND q.status <> 'dead';

-- name: claim_event
-- The row a select chose, claimed specifically under the owner's epoch. SKIP LOCKED: a row that
-- a concurrent claim holds is not waited for; that claim wins, and the caller lists again.
UPDATE actor_queues q
SET status = 'claimed', claimed_by = %(worker_id)s, claim_epoch = q.owner_epoch,
    claim_id = NULL
WHERE q.queue_id = (
    SELECT p.queue_id FROM actor_queues p
    WHERE p.queue_id = %(queue_id)s AND p.status = 'pending' AND p.worker_id = %(worker_id)s
        AND p.owner_epoch = %(epoch)s
    FOR UPDATE SKIP LOCKED)
RETURNING q.queue_id;

-- name: peek_slots
-- Counts without a lock: a batch skips the grants that cannot fit before writing anything
-- (the locked increment after is what decides).
SELECT key, running FROM yoke_ledger WHERE key = ANY(%(keys)s::text[]);


-- ===================================================================================
-- actor inspection (the HTTP API): reads only. `tenant` NULL means every tenant.

-- name: actor_instance_counts
SELECT actor, count(*) AS instances FROM actor_instances
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
GROUP BY actor;

-- name: actor_queue_counts
SELECT actor, status, count(*) AS n FROM actor_queues
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
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
WHERE i.actor = %(actor)s AND (%(tenant)s::text IS NULL OR i.tenant = %(tenant)s)
    AND (%(after_tenant)s::text IS NULL
        OR (i.tenant, i.instance_id) > (%(after_tenant)s::text, %(after_id)s::text))
ORDER BY i.tenant, i.instance_id
LIMIT %(limit)s;

-- name: mark_granted_many
-- %(batch)s is a JSON array of {"start_id", "execution_id"}; a start no longer QUEUED is
-- skipped. Two processes never grant the same start, so the row order cannot deadlock.
-- Each start is found by its start_id (the unique index; OFFSET 0 keeps the planner from
-- joining instead): the planner's count of QUEUED rows lags a queue that grew since the last
-- ANALYZE, and with it a hash join read every queued row for a batch of 16 (0.3 ms of 0.55).
UPDATE yoke_starts s SET status = 'GRANTED', execution_id = b.execution_id,
    decided_at = %(now)s
FROM jsonb_to_recordset(%(batch)s::jsonb) AS b(start_id text, execution_id text)
    CROSS JOIN LATERAL (
        SELECT q.seq FROM yoke_starts q WHERE q.start_id = b.start_id OFFSET 0
    ) AS found
WHERE s.seq = found.seq AND s.status = 'QUEUED'
RETURNING s.*;

-- name: insert_execution_many
INSERT INTO yoke_executions (execution_id, start_id, workflow, session, tenant, input,
    status, parent_id, restarted_from, resumed_from, slot_keys, instance_id, created_at,
    leader_epoch)
SELECT execution_id, start_id, workflow, session, tenant, input, 'RUNNING', parent_id,
    restarted_from, resumed_from, slot_keys, instance_id, created_at, leader_epoch
FROM jsonb_to_recordset(%(batch)s::jsonb) AS b(execution_id text, start_id text,
    workflow text, session text, tenant text, input text, parent_id text, restarted_from text,
    resumed_from text, slot_keys text, instance_id text, created_at double precision,
    leader_epoch bigint)
RETURNING execution_id, seq;

-- name: insert_executions_and_count
-- `insert_execution_many` then `add_slot_counts` in one statement (one round trip): the new
-- execution rows (nobody else can wait for them), then each ledger row once, by its count, in
-- key order. Answers ('e', execution_id, seq) per execution and ('l', key, running) per key.
WITH ins AS (
    INSERT INTO yoke_executions (execution_id, start_id, workflow, session, tenant, input,
        status, parent_id, restarted_from, resumed_from, slot_keys, instance_id, created_at,
        leader_epoch)
    SELECT execution_id, start_id, workflow, session, tenant, input, 'RUNNING', parent_id,
        restarted_from, resumed_from, slot_keys, instance_id, created_at, leader_epoch
    FROM jsonb_to_recordset(%(batch)s::jsonb) AS b(execution_id text, start_id text,
        workflow text, session text, tenant text, input text, parent_id text,
        restarted_from text, resumed_from text, slot_keys text, instance_id text,
        created_at double precision, leader_epoch bigint)
    RETURNING execution_id, seq
), counted AS (
    INSERT INTO yoke_ledger (key, running)
    SELECT key, value::int FROM jsonb_each_text(%(counts)s::jsonb) ORDER BY key
    ON CONFLICT (key) DO UPDATE SET running = yoke_ledger.running + EXCLUDED.running
    RETURNING key, running
)
SELECT 'e' AS what, execution_id AS key, seq AS n FROM ins
UNION ALL
SELECT 'l' AS what, key, running::bigint AS n FROM counted;

-- name: add_slot_counts
-- %(counts)s is a JSON object {key: n}: each ledger row is taken once, by its count, and the
-- rows are upserted, hence locked, in key order (no deadlock).
INSERT INTO yoke_ledger (key, running)
SELECT key, value::int FROM jsonb_each_text(%(counts)s::jsonb) ORDER BY key
ON CONFLICT (key) DO UPDATE SET running = yoke_ledger.running + EXCLUDED.running
RETURNING key, running;

-- name: release_slot_counts
-- The CTE locks the rows in key order before the update touches them (no deadlock with a
-- grant, which locks in the same order). NOTIFY rides along: it is delivered at commit, only
-- if the slots really were freed, and costs no round trip of its own. A row its release brings
-- to zero is deleted instead (a row per session ever seen would otherwise stay): a grant
-- racing it waits for the lock, finds the row gone, and its upsert inserts it afresh, so the
-- count it decides on is still exact. Which rows go is decided on the counts read under the
-- lock (`locked.running`, the latest version), never on the statement's snapshot of `l`: a
-- row filtered out on an older snapshot would be neither updated nor deleted.
WITH c AS (
    SELECT key, value::int AS n FROM jsonb_each_text(%(counts)s::jsonb)
), locked AS (
    SELECT l.key, l.running, c.n FROM yoke_ledger l JOIN c ON c.key = l.key
    ORDER BY l.key FOR UPDATE OF l
), emptied AS (
    DELETE FROM yoke_ledger l USING locked
    WHERE l.key = locked.key AND locked.running = locked.n
    RETURNING 1
), released AS (
    UPDATE yoke_ledger l SET running = l.running - locked.n FROM locked
    WHERE l.key = locked.key AND locked.running <> locked.n
    RETURNING 1
)
SELECT pg_notify('yoke_slot_freed', '')
FROM (SELECT (SELECT count(*) FROM released) + (SELECT count(*) FROM emptied) AS n) r
WHERE r.n > 0;

-- name: insert_start_many
-- %(batch)s is a JSON array of new starts, each QUEUED, or GRANTED at once (with its execution
-- id) by a grant batch that logs it because it fits; one whose idempotency key is taken is
-- skipped (ON CONFLICT waits for an uncommitted holder of the key, then skips).
INSERT INTO yoke_starts (start_id, kind, workflow, session, tenant, priority, input,
    fingerprint, principal, idem_scope, idempotency_key, source_execution_id, from_step, status,
    execution_id, instance_id, created_at, decided_at)
SELECT start_id, kind, workflow, session, tenant, priority, input, fingerprint, principal,
    coalesce(principal, ''), idempotency_key, source_execution_id, from_step,
    CASE WHEN execution_id IS NULL THEN 'QUEUED' ELSE 'GRANTED' END, execution_id,
    instance_id, created_at, decided_at
FROM jsonb_to_recordset(%(batch)s::jsonb) AS b(start_id text, kind text, workflow text,
    session text, tenant text, priority bigint, input text, fingerprint text, principal text,
    idempotency_key text, source_execution_id text, from_step text, execution_id text,
    instance_id text, created_at double precision, decided_at double precision)
ORDER BY coalesce(principal, ''), idempotency_key  -- keys in one order: never a deadlock
ON CONFLICT DO NOTHING
RETURNING start_id, seq;

-- name: finish_executions_one
-- A batch of finishes in one statement (one round trip, its own transaction), as parallel
-- arrays bound in binary. The execution rows are locked in execution_id order (as
-- recover_dead locks a dead instance's), then the ledger rows of the keys they held in key
-- order (as a grant takes them), and released (a row back at zero deleted, as in
-- release_slot_counts); NOTIFY is sent only if a slot was freed.
WITH b AS (
    SELECT * FROM unnest(%(ids)b::text[], %(statuses)b::text[], %(outputs)b::text[],
        %(errors)b::text[]) AS b(execution_id, status, output, error)
), locked AS (
    SELECT e.execution_id FROM yoke_executions e JOIN b USING (execution_id)
    WHERE e.status = 'RUNNING'
    ORDER BY e.execution_id
    FOR UPDATE OF e
), done AS (
    UPDATE yoke_executions e
    SET status = b.status, output = b.output, error = b.error, finished_at = %(now)s
    FROM locked JOIN b USING (execution_id)
    WHERE e.execution_id = locked.execution_id AND e.status = 'RUNNING'
    RETURNING e.execution_id, e.slot_keys
), freed AS (
    SELECT k.key, count(*)::int AS n
    FROM done CROSS JOIN LATERAL jsonb_array_elements_text(done.slot_keys::jsonb) AS k(key)
    GROUP BY k.key
), held AS (
    SELECT l.key, l.running, freed.n FROM yoke_ledger l JOIN freed ON freed.key = l.key
    ORDER BY l.key
    FOR UPDATE OF l
), emptied AS (
    DELETE FROM yoke_ledger l USING held
    WHERE l.key = held.key AND held.running = held.n
    RETURNING 1
), released AS (
    UPDATE yoke_ledger l SET running = l.running - held.n FROM held
    WHERE l.key = held.key AND held.running <> held.n
    RETURNING 1
), notified AS (
    SELECT pg_notify('yoke_slot_freed', '')
    FROM (SELECT (SELECT count(*) FROM released) + (SELECT count(*) FROM emptied) AS n) r
    WHERE r.n > 0
)
SELECT done.execution_id, (SELECT count(*) FROM notified) AS notified FROM done;

-- name: hand_over
-- A slot changing hands in one statement (one round trip, its own transaction): the ends of
-- `finishes` and the grants of QUEUED starts that take their slots (`Store.finish_and_grant`,
-- D24, D25), all or nothing. Locks in the general path's order: the start rows (found by
-- start_id, in the order given: sorted), the execution rows (in execution_id order, as
-- given), then the ledger rows in key order. Written only if every grant fits and the fence
-- holds (yoke_fence raises); else nothing is written and the caller takes the general path.
-- A start no longer QUEUED, or a wake-up, is left alone for that path too. Each new execution
-- is its start's (workflow, session, tenant, input; restarted or resumed from its source),
-- as the general path's requests are; the start rows are found and locked one by one, in
-- the order given (a nested loop).
-- The ledger: each key's net change (grants minus ends). A key that changes is locked and
-- written once; its grants fit on the locked count. A key whose count does not change (a
-- slot handed from an end to a grant of the same keys) is read, neither locked nor written:
-- every transaction that raises a count does so under the row's lock and checks the count
-- it leaves, which includes these slots (never given back and taken again), so a hand-over
-- cannot take a count past its cap. The read only guards a cap lowered below what runs, and
-- a stale read errs safe: a count raised since was checked by whoever raised it, one lowered
-- since costs a needless fallback. Each key a grant takes must already have a row: a row
-- inserted here would be locked out of key order.
-- NOTIFY only if a slot was freed on balance.
WITH fence AS MATERIALIZED (
    SELECT CASE WHEN %(fence_name)s::text IS NULL THEN true
        ELSE yoke_fence(%(fence_name)s, %(fence_epoch)s) END AS ok
), g AS MATERIALIZED (
    SELECT g.* FROM fence, unnest(%(start_ids)b::text[], %(execution_ids)b::text[],
        %(slot_keys)b::text[], %(instance_ids)b::text[], %(created)b::float8[])
        AS g(start_id, execution_id, slot_keys, instance_id, created_at)
    WHERE fence.ok
), sl AS MATERIALIZED (
    SELECT g.start_id, g.execution_id, q.seq FROM g CROSS JOIN LATERAL (
        SELECT s.seq FROM yoke_starts s
        WHERE s.start_id = g.start_id AND s.status = 'QUEUED' AND s.kind <> 'wake'
        FOR UPDATE OF s
    ) AS q
), f AS MATERIALIZED (
    SELECT * FROM unnest(%(ids)b::text[], %(statuses)b::text[], %(outputs)b::text[],
        %(errors)b::text[]) AS f(execution_id, status, output, error)
    -- The start rows are locked first.
    WHERE (SELECT count(*) FROM sl) >= 0
), locked AS MATERIALIZED (
    SELECT f.execution_id, e.seq, e.slot_keys FROM f CROSS JOIN LATERAL (
        SELECT e.seq, e.slot_keys FROM yoke_executions e
        WHERE e.execution_id = f.execution_id AND e.status = 'RUNNING'
        FOR UPDATE OF e
    ) AS e
), freed AS (
    SELECT k.key, count(*)::int AS n
    FROM locked CROSS JOIN LATERAL jsonb_array_elements_text(locked.slot_keys::jsonb) AS k(key)
    GROUP BY k.key
), taken AS (
    SELECT k.key, count(*)::int AS n
    FROM sl JOIN g USING (start_id)
        CROSS JOIN LATERAL jsonb_array_elements_text(g.slot_keys::jsonb) AS k(key)
    GROUP BY k.key
), keyed AS (
    SELECT key, coalesce(t.n, 0) AS taken, coalesce(fr.n, 0) AS freed
    FROM taken t FULL JOIN freed fr USING (key)
), held AS MATERIALIZED (
    SELECT l.key, l.running FROM yoke_ledger l
    WHERE l.key IN (SELECT key FROM keyed WHERE taken <> freed)
    ORDER BY l.key
    FOR UPDATE OF l
), counts AS MATERIALIZED (
    SELECT k.key, k.taken, k.freed, h.key IS NOT NULL AS locked,
        coalesce(h.running, l.running) AS running
    FROM keyed k LEFT JOIN held h USING (key) LEFT JOIN yoke_ledger l USING (key)
), verdict AS MATERIALIZED (
    SELECT coalesce(bool_and(n.running IS NOT NULL
        AND (c.cap IS NULL OR n.running - n.freed + n.taken <= c.cap::int)), true) AS fits
    FROM counts n LEFT JOIN jsonb_each_text(%(caps)s::jsonb) AS c(key, cap) USING (key)
    WHERE n.taken > 0
), net AS MATERIALIZED (
    SELECT n.key, n.running, n.taken - n.freed AS d
    FROM verdict, counts n
    WHERE verdict.fits AND n.locked
), done AS (
    UPDATE yoke_executions e
    SET status = f.status, output = f.output, error = f.error, finished_at = %(now)s
    FROM f
    WHERE (SELECT fits FROM verdict) AND e.seq = ANY(ARRAY(SELECT seq FROM locked))
        AND f.execution_id = e.execution_id
    RETURNING e.execution_id
), marked AS (
    UPDATE yoke_starts s SET status = 'GRANTED', execution_id = sl.execution_id,
        decided_at = %(now)s
    FROM sl
    WHERE (SELECT fits FROM verdict) AND s.seq = ANY(ARRAY(SELECT seq FROM sl))
        AND sl.seq = s.seq
        -- The ends first, whatever reads the rows' order (a trigger): an end is written
        -- before the execution that takes its slot, as in the general path.
        AND (SELECT count(*) FROM done) >= 0
    RETURNING s.*
), ins AS (
    INSERT INTO yoke_executions (execution_id, start_id, workflow, session, tenant, input,
        status, parent_id, restarted_from, resumed_from, slot_keys, instance_id, created_at,
        leader_epoch)
    SELECT g.execution_id, g.start_id, m.workflow, m.session, m.tenant, m.input, 'RUNNING',
        NULL, CASE WHEN m.kind = 'restart' THEN m.source_execution_id END,
        CASE WHEN m.kind = 'resume' THEN m.source_execution_id END, g.slot_keys,
        g.instance_id, g.created_at, %(fence_epoch)s::bigint
    FROM g JOIN marked m ON m.start_id = g.start_id
    RETURNING execution_id, seq
), emptied AS (
    DELETE FROM yoke_ledger l USING net
    WHERE l.key = net.key AND net.running + net.d = 0
    RETURNING 1
), moved AS (
    UPDATE yoke_ledger l SET running = l.running + net.d FROM net
    WHERE l.key = net.key AND net.running + net.d <> 0
    RETURNING 1
), notified AS (
    SELECT pg_notify('yoke_slot_freed', '') WHERE EXISTS (SELECT 1 FROM net WHERE net.d < 0)
)
SELECT v.*, m.*, i.seq AS execution_seq
FROM (SELECT (SELECT fits FROM verdict) AS fits, ARRAY(SELECT execution_id FROM done) AS done,
        (SELECT count(*) FROM notified) AS notified) AS v
LEFT JOIN (marked m JOIN ins i ON i.execution_id = m.execution_id) ON true;

-- name: grant_logged_one
-- Starts that fit at once and take no capped slot, logged GRANTED with their executions and
-- their ledger counts in one statement (one round trip, its own transaction), as parallel
-- arrays bound in binary. A start whose idempotency key is taken is skipped (ON CONFLICT
-- waits for an uncommitted holder) and so is its execution; the ledger counts only what was
-- written. Lock order as in the general path: start rows (by key), execution rows, then the
-- ledger rows in key order. An execution is created at the grant (`now`). With a fence
-- (`fence_name` not NULL) every row comes through `yoke_fence`, evaluated once before any is
-- written: the fence rides in the same statement, so a fenced grant is still one round trip.
WITH fence AS MATERIALIZED (
    SELECT CASE WHEN %(fence_name)s::text IS NULL THEN true
        ELSE yoke_fence(%(fence_name)s, %(fence_epoch)s) END AS ok
), b AS MATERIALIZED (
    SELECT b.* FROM fence, unnest(%(start_ids)b::text[], %(kinds)b::text[], %(workflows)b::text[],
        %(sessions)b::text[], %(tenants)b::text[], %(priorities)b::bigint[], %(inputs)b::text[],
        %(fingerprints)b::text[], %(principals)b::text[], %(idem_keys)b::text[],
        %(sources)b::text[], %(from_steps)b::text[], %(execution_ids)b::text[],
        %(instance_ids)b::text[], %(created)b::float8[], %(slot_keys)b::text[])
        AS b(start_id, kind, workflow, session, tenant, priority, input, fingerprint, principal,
            idempotency_key, source_execution_id, from_step, execution_id, instance_id,
            created_at, slot_keys)
    WHERE fence.ok
), s AS (
    INSERT INTO yoke_starts (start_id, kind, workflow, session, tenant, priority, input,
        fingerprint, principal, idem_scope, idempotency_key, source_execution_id, from_step,
        status, execution_id, instance_id, created_at, decided_at)
    SELECT start_id, kind, workflow, session, tenant, priority, input, fingerprint, principal,
        coalesce(principal, ''), idempotency_key, source_execution_id, from_step, 'GRANTED',
        execution_id, instance_id, created_at, %(now)s
    FROM b
    ORDER BY coalesce(principal, ''), idempotency_key
    ON CONFLICT DO NOTHING
    RETURNING start_id, seq
), e AS (
    INSERT INTO yoke_executions (execution_id, start_id, workflow, session, tenant, input,
        status, parent_id, restarted_from, resumed_from, slot_keys, instance_id, created_at,
        leader_epoch)
    SELECT b.execution_id, b.start_id, b.workflow, b.session, b.tenant, b.input, 'RUNNING', NULL,
        CASE WHEN b.kind = 'restart' THEN b.source_execution_id END,
        CASE WHEN b.kind = 'resume' THEN b.source_execution_id END,
        b.slot_keys, b.instance_id, %(now)s, %(fence_epoch)s::bigint
    FROM b JOIN s USING (start_id)
    RETURNING execution_id, seq, slot_keys
), counts AS (
    SELECT k.key, count(*)::bigint AS n
    FROM e CROSS JOIN LATERAL jsonb_array_elements_text(e.slot_keys::jsonb) AS k(key)
    GROUP BY k.key
), ledger AS (
    INSERT INTO yoke_ledger (key, running) SELECT key, n FROM counts ORDER BY key
    ON CONFLICT (key) DO UPDATE SET running = yoke_ledger.running + EXCLUDED.running
    RETURNING key
)
SELECT 's' AS what, s.start_id AS id, s.seq FROM s
UNION ALL SELECT 'e', e.execution_id, e.seq FROM e
UNION ALL SELECT 'l', ledger.key, 0 FROM ledger;


-- ===================================================================================
-- executors (per-tenant processes that run process()) and leases.

-- name: pending_tenants_among
-- Which of `tenants` have pending rows for this worker: one probe of the claim index per tenant,
-- whatever the table's statistics (tests/store/test_pending_tenants.py). Each probe is a
-- LATERAL ... LIMIT 1 ordered by (tenant, queue_id), an order only the claim index gives
-- without a sort; the tenant is a range of one value so that the planner cannot drop it from
-- that order. Planned freely, the same test read every pending row of the worker (a hash
-- semi-join, when the table had grown since its last ANALYZE) or walked the primary key past
-- thousands of other rows per tenant (after one).
SELECT t.tenant FROM json_array_elements_text(%(tenants)s::json) AS t(tenant)
CROSS JOIN LATERAL (
    SELECT 1 FROM actor_queues q
    WHERE q.status = 'pending' AND q.worker_id = %(worker_id)s
        AND q.tenant >= t.tenant AND q.tenant <= t.tenant
    ORDER BY q.tenant, q.queue_id LIMIT 1) AS pending
ORDER BY t.tenant;

-- name: release_claims
-- Claims back to pending with no attempt counted: what a dead executor was running or held.
UPDATE actor_queues q SET status = 'pending', claimed_by = NULL, solo = 0
WHERE q.queue_id = ANY(%(ids)s::bigint[]) AND q.status = 'claimed'
    AND q.claimed_by = %(worker_id)s AND q.worker_id = %(worker_id)s
    AND q.claim_epoch = q.owner_epoch
    AND q.claim_epoch = (%(epochs)s::bigint[])[array_position(%(ids)s::bigint[], q.queue_id)]
RETURNING q.queue_id;

-- name: record_executors
INSERT INTO runtime_executors (worker_id, tenant, pid, state, started_at, boot_ms, dispatches,
    active_dispatch, crashes, isolation, stop_reason, updated_at)
SELECT r.worker_id, r.tenant, r.pid, r.state, r.started_at, r.boot_ms, r.dispatches,
    r.active_dispatch, r.crashes, r.isolation, r.stop_reason, r.updated_at
FROM json_to_recordset(%(rows)s::json) AS r(worker_id TEXT, tenant TEXT, pid INTEGER,
    state TEXT, started_at DOUBLE PRECISION, boot_ms DOUBLE PRECISION, dispatches BIGINT,
    active_dispatch INTEGER, crashes INTEGER, isolation TEXT, stop_reason TEXT,
    updated_at DOUBLE PRECISION)
ORDER BY r.worker_id, r.tenant
ON CONFLICT (worker_id, tenant) DO UPDATE SET pid = EXCLUDED.pid, state = EXCLUDED.state,
    started_at = EXCLUDED.started_at, boot_ms = EXCLUDED.boot_ms,
    dispatches = EXCLUDED.dispatches, active_dispatch = EXCLUDED.active_dispatch,
    crashes = EXCLUDED.crashes, isolation = EXCLUDED.isolation,
    stop_reason = EXCLUDED.stop_reason, updated_at = EXCLUDED.updated_at;

-- name: record_spares
INSERT INTO runtime_spares (worker_id, slot, pid, state, started_at, boot_ms, isolation,
    stop_reason, updated_at)
SELECT r.worker_id, r.slot, r.pid, r.state, r.started_at, r.boot_ms, r.isolation,
    r.stop_reason, r.updated_at
FROM json_to_recordset(%(rows)s::json) AS r(worker_id TEXT, slot INTEGER, pid INTEGER,
    state TEXT, started_at DOUBLE PRECISION, boot_ms DOUBLE PRECISION, isolation TEXT,
    stop_reason TEXT, updated_at DOUBLE PRECISION)
ORDER BY r.worker_id, r.slot
ON CONFLICT (worker_id, slot) DO UPDATE SET pid = EXCLUDED.pid, state = EXCLUDED.state,
    started_at = EXCLUDED.started_at, boot_ms = EXCLUDED.boot_ms,
    isolation = EXCLUDED.isolation, stop_reason = EXCLUDED.stop_reason,
    updated_at = EXCLUDED.updated_at;

-- name: list_executors
-- The tenants' executors, then (when no tenant is asked for) the warm spares, tenant null.
SELECT worker_id, tenant, pid, state, started_at, boot_ms, dispatches, active_dispatch,
    crashes, isolation, stop_reason, updated_at
FROM runtime_executors
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
UNION ALL
SELECT worker_id, NULL, pid, state, started_at, boot_ms, 0, 0, 0, isolation, stop_reason,
    updated_at
FROM runtime_spares
WHERE %(tenant)s::text IS NULL
ORDER BY tenant NULLS LAST, worker_id, pid
LIMIT %(limit)s;

-- Leases: times are the database's (clock_timestamp(), epoch seconds), never a caller's, so
-- hosts whose clocks disagree still agree on who holds a lease. A lease is taken only when
-- free or expired, and every take bumps its epoch (the fencing token of that term); a renewal
-- or a release names the term (holder and epoch), so a holder that lost its term changes
-- nothing.

-- name: acquire_lease
-- `force`: take it even while another holder's term runs (that holder is known to be gone).
INSERT INTO yoke_leases (name, holder, epoch, expires_at, acquired_at)
VALUES (%(name)s, %(holder)s, 1, extract(epoch FROM clock_timestamp()) + %(ttl)s, extract(epoch FROM clock_timestamp()))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = yoke_leases.epoch + 1,
    expires_at = excluded.expires_at, acquired_at = excluded.acquired_at
WHERE yoke_leases.holder IS NULL
    OR yoke_leases.expires_at < extract(epoch FROM clock_timestamp())
    OR %(force)s
RETURNING name, holder, epoch, expires_at, acquired_at, extract(epoch FROM clock_timestamp()) AS now;

-- name: renew_lease
UPDATE yoke_leases SET expires_at = extract(epoch FROM clock_timestamp()) + %(ttl)s
WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s
RETURNING name, holder, epoch, expires_at, acquired_at, extract(epoch FROM clock_timestamp()) AS now;

-- name: get_lease
SELECT name, holder, epoch, expires_at, acquired_at, extract(epoch FROM clock_timestamp()) AS now
FROM yoke_leases WHERE name = %(name)s;


-- ===================================================================================
-- tenants: fleet-wide settings (weight, max_running) and the per-tenant cap's counters.

-- name: notify_tenant_settings
-- Workers read the tenants' settings again at once (their poll is the backup).
SELECT pg_notify('yoke_tenant_settings', '');

-- name: lock_tenant
-- Takers of one tenant's slots queue here (a tenant capped by `*` may have no row to lock);
-- the count that follows (a new statement, so a new snapshot under READ COMMITTED) sees every
-- earlier taker's commit.
SELECT pg_advisory_xact_lock(2035382119, hashtext(%(tenant)s));

-- name: take_tokens
-- A token bucket as GCRA on the database's clock: the row holds the bucket's theoretical
-- arrival time (tat); `n` tokens conform when max(tat, now) + n/rate - burst/rate <= now, and
-- taking them moves tat to max(tat, now) + n/rate. One statement: a row is returned when the
-- tokens were taken, none when they were not (and nothing changed). A bucket seen for the
-- first time is full.
INSERT INTO yoke_tenant_rates AS b (tenant, kind, tat)
SELECT %(tenant)s, %(kind)s, extract(epoch FROM clock_timestamp()) + %(n)s::float8 / %(rate)s::float8
WHERE %(n)s <= %(burst)s
ON CONFLICT (tenant, kind) DO UPDATE
SET tat = greatest(b.tat, extract(epoch FROM clock_timestamp())) + %(n)s::float8 / %(rate)s::float8
WHERE greatest(b.tat, extract(epoch FROM clock_timestamp())) + (%(n)s - %(burst)s)::float8 / %(rate)s::float8 <= extract(epoch FROM clock_timestamp())
RETURNING tat;

-- name: bucket_state
SELECT (SELECT tat FROM yoke_tenant_rates WHERE tenant = %(tenant)s AND kind = %(kind)s) AS tat,
    extract(epoch FROM clock_timestamp()) AS now;

-- name: forget_full_buckets
-- A bucket whose tat has passed is full: the same as no row.
DELETE FROM yoke_tenant_rates WHERE tat < extract(epoch FROM clock_timestamp());

-- name: lease_running
-- A term of some holder runs now (on this clock): a take would fail, so it does not wait at
-- the gate for it. A standby polls here every second; its poll must neither wait for the
-- leader's fenced writes nor queue an exclusive lock ahead of them.
SELECT holder FROM yoke_leases
WHERE name = %(name)s AND holder IS NOT NULL
    AND expires_at >= extract(epoch FROM clock_timestamp());

-- name: end_lapsed_holder
-- Before a take: end every session of a holder whose term is over on this clock (or `force`d:
-- known to be gone). A frozen or cut-off process can hold the gate SHARED for good from inside
-- a fenced write: a backend waiting in mid-pipeline for the COMMIT is `active` (ClientRead),
-- which idle_in_transaction_session_timeout never ends, and one blocked writing to a client
-- that no longer reads (ClientWrite) neither. Only its end frees the gate. A holder's sessions
-- are named `session_prefix` + holder (`leaseverbs.ha_session_name`). Only sessions this role
-- may end are asked (its own role's, or all for a superuser): a pair run as two roles keeps the
-- wait it had, rather than a take that fails on a permission error.
SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid)) AS ended
FROM yoke_leases l JOIN pg_stat_activity a
    ON a.application_name = left(%(session_prefix)s || l.holder, 63)
WHERE l.name = %(name)s AND l.holder IS NOT NULL AND l.holder <> %(holder)s
    AND (l.expires_at < extract(epoch FROM clock_timestamp()) OR %(force)s)
    AND a.datname = current_database() AND a.pid <> pg_backend_pid()
    AND pg_has_role(a.usesysid, 'USAGE');

-- name: gate_lease
-- The takeover's side of the fence: the lease's advisory lock, EXCLUSIVE, before its epoch is
-- bumped; it waits for every fenced write in flight (each holds it SHARED) to end.
SELECT set_config('lock_timeout', '2s', true), pg_advisory_xact_lock(2035382117, hashtext(%(name)s));

-- name: check_fence
-- The writer's side: true, or (PostgreSQL) SQLSTATE YK001 unless the term is still running.
SELECT yoke_fence(%(name)s, %(epoch)s) AS ok;

-- name: ha_peers
-- Other servers of the HA pair connected now: their pooled sessions are named yoke-ha:<id>.
SELECT count(DISTINCT application_name) AS n FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'yoke-ha:%%'
    AND application_name <> %(me)s;

-- name: notify_lease
SELECT pg_notify('yoke_lease', %(name)s);

-- the fleet: placement and rebalancing (yoke.actors.fleet). A move is marked on the instance
-- (moving_to) by the balancer and finished by its giver in one transaction (set_owner, which
-- clears the mark, then the queue rows follow as in a takeover).

-- name: fleet_counts
-- Per worker: instances owned, moving out, moving in (a move counts at both ends), and the
-- pending rows of the instances it owns. One pass over each table.
SELECT w.worker_id, sum(w.owned) AS owned, sum(w.moving_out) AS moving_out,
    sum(w.moving_in) AS moving_in, sum(w.pending) AS pending
FROM (
    SELECT worker_id, 1 AS owned, CASE WHEN moving_to IS NULL THEN 0 ELSE 1 END AS moving_out,
        0 AS moving_in, 0 AS pending
    FROM actor_instances
    WHERE worker_id IS NOT NULL AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
    UNION ALL
    SELECT moving_to, 0, 0, 1, 0 FROM actor_instances
    WHERE moving_to IS NOT NULL AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
    UNION ALL
    SELECT worker_id, 0, 0, 0, 1 FROM actor_queues
    WHERE status = 'pending' AND worker_id IS NOT NULL AND %(with_pending)s
        AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
) AS w
GROUP BY w.worker_id;

-- name: owned_page
-- Instances owned by `worker_id` (or by any worker) and not moving, in key order after
-- (after_tenant, after_actor, after_id): the balancer's candidates, read a bounded page at a time.
SELECT tenant, actor, instance_id, worker_id FROM actor_instances
WHERE worker_id IS NOT NULL AND moving_to IS NULL
    AND (%(worker_id)s::text IS NULL OR worker_id = %(worker_id)s)
    AND (tenant, actor, instance_id) > (%(after_tenant)s::text, %(after_actor)s::text,
        %(after_id)s::text)
ORDER BY tenant, actor, instance_id
LIMIT %(limit)s;

-- name: mark_moves
-- rows: [{tenant, actor, instance_id, giver, taker}]. Only an instance its giver still owns and
-- that is not moving already is marked. The rows are locked in key order first, as an append
-- (FOR SHARE) and a takeover lock them: an UPDATE over a join locks in the join's order, and
-- met an append holding two of them the other way round (a deadlock, seen in test_fleet).
WITH locked AS (
    SELECT i.tenant, i.actor, i.instance_id, r.taker
    FROM actor_instances i
    JOIN json_to_recordset(%(rows)s::json)
        AS r(tenant TEXT, actor TEXT, instance_id TEXT, giver TEXT, taker TEXT)
        ON i.tenant = r.tenant AND i.actor = r.actor AND i.instance_id = r.instance_id
    WHERE i.worker_id = r.giver AND i.moving_to IS NULL
    ORDER BY i.tenant, i.actor, i.instance_id
    FOR UPDATE OF i
)
UPDATE actor_instances i SET moving_to = l.taker, moving_since = %(now)s
FROM locked l
WHERE i.tenant = l.tenant AND i.actor = l.actor AND i.instance_id = l.instance_id;

-- name: lock_move
-- The move of one instance, if its giver still owns it under `epoch`.
SELECT i.tenant, i.actor, i.instance_id, i.moving_to,
    EXISTS (SELECT 1 FROM runtime_workers w WHERE w.worker_id = i.moving_to
        AND w.stopped_at IS NULL AND w.heartbeat_at >= %(stale_before)s) AS taker_live
FROM actor_instances i
WHERE i.tenant = %(tenant)s AND i.actor = %(actor)s AND i.instance_id = %(instance_id)s
    AND i.worker_id = %(worker_id)s AND i.owner_epoch = %(epoch)s AND i.moving_to IS NOT NULL
FOR UPDATE OF i;

-- name: notify_schedules
-- Every server's ticker reads the schedules again at once (its poll is the backup).
SELECT pg_notify('yoke_schedules', '');

-- name: notify_timers
SELECT pg_notify('yoke_execution_timers', '');

-- name: lock_execution
-- A wait and a signal lock the execution's row first: they never miss each other.
SELECT * FROM yoke_executions WHERE execution_id = %(execution_id)s FOR UPDATE;

-- name: fire_starts
-- Due scheduled starts become QUEUED on the firing instance, skipping those another
-- process is firing (if it dies first they are still SCHEDULED for the next read).
WITH due AS (
    SELECT seq FROM yoke_starts
    WHERE seq = ANY(%(seqs)s::bigint[]) AND status = 'SCHEDULED' AND due_at_ms <= %(now_ms)s
    ORDER BY seq
    FOR UPDATE SKIP LOCKED
)
UPDATE yoke_starts s SET status = 'QUEUED', instance_id = %(instance_id)s
FROM due WHERE s.seq = due.seq
RETURNING s.*;

-- name: prune_signals_of
DELETE FROM yoke_signals WHERE execution_id = ANY(%(ids)s::text[]);

-- name: schedule_starts_many
-- %(batch)s is a JSON array of {"start_id", "due_at_ms"}: the starts just logged wait for
-- their times.
UPDATE yoke_starts s SET status = 'SCHEDULED', due_at_ms = b.due_at_ms
FROM jsonb_to_recordset(%(batch)s::jsonb) AS b(start_id text, due_at_ms bigint)
WHERE s.start_id = b.start_id AND s.status = 'QUEUED'
RETURNING s.*;
