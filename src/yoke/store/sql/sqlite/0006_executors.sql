-- 0006: per-tenant executor processes and leases.
-- crash_attempts: the times an executor died while running this row alone (or past its
-- dispatch deadline); counted apart from failed attempts, so a crash never spends the actor's
-- own retry budget, and after a few the row is a dead letter. runtime_executors: the latest
-- life of each (worker, tenant) executor, written by its worker, read by GET /v1/executors.
-- yoke_leases: named leases (holder, fencing epoch, expiry on the database's clock), e.g. the
-- one a singleton portal runs under.

ALTER TABLE actor_queues ADD COLUMN crash_attempts INTEGER NOT NULL DEFAULT 0;

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

CREATE TABLE yoke_leases (
    name TEXT PRIMARY KEY,
    holder TEXT,
    epoch INTEGER NOT NULL DEFAULT 0,
    expires_at REAL NOT NULL DEFAULT 0
);
