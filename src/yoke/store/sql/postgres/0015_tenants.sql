-- 0015: tenants are first-class in admission.
-- A start and its execution name their tenant (the principal's, or for a trusted caller the
-- session's first segment or an explicit one), stored, not re-derived from the session: what
-- a plain tenant may see follows this column. Rows written before are given their session's.
-- tenant_settings holds one row per tenant (`*`: the defaults of every tenant without a value
-- of its own): a NULL field is "not set here"; the weight too (NULL: the default's, else 1).
-- yoke_tenant_usage counts what a tenant holds (actor instances, timers, kept Idempotency-Key
-- answers and event keys), changed in the transaction that changes what it counts; a row's
-- `cap` is the quota the last increment was checked against (NULL for a decrement), so the
-- database itself refuses an increment past it (yoke_tenant_quota).
-- yoke_tenant_rates holds each tenant's token buckets as GCRA's theoretical arrival time.

ALTER TABLE yoke_starts ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE yoke_starts SET tenant = split_part(session, '/', 1);
ALTER TABLE yoke_starts ALTER COLUMN tenant DROP DEFAULT;

ALTER TABLE yoke_executions ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE yoke_executions SET tenant = split_part(session, '/', 1);
ALTER TABLE yoke_executions ALTER COLUMN tenant DROP DEFAULT;
DROP INDEX yoke_executions_tenant;
CREATE INDEX yoke_executions_tenant ON yoke_executions (tenant, seq);

ALTER TABLE tenant_settings ALTER COLUMN weight DROP NOT NULL;
ALTER TABLE tenant_settings ALTER COLUMN weight DROP DEFAULT;
UPDATE tenant_settings SET weight = NULL WHERE weight = 1;
ALTER TABLE tenant_settings ADD COLUMN exec_max_running INTEGER;
ALTER TABLE tenant_settings ADD COLUMN exec_max_queued INTEGER;
ALTER TABLE tenant_settings ADD COLUMN exec_rate DOUBLE PRECISION;
ALTER TABLE tenant_settings ADD COLUMN exec_burst INTEGER;
ALTER TABLE tenant_settings ADD COLUMN append_rate DOUBLE PRECISION;
ALTER TABLE tenant_settings ADD COLUMN append_burst INTEGER;
ALTER TABLE tenant_settings ADD COLUMN max_instances BIGINT;
ALTER TABLE tenant_settings ADD COLUMN max_timers BIGINT;

ALTER TABLE yoke_idempotency ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE yoke_idempotency SET tenant = principal;
ALTER TABLE yoke_idempotency ALTER COLUMN tenant DROP DEFAULT;
CREATE INDEX yoke_idempotency_tenant ON yoke_idempotency (tenant, expires_at);

ALTER TABLE yoke_event_keys ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE yoke_event_keys SET tenant = principal;
ALTER TABLE yoke_event_keys ALTER COLUMN tenant DROP DEFAULT;
CREATE INDEX yoke_event_keys_tenant ON yoke_event_keys (tenant, expires_at);

CREATE TABLE yoke_tenant_usage (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    used BIGINT NOT NULL CHECK (used >= 0),
    cap BIGINT,
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
    tat DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, kind)
);
CREATE INDEX yoke_tenant_rates_tat ON yoke_tenant_rates (tat);
