"""The control plane's fakes (harness/control.py), shared by tests/unit/test_control.py,
tests/unit/test_observer.py and tests/integration/test_control_timing.py: the stores (a dict for
rank 0's main store, a recorder for torch's TCPStore and PrefixStore, a store that counts its reads
and can hold them), a fake clock and stop event, and the fixtures that make control planes in this
process with the heartbeat thread not started. A test module takes a fixture by naming it at its top
(`fakes = controlfakes.fakes`), so pytest finds it there.
"""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

from commbench.harness import control
from commbench.harness.control import ControlPlane


HEARTBEAT = ControlPlane._heartbeat  # the real loop: the fixtures below keep it from starting on a thread


class MainStore:
    """Rank 0's store as the control plane uses it: set a string, get bytes back."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]


class TCPStore(MainStore):
    """Records how torch's TCPStore was asked for; a port of its own, as a server on port 0 gets."""

    made: list[TCPStore] = []

    def __init__(self, host, port, world, is_master, timeout=None, wait_for_workers=True) -> None:
        super().__init__()
        self.host, self.world, self.is_master, self.timeout = host, world, is_master, timeout
        self.port = port or 50000 + len(TCPStore.made)
        TCPStore.made.append(self)


class PrefixStore:
    def __init__(self, prefix: str, store) -> None:
        self.prefix, self.store = prefix, store

    def set(self, key: str, value: str) -> None:
        self.store.set(self.prefix + "/" + key, value)

    def get(self, key: str) -> bytes:
        return self.store.get(self.prefix + "/" + key)


class Clock:
    """control.time: monotonic() and sleep() that moves it (and records the naps)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Stop:
    """The plane's stop event for a loop that runs `turns` times; each wait moves the clock."""

    def __init__(self, clock: Clock, turns: int, step: float | list[float]) -> None:
        self.clock, self.turns = clock, turns
        self.steps = step if isinstance(step, list) else [step] * turns

    def wait(self, seconds: float) -> bool:
        if self.turns == 0:
            return True
        self.turns -= 1
        self.clock.now += self.steps.pop(0)
        return False

    def set(self) -> None:
        self.turns = 0


@pytest.fixture
def fakes(monkeypatch):
    TCPStore.made = []
    monkeypatch.setattr(control, "dist", SimpleNamespace(TCPStore=TCPStore, PrefixStore=PrefixStore, Store=object))
    monkeypatch.setattr(ControlPlane, "_heartbeat", lambda self: None)  # beats are put by hand where they matter
    return SimpleNamespace(store=MainStore())


@pytest.fixture
def planes(fakes):
    """make(world, timeout): one control plane per rank, all on one main store, in this process."""
    made: list[ControlPlane] = []

    def make(world: int, timeout: float = 10.0, addr: str | None = None) -> list[ControlPlane]:
        new = [ControlPlane(fakes.store, r, world, addr, timeout) for r in range(world)]
        made.extend(new)
        return new

    yield make
    close_all(made)


def close_all(made: list[ControlPlane]) -> None:
    """close() waits for each mailbox's serve loop to notice (its 0.2 s poll): on threads, not in
    the test's time."""
    for plane in made:
        threading.Thread(target=plane.close, name="close-control-plane", daemon=True).start()


def one_plane(fakes, world: int, timeout: float = 10.0) -> ControlPlane:
    """Rank 0 of `world`, the others only as entries in the main store (their hosts host1, host2, ...)."""
    for r in range(1, world):
        fakes.store.set(control._PEERS + str(r), json.dumps({"host": f"host{r}", "addr": f"10.0.0.{r}",
                                                             "port": 7000 + r, "pair_port": 8000 + r,
                                                             "probe_port": 9000 + r}))
    return ControlPlane(fakes.store, 0, world, "10.0.0.0", timeout)


@pytest.fixture
def rank0(fakes):
    made: list[ControlPlane] = []

    def make(world: int, timeout: float = 10.0) -> ControlPlane:
        made.append(one_plane(fakes, world, timeout))
        return made[-1]

    yield make
    close_all(made)



class CountingStore(MainStore):
    """Rank 0's store that counts its reads; `hold` makes every read block (the network went away)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.hold = threading.Event()
        self.held = threading.Event()

    def check(self, keys: list[str]) -> bool:
        self.reads += 1
        if self.held.is_set():
            self.hold.wait(60)
        return all(k in self.data for k in keys)

    def get(self, key: str) -> bytes:
        self.reads += 1
        return self.data[key]


def entry(r: int) -> str:
    return json.dumps({"host": f"host{r}", "addr": f"10.0.0.{r}", "port": 7000 + r, "pair_port": 8000 + r,
                       "probe_port": 9000 + r})

