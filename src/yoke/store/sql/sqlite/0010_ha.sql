-- 0010: high availability (`yoke serve --ha`, PostgreSQL only). A lease records when its
-- term began (`acquired_at`, the database's clock). SQLite needs no fence function: its single
-- write lock already orders a fenced write against a takeover.

ALTER TABLE yoke_leases ADD COLUMN acquired_at REAL NOT NULL DEFAULT 0;
ALTER TABLE yoke_executions ADD COLUMN leader_epoch INTEGER;
