"""harness/arrival.py's waits timed on the wall clock (moved from tests/unit/test_arrival.py, issue #56: the
unit tier holds no sub-second wall-clock assert): the linger ends at once when every rank acknowledged, is
bounded by its limit, and a name that does not resolve is given up within its timeout."""

from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from commbench.core.errors import RuntimeFailure
from commbench.core.launch import RankEnv
from commbench.harness import arrival


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_store(world: int) -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", 0, world, True, timeout=timedelta(seconds=10), wait_for_workers=False)


def client_store(server: dist.TCPStore) -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", server.port, 1, False, timeout=timedelta(seconds=10), wait_for_workers=False)


def env_of(rank: int, world: int, port: int, launcher: str = "mpi") -> RankEnv:
    return RankEnv(launcher, rank, world, 0, 1, "127.0.0.1", port)


# ---- reaching rank 0 -------------------------------------------------------------------------


# ---- the count on rank 0's store ---------------------------------------------------------------


def test_linger_ends_when_every_rank_that_came_acknowledged():
    store = server_store(3)
    for rank in range(3):
        arrival.register(store, rank, "h")
    arrival.give_up(store)
    arrival.acknowledge(store)
    arrival.acknowledge(store)
    start = time.monotonic()
    arrival.linger(store, limit_s=5)
    assert time.monotonic() - start < 1


def test_linger_is_bounded():
    store = server_store(3)
    for rank in range(2):
        arrival.register(store, rank, "h")
    arrival.give_up(store)
    start = time.monotonic()
    arrival.linger(store, limit_s=0.3)
    assert 0.25 < time.monotonic() - start < 2


def ranks_0_and_1_only(world: int = 3, port: int = 1, go_on: bool = False,
                       store: dist.TCPStore | None = None, quiet=lambda: None) -> dict[int, object]:
    """Ranks 0 and 1 of `world` arrive (rank 1 on a thread), the others never do; what each arrive()
    returned or raised (its text)."""
    store = store or server_store(world)
    got: dict[int, object] = {}

    def rank(r: int, s) -> None:
        try:
            got[r] = arrival.arrive(s, env_of(r, world, port), 0.5, time.monotonic() + 0.5, quiet, go_on)
        except RuntimeFailure as exc:
            got[r] = str(exc)

    one = threading.Thread(target=rank, args=(1, client_store(store)))
    one.start()
    rank(0, store)
    one.join(15)
    return got


# ---- the line ----------------------------------------------------------------------------------


def test_resolve_is_bounded(monkeypatch):
    def slow(*args):
        time.sleep(1)
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(arrival.socket, "getaddrinfo", slow)
    start = time.monotonic()
    assert arrival.resolve("slow", timeout=0.2) is None
    assert time.monotonic() - start < 1


# ---- where each rank runs ----------------------------------------------------------------------
