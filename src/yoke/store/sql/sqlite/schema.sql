-- The whole current schema, for a fresh install. Must equal applying every migration
-- in order (tests/store/test_migrations.py checks it).


CREATE TABLE yoke_starts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    start_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    workflow TEXT NOT NULL,
    session TEXT NOT NULL,
    tenant TEXT NOT NULL DEFAULT '',
    priority INTEGER NOT NULL,
    input TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    principal TEXT,
    idem_scope TEXT NOT NULL DEFAULT '',
    idempotency_key TEXT,
    source_execution_id TEXT,
    from_step TEXT,
    status TEXT NOT NULL,
    execution_id TEXT,
    reason TEXT,
    instance_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    decided_at REAL
);

-- One start per (principal, idempotency key); a refused start gives its key back (NULL).
CREATE UNIQUE INDEX yoke_starts_idempotency
    ON yoke_starts (idem_scope, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE yoke_executions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL UNIQUE,
    start_id TEXT,
    workflow TEXT NOT NULL,
    session TEXT NOT NULL,
    tenant TEXT NOT NULL DEFAULT '',
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    output TEXT,
    error TEXT,
    parent_id TEXT,
    restarted_from TEXT,
    resumed_from TEXT,
    slot_keys TEXT,
    instance_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL,
    leader_epoch INTEGER
);

CREATE INDEX yoke_executions_status ON yoke_executions (status, seq);
CREATE INDEX yoke_executions_session ON yoke_executions (session, seq);
CREATE INDEX yoke_executions_workflow ON yoke_executions (workflow, seq);
CREATE INDEX yoke_executions_tenant ON yoke_executions (tenant, seq);
CREATE INDEX yoke_executions_parent ON yoke_executions (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX yoke_executions_restarted ON yoke_executions (restarted_from)
    WHERE restarted_from IS NOT NULL;
CREATE INDEX yoke_executions_resumed ON yoke_executions (resumed_from)
    WHERE resumed_from IS NOT NULL;

CREATE TABLE yoke_steps (
    execution_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    result TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    PRIMARY KEY (execution_id, position)
);

CREATE TABLE yoke_ledger (
    key TEXT PRIMARY KEY,
    running INTEGER NOT NULL CHECK (running >= 0)
);

CREATE TABLE yoke_control_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    principal TEXT NOT NULL,
    tenant TEXT,
    roles TEXT NOT NULL,
    subject TEXT,
    before TEXT,
    after TEXT,
    at REAL NOT NULL
);

CREATE INDEX yoke_control_log_kind ON yoke_control_log (kind, seq);
CREATE TABLE yoke_instances (
    instance_id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    stopped_at REAL,
    dead_at REAL
);

CREATE INDEX yoke_executions_instance ON yoke_executions (instance_id, status);
CREATE INDEX yoke_starts_instance ON yoke_starts (instance_id, status);

CREATE TABLE yoke_idempotency (
    principal TEXT NOT NULL,
    tenant TEXT NOT NULL DEFAULT '',
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    headers TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (principal, idem_key)
);

CREATE INDEX yoke_idempotency_expiry ON yoke_idempotency (expires_at);
CREATE INDEX yoke_idempotency_tenant ON yoke_idempotency (tenant, expires_at);


-- 0004: actors (the actors specification, docs/decisions.md).

CREATE TABLE stream_events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    stream TEXT NOT NULL,
    data TEXT NOT NULL,
    appended_at REAL NOT NULL
);

CREATE TABLE actor_instances (
    tenant TEXT NOT NULL,
    actor TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    worker_id TEXT,
    owner_epoch INTEGER NOT NULL DEFAULT 1,
    state TEXT NOT NULL DEFAULT '{}',
    version INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    PRIMARY KEY (tenant, actor, instance_id)
);

CREATE INDEX actor_instances_worker ON actor_instances (worker_id);

CREATE TABLE actor_queues (
    queue_id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    actor TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    group_id TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    available_at REAL NOT NULL,
    -- The owner and owner epoch of the row's instance, copied so that a claim and a completion
    -- read one row and no join; a takeover rewrites them with the instance row.
    worker_id TEXT,
    owner_epoch INTEGER NOT NULL,
    claimed_by TEXT,
    claim_epoch INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    dead_at REAL,
    crash_attempts INTEGER NOT NULL DEFAULT 0,
    claim_id INTEGER,  -- the claim that took it (a lost claim is undone by it)
    -- Claimed by a worker that died (it may have killed it): it runs alone, marked `solo`
    -- first; a recovery charges a crash attempt to a row marked `solo` (0016).
    suspect INTEGER NOT NULL DEFAULT 0,
    solo INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX actor_queues_claim ON actor_queues (worker_id, tenant, queue_id)
    WHERE status = 'pending';
CREATE INDEX actor_queues_instance ON actor_queues (tenant, actor, instance_id, status);
CREATE INDEX actor_queues_backoff ON actor_queues (tenant, actor, instance_id, group_id, queue_id)
    WHERE status = 'pending' AND attempts > 0;

CREATE TABLE scheduled_events (
    timer_id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    stream TEXT NOT NULL,
    data TEXT NOT NULL,
    fire_at_ms INTEGER NOT NULL,
    created_at REAL NOT NULL
);

CREATE INDEX scheduled_events_due ON scheduled_events (fire_at_ms);

CREATE INDEX scheduled_events_tenant_due ON scheduled_events (tenant, fire_at_ms, timer_id);

CREATE TABLE runtime_workers (
    worker_id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    stopped_at REAL
);

CREATE TABLE runtime_executors (
    worker_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    pid INTEGER,
    state TEXT NOT NULL,
    started_at REAL NOT NULL,
    boot_ms REAL,
    dispatches INTEGER NOT NULL DEFAULT 0,
    active_dispatch INTEGER NOT NULL DEFAULT 0,
    crashes INTEGER NOT NULL DEFAULT 0,
    isolation TEXT NOT NULL,
    stop_reason TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (worker_id, tenant)
);

CREATE INDEX runtime_executors_tenant ON runtime_executors (tenant);

CREATE TABLE runtime_spares (
    worker_id TEXT NOT NULL,
    slot INTEGER NOT NULL,
    pid INTEGER,
    state TEXT NOT NULL,
    started_at REAL NOT NULL,
    boot_ms REAL,
    isolation TEXT NOT NULL,
    stop_reason TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (worker_id, slot)
);

CREATE TABLE yoke_leases (
    name TEXT PRIMARY KEY,
    holder TEXT,
    epoch INTEGER NOT NULL DEFAULT 0,
    expires_at REAL NOT NULL DEFAULT 0,
    acquired_at REAL NOT NULL DEFAULT 0
);

CREATE TABLE tenant_settings (
    tenant TEXT PRIMARY KEY,
    weight REAL,
    max_running INTEGER,
    updated_by TEXT NOT NULL,
    updated_at REAL NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    exec_max_running INTEGER,
    exec_max_queued INTEGER,
    exec_rate REAL,
    exec_burst INTEGER,
    append_rate REAL,
    append_burst INTEGER,
    max_instances INTEGER,
    max_timers INTEGER
);

CREATE TABLE tenant_running (
    tenant TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    running INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, worker_id)
);


-- 0011: an instance being handed over to another worker (rebalancing) names its taker and
-- since when; the giver finishes the move (owner and epoch change) once nothing of it runs.

ALTER TABLE actor_instances ADD COLUMN moving_to TEXT;
ALTER TABLE actor_instances ADD COLUMN moving_since REAL;
CREATE INDEX actor_instances_moving ON actor_instances (moving_to);


-- 0012: Idempotency-Keys of appended events (claimed in the append's transaction).

CREATE TABLE yoke_event_keys (
    principal TEXT NOT NULL,
    tenant TEXT NOT NULL DEFAULT '',
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    event_id INTEGER,
    expires_at REAL NOT NULL,
    PRIMARY KEY (principal, idem_key)
);

CREATE INDEX yoke_event_keys_expiry ON yoke_event_keys (expires_at);
CREATE INDEX yoke_event_keys_tenant ON yoke_event_keys (tenant, expires_at);


-- 0015: what a tenant holds (instances, timers, kept answers and event keys), counted in the
-- transaction that changes it, each increment checked against its quota by the database; and
-- the tenants' token buckets (GCRA: the theoretical arrival time).

CREATE TABLE yoke_tenant_usage (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    used INTEGER NOT NULL CHECK (used >= 0),
    cap INTEGER,
    PRIMARY KEY (tenant, kind),
    CONSTRAINT yoke_tenant_quota CHECK (cap IS NULL OR used <= cap)
);

CREATE TABLE yoke_tenant_rates (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    tat REAL NOT NULL,
    PRIMARY KEY (tenant, kind)
);
CREATE INDEX yoke_tenant_rates_tat ON yoke_tenant_rates (tat);


-- 0017: workflows that survive failures (see the migration for each column).
ALTER TABLE yoke_steps ADD COLUMN status TEXT NOT NULL DEFAULT 'SUCCEEDED';
ALTER TABLE yoke_steps ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
ALTER TABLE yoke_steps ADD COLUMN first_attempt INTEGER NOT NULL DEFAULT 1;
ALTER TABLE yoke_steps ADD COLUMN error TEXT;
ALTER TABLE yoke_steps ADD COLUMN retry_at REAL;
ALTER TABLE yoke_starts ADD COLUMN recovery INTEGER NOT NULL DEFAULT 0;

CREATE TABLE yoke_requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    principal TEXT,
    payload TEXT,
    created_at REAL NOT NULL,
    handled_at REAL
);

CREATE INDEX yoke_requests_pending ON yoke_requests (instance_id, seq) WHERE handled_at IS NULL;
CREATE INDEX yoke_requests_execution ON yoke_requests (execution_id);


-- 0018: time in workflows (see the migration).
ALTER TABLE yoke_starts ADD COLUMN due_at_ms BIGINT;
ALTER TABLE yoke_executions ADD COLUMN waiting_for TEXT;
CREATE INDEX yoke_starts_scheduled ON yoke_starts (due_at_ms, seq) WHERE status = 'SCHEDULED';
CREATE INDEX yoke_starts_wakes ON yoke_starts (source_execution_id)
    WHERE status = 'SCHEDULED' AND kind = 'wake';

CREATE TABLE yoke_signals (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    principal TEXT,
    created_at REAL NOT NULL,
    taken_at REAL
);
CREATE INDEX yoke_signals_kept ON yoke_signals (execution_id, name, seq) WHERE taken_at IS NULL;

-- 0019: schedules (see the migration for each column).

CREATE TABLE yoke_schedules (
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    schedule_id TEXT NOT NULL UNIQUE,
    workflow TEXT NOT NULL,
    input TEXT NOT NULL,
    session TEXT NOT NULL,
    cron TEXT,
    every REAL,
    timezone TEXT NOT NULL,
    catch_up TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at REAL NOT NULL,
    seq BIGINT NOT NULL,
    next_at REAL NOT NULL,
    firing TEXT,
    firing_until REAL,
    last_tick_at REAL,
    last_fired_at REAL,
    last_start_id TEXT,
    last_outcome TEXT,
    fired BIGINT NOT NULL DEFAULT 0,
    missed BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, name)
);

CREATE INDEX yoke_schedules_next ON yoke_schedules (next_at) WHERE firing IS NULL;
CREATE INDEX yoke_schedules_firing ON yoke_schedules (firing_until) WHERE firing IS NOT NULL;


-- 0020: the delayed starts not yet due, by their own indexes (see the migration).
CREATE INDEX yoke_starts_delayed ON yoke_starts (due_at_ms, seq)
    WHERE status = 'SCHEDULED' AND kind <> 'wake';
CREATE INDEX yoke_starts_delayed_by_tenant ON yoke_starts (tenant, due_at_ms, seq)
    WHERE status = 'SCHEDULED' AND kind <> 'wake';
