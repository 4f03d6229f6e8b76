-- 0003: answers the server keeps for Idempotency-Key replay: per principal and key, the
-- fingerprint of the first request and its answer (status, JSON body, headers), until expires_at.

CREATE TABLE yoke_idempotency (
    principal TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    headers TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (principal, idem_key)
);

CREATE INDEX yoke_idempotency_expiry ON yoke_idempotency (expires_at);
