"""harness/tcpprobe.py: the one TCP probe's words (arrival's and the control plane's), which of
them come from the host itself, and the probe port that keeps answering."""

from __future__ import annotations

import errno
import socket

import pytest

from commbench.harness import tcpprobe
from commbench.harness.tcpprobe import host_answers, probe, probe_listener


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_probe_tells_open_from_refused():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        assert probe("127.0.0.1", listener.getsockname()[1], 1.0) == "open"
    assert probe("127.0.0.1", closed_port(), 1.0) == "refused"
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: the kernel refuses
        assert probe("127.0.0.1", closed.getsockname()[1], 5) == "refused"


@pytest.mark.parametrize("error, said", [
    (TimeoutError("timed out"), "no answer"),
    (OSError(errno.EHOSTUNREACH, "No route to host"), "no route"),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), "no route"),
    (OSError(errno.ECONNRESET, "reset"), "no answer"),
    (socket.gaierror(-2, "Name or service not known"), "unknown host"),
])
def test_probe_words_for_each_failure(monkeypatch, error, said):
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(tcpprobe.socket, "create_connection", fail)
    assert probe("10.0.0.9", 29400, 0.1) == said
    assert not host_answers(said)  # the control plane's roll call: unreachable


@pytest.mark.parametrize("said", ["open", "refused"])
def test_an_open_or_refused_port_is_the_host_answering(said):
    assert host_answers(said)


def test_the_probe_port_drains_its_connections():
    sock = probe_listener()
    try:
        port = sock.getsockname()[1]
        assert [probe("127.0.0.1", port, 5) for _ in range(3)] == ["open"] * 3
    finally:
        sock.close()
