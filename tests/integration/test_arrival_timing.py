"""harness/arrival.py's waits timed on the wall clock (moved from tests/unit/test_arrival.py, issue #56: the
unit tier holds no sub-second wall-clock assert): the linger ends at once when every rank acknowledged, is
bounded by its limit, and a name that does not resolve is given up within its timeout. The stores are
tests/unit/arrivalstores.py's."""

from __future__ import annotations

import socket
import time

from commbench.harness import arrival

from unit.arrivalstores import server_store


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
