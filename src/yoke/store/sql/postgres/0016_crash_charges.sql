-- 0016: a call in flight when its worker died is charged by whoever recovers it. A claimed
-- row of a worker that died becomes a suspect (it may be the call that killed it); a suspect
-- runs alone on its next worker, marked `solo` first, so that if that worker dies too, the
-- recovery knows which call it was running and charges it a crash attempt (a dead letter at
-- the limit). Rows that were merely claimed with it are never charged.

ALTER TABLE actor_queues ADD COLUMN suspect INTEGER NOT NULL DEFAULT 0;
ALTER TABLE actor_queues ADD COLUMN solo INTEGER NOT NULL DEFAULT 0;
