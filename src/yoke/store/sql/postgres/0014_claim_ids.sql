-- 0014: each claim of the drain marks its rows with an id of the worker's choosing, so that a
-- claim whose answer was lost (the store committed it, the connection dropped before the
-- worker heard) can be undone by that worker: its rows are claimed and held by no one.

ALTER TABLE actor_queues ADD COLUMN claim_id BIGINT;
