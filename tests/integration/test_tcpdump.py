"""`pairs --capture`'s tcpdump process (net/linkcapture.py) with stand-in binaries: not permitted,
listening then closing its file on SIGINT, stopped past its seconds, never listening; and the real
tcpdump on loopback where root has it. (The command line and the capture file names are in
tests/unit/test_capture.py.)"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading

import pytest

from commbench.net import linkcapture
from commbench.net.linkcapture import Capture
from commbench.net.pcapsummary import summarise


def fake(tmp_path, body: str) -> str:
    """A stand-in tcpdump: a Python script with `body`."""
    path = tmp_path / "tcpdump"
    path.write_text(f"#!{sys.executable}\nimport signal, sys, time\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_a_capture_not_permitted_says_why_and_how(tmp_path):
    binary = fake(tmp_path, "sys.stderr.write('tcpdump: eth0: You don\\'t have permission to capture on that device "
                            "(socket: Operation not permitted)\\n'); sys.exit(1)")
    cap = Capture([binary, "-i", "eth0"], str(tmp_path / "x.pcap"), 5)
    assert not cap.start()
    assert cap.error.startswith("tcpdump exited: eth0: You don't have permission to capture on that device")
    assert "root or CAP_NET_RAW" in cap.error and "\n" not in cap.error


def test_a_capture_listens_then_closes_its_file_on_sigint(tmp_path):
    out = tmp_path / "x.pcap"
    binary = fake(tmp_path, f"""
def done(*_):
    open({str(out)!r}, 'wb').write(b'')
    sys.stderr.write('12 packets captured\\n3 packets dropped by kernel\\n'); sys.stderr.flush(); sys.exit(0)
signal.signal(signal.SIGINT, done)
sys.stderr.write('tcpdump: listening on eth0, link-type EN10MB (Ethernet), snapshot length 128 bytes\\n')
sys.stderr.flush()
time.sleep(30)""")
    cap = Capture([binary, "-i", "eth0"], str(out), 20)
    assert cap.start(), cap.error
    assert cap.stop() and out.exists() and cap.dropped == 3 and cap.error is None


def test_a_capture_is_stopped_past_its_seconds(tmp_path):
    out = tmp_path / "x.pcap"
    binary = fake(tmp_path, f"""
signal.signal(signal.SIGINT, lambda *_: (open({str(out)!r}, 'wb').close(), sys.exit(0)))
sys.stderr.write('tcpdump: listening on eth0\\n'); sys.stderr.flush()
time.sleep(30)""")
    cap = Capture([binary], str(out), 0.3)
    assert cap.start()
    cap._proc.wait(5)  # the timer's SIGINT, not stop()
    assert cap.stop() and out.exists()


def test_one_that_never_listens_is_given_up(tmp_path, monkeypatch):
    monkeypatch.setattr(linkcapture, "START_S", 0.3)
    cap = Capture([fake(tmp_path, "signal.signal(signal.SIGINT, lambda *_: sys.exit(0)); time.sleep(30)")],
                  str(tmp_path / "x.pcap"), 5)
    assert not cap.start() and cap.error == "tcpdump did not start listening"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("tcpdump") is None, reason="needs root and tcpdump")
def test_the_real_tcpdump_on_loopback_is_read_back(tmp_path):
    path = str(tmp_path / "lo.pcap")
    addr = "127.83.0.1"  # a loopback address of its own: other tests' traffic on 127.0.0.1 is not captured
    server = socket.create_server((addr, 0))
    port = server.getsockname()[1]
    cap = Capture(linkcapture.argv("lo", addr, path, [], 10, user="root"), path, 10)
    if not cap.start():
        pytest.skip(f"tcpdump cannot capture here: {cap.error}")

    def serve():
        conn, _ = server.accept()
        while conn.recv(65536):
            pass
        conn.close()

    t = threading.Thread(target=serve)
    t.start()
    with socket.create_connection((addr, port)) as c:
        c.sendall(b"x" * 200_000)
    t.join(5)
    server.close()
    assert cap.stop(), cap.error
    s = summarise(path)
    assert s.tcp_segments >= 4 and s.connections == 1 and s.note is None, s
