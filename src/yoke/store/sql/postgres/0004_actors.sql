-- 0004: actors (the actors specification, docs/decisions.md): streams, per-instance queues, timers, and the workers that own
-- instances. Times are epoch seconds from the caller's clock; JSON is text encoded by yoke.

CREATE TABLE stream_events (
    event_id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    stream TEXT NOT NULL,
    data TEXT NOT NULL,
    appended_at DOUBLE PRECISION NOT NULL
);

CREATE TABLE actor_instances (
    tenant TEXT NOT NULL,
    actor TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    worker_id TEXT,
    owner_epoch BIGINT NOT NULL DEFAULT 1,
    state TEXT NOT NULL DEFAULT '{}',
    version BIGINT NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, actor, instance_id)
);

CREATE INDEX actor_instances_worker ON actor_instances (worker_id);

CREATE TABLE actor_queues (
    queue_id BIGSERIAL PRIMARY KEY,
    event_id BIGINT NOT NULL,
    tenant TEXT NOT NULL,
    actor TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    group_id TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    available_at DOUBLE PRECISION NOT NULL,
    -- The owner and owner epoch of the row's instance, copied so that a claim and a completion
    -- read one row and no join; a takeover rewrites them with the instance row.
    worker_id TEXT,
    owner_epoch BIGINT NOT NULL,
    claimed_by TEXT,
    claim_epoch BIGINT NOT NULL DEFAULT 0,
    error TEXT,
    dead_at DOUBLE PRECISION
);

CREATE INDEX actor_queues_claim ON actor_queues (worker_id, tenant, queue_id)
    WHERE status = 'pending';
CREATE INDEX actor_queues_instance ON actor_queues (tenant, actor, instance_id, status);

CREATE TABLE scheduled_events (
    timer_id BIGSERIAL PRIMARY KEY,
    tenant TEXT NOT NULL,
    stream TEXT NOT NULL,
    data TEXT NOT NULL,
    fire_at_ms BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);

CREATE INDEX scheduled_events_due ON scheduled_events (fire_at_ms);

CREATE TABLE runtime_workers (
    worker_id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    stopped_at DOUBLE PRECISION
);
