-- 0005: a row put back to pending while it waits out its backoff (a requeued event whose
-- worker stopped or lost its instance) keeps the later rows of its group waiting behind it, so
-- FIFO per group holds across a hand-over; claims find such rows here. Only requeued rows
-- (attempts > 0) enter this index: appends never touch it.

CREATE INDEX actor_queues_backoff ON actor_queues (tenant, actor, instance_id, group_id, queue_id)
    WHERE status = 'pending' AND attempts > 0;
