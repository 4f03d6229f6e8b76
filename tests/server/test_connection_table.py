"""The connection rules alone (`yoke.server.connections`, no sockets): the per-client cap and
who counts as a client, the capacity and which connection makes room, the head deadline; the
whole table against a brute-force model over random sequences; and the open-file limit's
share for connections (`yoke.server.descriptors`)."""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import dataclass

import pytest

from yoke.server.connections import (
    ConnectionLimits,
    ConnectionTable,
    Phase,
    TrustedProxies,
    Verdict,
    client_of,
)
from yoke.server.descriptors import connection_capacity


def table(**limits: object) -> ConnectionTable[str]:
    return ConnectionTable(ConnectionLimits(**limits))  # type: ignore[arg-type]


def test_one_address_is_capped_and_others_are_not() -> None:
    t = table(per_client=2)
    assert t.admit("a1", "10.0.0.1", 0)[0] is Verdict.ADMITTED
    assert t.admit("a2", "10.0.0.1", 0)[0] is Verdict.ADMITTED
    assert t.admit("a3", "10.0.0.1", 0) == (Verdict.TOO_MANY_FROM_CLIENT, None)
    assert t.admit("b1", "10.0.0.2", 0)[0] is Verdict.ADMITTED
    t.forget("a1")
    t.forget("a1")  # idempotent: a closed connection is forgotten once
    assert t.admit("a4", "10.0.0.1", 0)[0] is Verdict.ADMITTED
    assert t.stats().refused_per_client == 1 and t.stats().clients == 2


def test_an_ipv6_client_is_its_64_and_a_mapped_ipv4_is_the_ipv4() -> None:
    assert client_of("2001:db8:1:2:aaaa::1") == client_of("2001:db8:1:2:bbbb::9")
    assert client_of("2001:db8:1:2::1") != client_of("2001:db8:1:3::1")
    assert client_of("::ffff:10.0.0.1") == "10.0.0.1"
    t = table(per_client=1)
    assert t.admit("x", "2001:db8::1", 0)[0] is Verdict.ADMITTED
    assert t.admit("y", "2001:db8::2", 0)[0] is Verdict.TOO_MANY_FROM_CLIENT


def test_a_trusted_proxy_and_a_unix_socket_count_only_in_the_total() -> None:
    proxies = TrustedProxies("10.1.0.0/16, 192.168.0.7,unix:/run/proxy")
    assert "10.1.2.3" in proxies and "192.168.0.7" in proxies and "unix:/run/proxy" in proxies
    assert "10.2.0.1" not in proxies and "192.168.0.8" not in proxies
    assert "anything" in TrustedProxies("*")
    t = table(per_client=1, capacity=3, trusted=proxies)
    assert [t.admit(n, "10.1.0.9", 0)[0] for n in ("p1", "p2")] == [Verdict.ADMITTED] * 2
    assert t.admit("u", None, 0)[0] is Verdict.ADMITTED
    assert t.stats().clients == 0 and t.open == 3


def test_at_capacity_the_longest_waiting_makes_room_but_never_a_request() -> None:
    t = table(capacity=3)
    for n, conn in enumerate(("old", "mid", "new")):
        t.admit(conn, f"10.0.0.{n}", float(n))
    t.head_complete("old")  # its request is in progress
    assert t.admit("d", "10.0.0.9", 5) == (Verdict.ADMITTED, "mid")
    t.head_complete("new")
    t.head_complete("d")
    assert t.admit("e", "10.0.0.9", 6) == (Verdict.FULL, None)  # all three in requests
    t.answered("old", 7, head_begun=False)  # now idle, waiting since 7
    assert t.admit("e", "10.0.0.9", 8) == (Verdict.ADMITTED, "old")
    assert t.phase("old") is None and t.phase("e") is Phase.HEAD
    s = t.stats()
    assert (s.open, s.made_room, s.refused_full) == (3, 2, 1)


def test_a_head_has_until_its_deadline_however_it_trickles() -> None:
    t = table(header_timeout=10.0)
    t.admit("new", "10.0.0.1", 0)
    t.admit("kept", "10.0.0.2", 0)
    t.head_complete("kept")
    t.answered("kept", 1, head_begun=False)  # idle from 1: idle is not a head
    t.head_begins("new", 5)  # a byte of a new connection's head: its deadline stays at 10
    assert t.expired(9.9) == []
    assert t.expired(10.0) == ["new"]
    assert t.expired(50) == []  # "kept" is idle: uvicorn's keep-alive closes it, not this
    t.head_begins("kept", 50)  # its next request's first byte: a head owed from 50
    assert t.expired(59.9) == [] and t.expired(60) == ["kept"]
    assert t.open == 0 and t.stats().timed_out == 2


def test_an_answer_with_the_next_head_begun_keeps_its_deadline_running_from_then() -> None:
    t = table(header_timeout=10.0)
    t.admit("c", "10.0.0.1", 0)
    t.head_complete("c")
    t.answered("c", 30, head_begun=True)  # a pipelined head was trickling meanwhile
    assert t.expired(39) == [] and t.expired(40) == ["c"]


@dataclass
class _Model:
    """The rules, written the slow and obvious way."""

    per_client: int
    capacity: int | None
    timeout: float
    trusted: TrustedProxies
    conns: dict[int, list[object]]  # conn -> [key, phase, since, seq]
    seq: int = 0

    def _key(self, peer: str | None) -> str | None:
        return None if peer is None or peer in self.trusted else client_of(peer)

    def _mark(self, conn: int, phase: Phase, now: float) -> None:
        self.seq += 1
        self.conns[conn][1:] = [phase, now, self.seq]

    def admit(self, conn: int, peer: str | None, now: float) -> tuple[Verdict, int | None]:
        key = self._key(peer)
        if key is not None and sum(c[0] == key for c in self.conns.values()) >= self.per_client:
            return Verdict.TOO_MANY_FROM_CLIENT, None
        room = None
        if self.capacity is not None and len(self.conns) >= self.capacity:
            waiting = [(c[3], n) for n, c in self.conns.items() if c[1] is not Phase.REQUEST]
            if not waiting:
                return Verdict.FULL, None
            room = min(waiting)[1]
            del self.conns[room]
        self.conns[conn] = [key, None, None, None]
        self._mark(conn, Phase.HEAD, now)
        return Verdict.ADMITTED, room

    def head_begins(self, conn: int, now: float) -> None:
        if conn in self.conns and self.conns[conn][1] is Phase.IDLE:
            self._mark(conn, Phase.HEAD, now)

    def head_complete(self, conn: int) -> None:
        if conn in self.conns:
            self.conns[conn][1] = Phase.REQUEST

    def answered(self, conn: int, now: float, head_begun: bool) -> None:
        if conn in self.conns:
            self._mark(conn, Phase.HEAD if head_begun else Phase.IDLE, now)

    def expired(self, now: float) -> list[int]:
        late = sorted(
            (c[3], n)
            for n, c in self.conns.items()
            if c[1] is Phase.HEAD and c[2] <= now - self.timeout  # type: ignore[operator]
        )
        for _, n in late:
            del self.conns[n]
        return [n for _, n in late]


PEERS = [None, "10.0.0.1", "10.0.0.2", "10.9.0.1", "2001:db8::1", "2001:db8::2", "::ffff:10.0.0.1"]


@pytest.mark.parametrize("seed", range(40))
def test_the_table_follows_the_model(seed: int) -> None:
    rng = random.Random(seed)
    per_client, capacity = rng.randint(1, 4), rng.choice([None, 3, 6, 10])
    trusted = TrustedProxies("10.9.0.0/16")
    limits = ConnectionLimits(
        header_timeout=5.0, per_client=per_client, capacity=capacity, trusted=trusted
    )
    real: ConnectionTable[int] = ConnectionTable(limits)
    model = _Model(per_client, capacity, 5.0, trusted, {})
    now, next_conn = 0.0, 0
    for _ in range(400):
        now += rng.choice([0.0, 0.0, 0.5, 1.0, 3.0])
        known = list(model.conns) or [0]
        conn = rng.choice(known)
        op = rng.randrange(7)
        if op <= 1:
            next_conn += 1
            peer = rng.choice(PEERS)
            assert real.admit(next_conn, peer, now) == model.admit(next_conn, peer, now)
        elif op == 2:
            real.head_begins(conn, now)
            model.head_begins(conn, now)
        elif op == 3:
            real.head_complete(conn)
            model.head_complete(conn)
        elif op == 4:
            begun = rng.random() < 0.3
            real.answered(conn, now, head_begun=begun)
            model.answered(conn, now, begun)
        elif op == 5:
            real.forget(conn)
            model.conns.pop(conn, None)
        else:
            assert real.expired(now) == model.expired(now)
        s = real.stats()
        phases = [c[1] for c in model.conns.values()]
        assert (s.open, s.heads, s.idle) == (
            len(phases),
            phases.count(Phase.HEAD),
            phases.count(Phase.IDLE),
        )
        assert s.clients == len({c[0] for c in model.conns.values()} - {None})
        assert all(real.phase(n) is c[1] for n, c in model.conns.items())


def test_the_reserve_is_a_quarter_of_the_limit_within_bounds() -> None:
    assert connection_capacity(None) is None
    assert connection_capacity(1024) == 768
    assert connection_capacity(200) == 100  # never more than half in reserve
    assert connection_capacity(16384) == 16384 - 4096
    assert connection_capacity(1 << 20) == (1 << 20) - 4096


def test_the_soft_open_file_limit_is_raised_to_the_hard_limit() -> None:
    code = (
        "import resource; from yoke.server.descriptors import raise_open_file_limit as r; "
        "print(r(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    out = subprocess.run(
        ["prlimit", "--nofile=1024:2048", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == ["2048", "2048"]
