"""The stores and ports the harness/arrival.py tests share (tests/unit/test_arrival.py and
tests/integration/test_arrival_timing.py): a real in-process TCPStore as rank 0 serves it and as
another rank connects to it, a port nothing listens on, and a rank's launch environment.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch.distributed as dist

from commbench.core.launch import RankEnv


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
