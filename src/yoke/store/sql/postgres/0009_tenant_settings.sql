-- 0009: fleet-wide tenant settings, and the counters of the per-tenant cap.
-- tenant_settings: a tenant's weight (its share of every worker's slots and claimed rows, sfq)
-- and its cap on concurrent process() calls across the fleet (max_running, NULL: none), set by
-- an ADMIN (app.tenants, PUT /v1/tenants/{tenant}) and audited in yoke_control_log.
-- tenant_running: process() calls of a capped tenant running now, one counter per worker; a
-- worker takes one under its tenant's settings row (locked), counting the live workers' rows.

CREATE TABLE tenant_settings (
    tenant TEXT PRIMARY KEY,
    weight DOUBLE PRECISION NOT NULL DEFAULT 1,
    max_running INTEGER,
    updated_by TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    version INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE tenant_running (
    tenant TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    running INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, worker_id)
);
