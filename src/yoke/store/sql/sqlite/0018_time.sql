-- 0018: time in workflows: delayed starts, durable sleeps and signal waits.
-- A start may be SCHEDULED: it waits for `due_at_ms` (a timer of the one timer machinery), then
-- becomes QUEUED on the process that fired it and is admitted like any start. A sleeping or
-- waiting execution is WAITING and holds no slot; its wake-up is a start of kind 'wake',
-- SCHEDULED at the wake time (a signal makes it due at once), whose grant runs the same
-- execution again (its steps replayed). `waiting_for` names the signal a WAITING execution
-- waits for (NULL: a sleep). Signals are kept in order until a wait takes them.

ALTER TABLE yoke_starts ADD COLUMN due_at_ms BIGINT;
ALTER TABLE yoke_executions ADD COLUMN waiting_for TEXT;
CREATE INDEX yoke_starts_scheduled ON yoke_starts (due_at_ms, seq) WHERE status = 'SCHEDULED';
CREATE INDEX yoke_starts_wakes ON yoke_starts (source_execution_id)
    WHERE status = 'SCHEDULED' AND kind = 'wake';

CREATE TABLE yoke_signals (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    principal TEXT,
    created_at REAL NOT NULL,
    taken_at REAL
);
CREATE INDEX yoke_signals_kept ON yoke_signals (execution_id, name, seq) WHERE taken_at IS NULL;
