-- 0019: schedules. One row per (tenant, name): what each tick starts (workflow, input,
-- session), when ticks fall (cron in a time zone, or every N seconds), the catch-up rule, and
-- the ticker's state: next_at, the next tick due; firing, the ticks a server decided to start
-- (JSON, NULL when none is pending) and firing_until, past which another server may finish
-- them (their starts carry idempotency keys, so finishing twice starts nothing twice); seq,
-- raised by every change, the compare-and-set token of a change and of a claim.

CREATE TABLE yoke_schedules (
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    schedule_id TEXT NOT NULL UNIQUE,
    workflow TEXT NOT NULL,
    input TEXT NOT NULL,
    session TEXT NOT NULL,
    cron TEXT,
    every REAL,
    timezone TEXT NOT NULL,
    catch_up TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at REAL NOT NULL,
    seq BIGINT NOT NULL,
    next_at REAL NOT NULL,
    firing TEXT,
    firing_until REAL,
    last_tick_at REAL,
    last_fired_at REAL,
    last_start_id TEXT,
    last_outcome TEXT,
    fired BIGINT NOT NULL DEFAULT 0,
    missed BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, name)
);

CREATE INDEX yoke_schedules_next ON yoke_schedules (next_at) WHERE firing IS NULL;
CREATE INDEX yoke_schedules_firing ON yoke_schedules (firing_until) WHERE firing IS NOT NULL;
