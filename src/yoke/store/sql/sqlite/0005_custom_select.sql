-- 0005: a custom-mode pick lists one group's pending rows of an instance in arrival order
-- (list_pending). The instance index gains the group and the queue id, so that listing reads
-- just the first rows of the window instead of sorting all the instance's pending rows; it
-- stays one index, so appends and claims maintain no more than before.
DROP INDEX actor_queues_instance;
CREATE INDEX actor_queues_instance ON actor_queues (tenant, actor, instance_id, status,
    group_id, queue_id);
