"""A slow-loris attacker for the tests and the benchmark of the connection rules: many
connections, each sending a request head a byte at a time and never finishing it."""

from __future__ import annotations

import contextlib
import socket
import threading

SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n" + b"x-slow: 1\r\n" * 4000


class SlowLoris:
    """`count` connections from `sources` in turn, each sending a request head one byte a tick
    (never finishing it); a connection the server closes is opened again on the next tick, as
    a real attacker does. Runs in a thread of its own."""

    def __init__(self, port: int, count: int, sources: list[str], tick: float = 1.0) -> None:
        self.port, self.count, self.sources, self.tick = port, count, sources, tick
        self.ticks = self.opened = self.closed = 0
        self._ticked = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SlowLoris:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def wait_ticks(self, ticks: int, timeout: float = 30.0) -> None:
        """Until `ticks` rounds were sent (the first opens every connection)."""
        with self._ticked:
            if not self._ticked.wait_for(lambda: self.ticks >= ticks, timeout):
                raise TimeoutError(f"the flood made {self.ticks} of {ticks} rounds")

    def _open(self, n: int) -> socket.socket:
        s = socket.socket()
        s.setblocking(False)
        s.bind((self.sources[n % len(self.sources)], 0))
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", self.port))
        self.opened += 1
        return s

    def _run(self) -> None:
        socks: list[socket.socket | None] = [None] * self.count
        sent = [0] * self.count
        try:
            while not self._stop.is_set():
                for n in range(self.count):
                    s = socks[n]
                    if s is None:
                        socks[n], sent[n] = self._open(n), 0
                        continue
                    try:
                        sent[n] += s.send(SLOW_HEAD[sent[n] : sent[n] + 1])
                    except BlockingIOError:
                        pass  # not connected yet: the server's backlog is full
                    except OSError:  # the server closed it
                        s.close()
                        socks[n] = None
                        self.closed += 1
                with self._ticked:
                    self.ticks += 1
                    self._ticked.notify_all()
                self._stop.wait(self.tick)
        finally:
            for s in socks:
                if s is not None:
                    s.close()
