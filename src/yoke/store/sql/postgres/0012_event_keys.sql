-- 0012: the Idempotency-Key of an event appended over HTTP, per principal, claimed in the
-- append's own transaction (the key row is inserted first; a concurrent claim of the same key
-- waits for it and then reads its event instead of appending), so a key appends one event
-- even when a retry reaches another server while the first request is in flight.

CREATE TABLE yoke_event_keys (
    principal TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    event_id BIGINT,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (principal, idem_key)
);

CREATE INDEX yoke_event_keys_expiry ON yoke_event_keys (expires_at);
