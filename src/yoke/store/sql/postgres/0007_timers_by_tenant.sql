-- 0007: a tenant's next timers (the dashboard's Timers view and GET /v1/timers of a plain
-- tenant) are read through an index of their own, so another tenant's many earlier timers
-- neither hide them nor make the read walk past every one of those.

CREATE INDEX scheduled_events_tenant_due ON scheduled_events (tenant, fire_at_ms, timer_id);
