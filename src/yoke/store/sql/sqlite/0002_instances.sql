-- 0002: processes and their heartbeats, so the rows of a dead process can be recovered.

CREATE TABLE yoke_instances (
    instance_id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    stopped_at REAL,
    dead_at REAL
);

CREATE INDEX yoke_executions_instance ON yoke_executions (instance_id, status);
CREATE INDEX yoke_starts_instance ON yoke_starts (instance_id, status);
