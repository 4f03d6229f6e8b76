-- 0011: an instance being handed over to another worker (rebalancing) names its taker and
-- since when; the giver finishes the move (owner and epoch change) once nothing of it runs.

ALTER TABLE actor_instances ADD COLUMN moving_to TEXT;
ALTER TABLE actor_instances ADD COLUMN moving_since DOUBLE PRECISION;
CREATE INDEX actor_instances_moving ON actor_instances (moving_to);
