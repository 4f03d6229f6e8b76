-- 0008: a plain tenant's executions (GET /v1/executions, the Executions page) are read through
-- an index on the tenant of their session (`acme` for `acme` and `acme/...`), newest first, so
-- a page reads that tenant's rows alone; the links between executions (a child's parent, a
-- restart's or resume's source) are read back both ways through partial indexes.

CREATE INDEX yoke_executions_tenant ON yoke_executions ((split_part(session, '/', 1)), seq);
CREATE INDEX yoke_executions_parent ON yoke_executions (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX yoke_executions_restarted ON yoke_executions (restarted_from)
    WHERE restarted_from IS NOT NULL;
CREATE INDEX yoke_executions_resumed ON yoke_executions (resumed_from)
    WHERE resumed_from IS NOT NULL;
