-- 0001: starts, executions, steps, the slot ledger and the control log.
-- Times are epoch seconds from the caller's clock; JSON is text encoded by yoke.

CREATE TABLE yoke_starts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    start_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    workflow TEXT NOT NULL,
    session TEXT NOT NULL,
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
    finished_at REAL
);

CREATE INDEX yoke_executions_status ON yoke_executions (status, seq);
CREATE INDEX yoke_executions_session ON yoke_executions (session, seq);
CREATE INDEX yoke_executions_workflow ON yoke_executions (workflow, seq);

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
