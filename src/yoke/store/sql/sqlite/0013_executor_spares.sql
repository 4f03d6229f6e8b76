-- 0013: warm spares, the executors a worker boots ahead of need, bound to no tenant yet: the
-- latest spare in each of a worker's slots (`YOKE_EXECUTOR_WARM_SPARES` of them), as the
-- worker recorded it, for `GET /v1/executors` (tenant null, state SPARE).

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
