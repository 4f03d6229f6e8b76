-- 0020: the delayed starts not yet due, listed by the Admission view and GET /v1/queue
-- (`scheduled_starts`, `scheduled_starts_of`): read from indexes of their own, so that one
-- tenant's many sleeping executions (their wake-ups are SCHEDULED starts too) or many delayed
-- starts are not scanned to list another tenant's.
CREATE INDEX yoke_starts_delayed ON yoke_starts (due_at_ms, seq)
    WHERE status = 'SCHEDULED' AND kind <> 'wake';
CREATE INDEX yoke_starts_delayed_by_tenant ON yoke_starts (tenant, due_at_ms, seq)
    WHERE status = 'SCHEDULED' AND kind <> 'wake';
