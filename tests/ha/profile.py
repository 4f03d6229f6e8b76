"""How hard and how long a chaos run is (`Profile`), and the settings its servers get."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """How hard and how long: the CI profile is the defaults; bench/chaos.py a longer one."""

    ttl: float = 2.0  # YOKE_HA_LEASE_TTL_SECS
    stale_after: float = 10.0  # YOKE_INSTANCE_STALE_AFTER: a peer dead after this long
    ha: bool = False  # `yoke serve --ha` (the HA pair); else two active servers
    liveness_lock: bool = True  # YOKE_HA_LIVENESS_LOCK
    max_running: int = 4
    run_seconds: float = 0.2  # each execution's run time
    start_rate: float = 5.0  # starts offered per second
    event_rate: float = 3.0  # events appended per second
    instances: int = 8  # counter instances the events spread over
    request_timeout: float = 5.0  # a request not answered by then is sent to the other server
    retry_pause: float = 0.05
    warmup: float = 2.0  # load before each fault
    stop_for: float = 2.5  # SIGSTOP for stop_for x ttl
    blackhole_for: float = 3.0  # blackhole for blackhole_for x ttl (the long profile: 30 s)
    settle_timeout: float = 60.0
    pool_max: int = 10

    def env(self) -> dict[str, str]:
        return {
            "YOKE_HA_LEASE_TTL_SECS": f"{self.ttl:g}",
            "YOKE_HA_LIVENESS_LOCK": "1" if self.liveness_lock else "0",
            "YOKE_HEARTBEAT_INTERVAL": f"{self.stale_after / 5:g}",
            "YOKE_INSTANCE_STALE_AFTER": f"{self.stale_after:g}",
            "YOKE_SLOT_POLL_INTERVAL": "0.5",
            "YOKE_EXECUTION_SHUTDOWN_TIMEOUT": "5",
            "YOKE_PG_POOL_MAX": str(self.pool_max),
            "YOKE_PG_CONNECT_TIMEOUT": "5",
            "YOKE_RETRY_MAX_PAUSE": "0.5",
            "YOKE_WORKER_HEARTBEAT_SECS": "1",
            "YOKE_WORKER_STALE_SECS": "4",
            "YOKE_NOTIFY_POLL_BACKUP_SECS": "2",
        }
