-- 0015: tenants are first-class in admission.
-- A start and its execution name their tenant (the principal's, or for a trusted caller the
-- session's first segment or an explicit one), stored, not re-derived from the session: what
-- a plain tenant may see follows this column. Rows written before are given their session's.
-- tenant_settings holds one row per tenant (`*`: the defaults of every tenant without a value
-- of its own): a NULL field is "not set here"; the weight too (NULL: the default's, else 1).
-- SQLite cannot drop a NOT NULL, so the table is made again.
-- yoke_tenant_usage counts what a tenant holds (actor instances, timers, kept Idempotency-Key
-- answers and event keys), changed in the transaction that changes what it counts; a row's
-- `cap` is the quota the last increment was checked against (NULL for a decrement), so the
-- database itself refuses an increment past it (yoke_tenant_quota).
-- yoke_tenant_rates holds each tenant's token buckets as GCRA's theoretical arrival time.

ALTER TABLE yoke_starts ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE yoke_starts SET tenant = CASE WHEN instr(session, '/') > 0
    THEN substr(session, 1, instr(session, '/') - 1) ELSE session END;

ALTER TABLE yoke_executions ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE yoke_executions SET tenant = CASE WHEN instr(session, '/') > 0
    THEN substr(session, 1, instr(session, '/') - 1) ELSE session END;
DROP INDEX yoke_executions_tenant;
CREATE INDEX yoke_executions_tenant ON yoke_executions (tenant, seq);

CREATE TABLE tenant_settings_0015 (
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
INSERT INTO tenant_settings_0015 (tenant, weight, max_running, updated_by, updated_at, version)
SELECT tenant, CASE WHEN weight = 1 THEN NULL ELSE weight END, max_running, updated_by,
    updated_at, version
FROM tenant_settings;
DROP TABLE tenant_settings;
ALTER TABLE tenant_settings_0015 RENAME TO tenant_settings;

ALTER TABLE yoke_idempotency ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE yoke_idempotency SET tenant = principal;
CREATE INDEX yoke_idempotency_tenant ON yoke_idempotency (tenant, expires_at);

ALTER TABLE yoke_event_keys ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE yoke_event_keys SET tenant = principal;
CREATE INDEX yoke_event_keys_tenant ON yoke_event_keys (tenant, expires_at);

CREATE TABLE yoke_tenant_usage (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    used INTEGER NOT NULL CHECK (used >= 0),
    cap INTEGER,
    PRIMARY KEY (tenant, kind),
    CONSTRAINT yoke_tenant_quota CHECK (cap IS NULL OR used <= cap)
);

INSERT INTO yoke_tenant_usage (tenant, kind, used)
SELECT tenant, 'instances', count(*) FROM actor_instances GROUP BY tenant;
INSERT INTO yoke_tenant_usage (tenant, kind, used)
SELECT tenant, 'timers', count(*) FROM scheduled_events GROUP BY tenant;
INSERT INTO yoke_tenant_usage (tenant, kind, used)
SELECT tenant, 'answers', count(*) FROM yoke_idempotency GROUP BY tenant;
INSERT INTO yoke_tenant_usage (tenant, kind, used)
SELECT tenant, 'event_keys', count(*) FROM yoke_event_keys GROUP BY tenant;

CREATE TABLE yoke_tenant_rates (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    tat REAL NOT NULL,
    PRIMARY KEY (tenant, kind)
);
CREATE INDEX yoke_tenant_rates_tat ON yoke_tenant_rates (tat);
