-- The whole current schema, for a fresh install. Must equal applying every migration
-- in order (tests/store/test_migrations.py checks it).


CREATE TABLE yoke_starts (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    start_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    workflow TEXT NOT NULL,
    session TEXT NOT NULL,
    priority BIGINT NOT NULL,
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
    created_at DOUBLE PRECISION NOT NULL,
    decided_at DOUBLE PRECISION
);

-- One start per (principal, idempotency key); a refused start gives its key back (NULL).
CREATE UNIQUE INDEX yoke_starts_idempotency
    ON yoke_starts (idem_scope, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE yoke_executions (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    execution_id TEXT NOT NULL UNIQUE,
    start_id TEXT,
    workflow TEXT NOT NULL,
    session TEXT NOT NULL,
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    output TEXT,
    error TEXT,
    parent_id TEXT,
    restarted_from TEXT,
    resumed_from TEXT,
    slot_keys TEXT,
    instance_id TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION
);

CREATE INDEX yoke_executions_status ON yoke_executions (status, seq);
CREATE INDEX yoke_executions_session ON yoke_executions (session, seq);
CREATE INDEX yoke_executions_workflow ON yoke_executions (workflow, seq);

CREATE TABLE yoke_steps (
    execution_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    result TEXT NOT NULL,
    recorded_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (execution_id, position)
);

CREATE TABLE yoke_ledger (
    key TEXT PRIMARY KEY,
    running BIGINT NOT NULL CHECK (running >= 0)
);

CREATE TABLE yoke_control_log (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind TEXT NOT NULL,
    principal TEXT NOT NULL,
    tenant TEXT,
    roles TEXT NOT NULL,
    subject TEXT,
    before TEXT,
    after TEXT,
    at DOUBLE PRECISION NOT NULL
);

CREATE INDEX yoke_control_log_kind ON yoke_control_log (kind, seq);
CREATE TABLE yoke_instances (
    instance_id TEXT PRIMARY KEY,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    stopped_at DOUBLE PRECISION,
    dead_at DOUBLE PRECISION
);

CREATE INDEX yoke_executions_instance ON yoke_executions (instance_id, status);
CREATE INDEX yoke_starts_instance ON yoke_starts (instance_id, status);
