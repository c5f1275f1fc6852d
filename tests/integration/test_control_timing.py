"""harness/control.py's waits timed on the wall clock (moved from tests/unit/test_control.py, issue #56: the
unit tier holds no sub-second wall-clock assert): a rank whose address never came is waited for a read's
patience only, and a real TCPStore stays free while a late rank is awaited. The fakes are
tests/unit/controlfakes.py's."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from commbench.harness import control
from commbench.harness.control import ControlPlane

from unit import controlfakes
from unit.controlfakes import Clock, CountingStore, entry

fakes = controlfakes.fakes  # its fixture, found here


@pytest.mark.failure(row="network-gone-control-plane")
def test_a_rank_whose_address_never_came_is_unknown_and_nothing_waits_for_it(fakes, monkeypatch):
    store = CountingStore()
    store.set(control._PEERS + "1", entry(1))
    plane = ControlPlane(store, 0, 3, "10.0.0.0", 2.0)  # rank 2 never publishes its address
    try:
        started = time.monotonic()
        assert sorted(plane.peers()) == [0, 1]  # waited at most a read's patience (0.2 s under --timeout 2)
        assert time.monotonic() - started < 1.0
        assert plane.read(2, "beat") is None
        probed = []
        monkeypatch.setattr(control, "probe", lambda addr, port, timeout: probed.append(port) or "open")
        monkeypatch.setattr(control, "time", Clock())
        monkeypatch.setattr(plane, "read_all", lambda r: None)
        call = plane.roll_call()
        assert call.unreachable == [2] and call.hung == [1] and probed == [9001]  # no probe of an unknown port
        assert "rank 2 on an unknown host (address unknown) is unreachable" in plane.describe(call)
        with pytest.raises(RuntimeError, match="rank 2's address never reached rank 0"):
            plane.store_of(2)
        assert plane.gather(0.1) == [2]  # still unknown: the gather goes on until --timeout + GATHER_SLACK_S
    finally:
        plane.close()


def test_the_gather_finds_late_ranks_through_a_real_store_without_holding_it():
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=5), wait_for_workers=False)
    plane = ControlPlane(server, 0, 2, "127.0.0.1", 5.0)
    try:
        time.sleep(0.3)
        started = time.monotonic()
        server.set("other", "x")  # the store's connection is free while rank 1 is awaited (check, not get)
        assert time.monotonic() - started < 0.5
        server.set(control._PEERS + "1", entry(1))
        assert plane.gather(5.0) == [] and plane.peers()[1].host == "host1"
    finally:
        plane.close()
