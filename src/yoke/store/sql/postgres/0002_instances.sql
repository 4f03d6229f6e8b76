-- 0002: processes and their heartbeats, so the rows of a dead process can be recovered.

CREATE TABLE yoke_instances (
    instance_id TEXT PRIMARY KEY,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    stopped_at DOUBLE PRECISION,
    dead_at DOUBLE PRECISION
);

CREATE INDEX yoke_executions_instance ON yoke_executions (instance_id, status);
CREATE INDEX yoke_starts_instance ON yoke_starts (instance_id, status);
