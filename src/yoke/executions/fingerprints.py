"""What makes two requests with one idempotency key the same request: one rule, one hash.

A key's first request is kept with its fingerprint; a later one with the same key is a retry
(answered as the first) only if its fingerprint is equal, else `IdempotencyConflict`. Two
layers keep keys: the HTTP replay (`server/idempotency.py`, the method, path and body of any
creating POST) and the starts service (`service.Executions.start`, its workflow, input,
session and priority, kept in the start's row, so a key never makes two starts even when the
HTTP answer was forgotten). Both hash their parts with `fingerprint`, over canonical JSON (keys
sorted, no spaces), so the order of an object's keys never makes two requests differ, in either.

This module must never import anything of yoke.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical(value: Any) -> str:
    """`value` (JSON-able) as canonical JSON: keys sorted, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(*parts: Any) -> str:
    """The fingerprint of a request made of `parts` (JSON-able values)."""
    return hashlib.sha256(canonical(list(parts)).encode()).hexdigest()
