"""A headers-only packet capture of one link while it is measured (`pairs --capture`): tcpdump on
the interface towards the peer, 128 bytes a packet, only the peer's traffic, bounded in packets and
seconds, stopped (SIGINT, so that it closes the file) when the transfer ends. The .pcap stays for
Wireshark; net/pcapsummary.py reads it.

tcpdump, not a capture library: it is in every distribution (apt-get install tcpdump), it holds
the one privilege a capture needs (root or CAP_NET_RAW) on its own binary, and its file is what
Wireshark and `tcpdump -r` read. Argv lists only, never a shell. Where tcpdump is missing or may not
capture, start() says why in one line and the link is measured without it.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

SNAP_BYTES = 128  # Ethernet + IPv4/IPv6 + TCP with options fit; the payload is cut
MAX_PACKETS = 200_000  # at most (16 + 128) B each: under 30 MB a capture
START_S = 5.0  # for tcpdump to say it listens (it opens the interface and compiles the filter)
STOP_S = 3.0  # for tcpdump to close its file after SIGINT, before it is killed
SETTLE_S = (0.15, 1.0)  # before SIGINT: the file unchanged this long, waited at most this long
_LISTENING = re.compile(r"listening on ")
_DROPPED = re.compile(r"(\d+) packets? dropped by kernel")


def argv(iface: str, peer: str, path: str, skip_ports: list[int], max_s: float, binary: str = "tcpdump",
         user: str | None = None, max_packets: int = MAX_PACKETS) -> list[str]:
    """tcpdump's command line: `iface`, packets to or from `peer` that are not to or from the
    control plane's ports (`skip_ports`: mailboxes, probes, the pair's rendezvous store),
    immediate mode (a capture stopped right after the transfer keeps its last packets, which
    TPACKET_V3 would still hold in a block), at most `max_packets` (-c) and, by itself, about
    `max_s` seconds (-G with -W 1: it exits at the first packet after that, even when the rank that
    started it is gone), `user`: the user tcpdump runs as after opening the interface (root's
    tcpdump would drop to user tcpdump, which may not write the results folder)."""
    flt = f"host {peer}"
    if skip_ports:
        flt += " and not (" + " or ".join(f"port {p}" for p in sorted(set(skip_ports))) + ")"
    cmd = [binary, "-i", iface, "-s", str(SNAP_BYTES), "-n", "--immediate-mode", "-c", str(max_packets),
           "-G", str(max(1, math.ceil(max_s))), "-W", "1"]
    if user:
        cmd += ["-Z", user]
    return cmd + ["-w", path.replace("%", "%%"), flt]  # -G reads the name as a strftime pattern


@dataclass
class Capture:
    """One tcpdump process: start() before the transfer, stop() after it (also past `max_s`)."""

    cmd: list[str]
    path: str
    max_s: float  # it is stopped this long after its start whatever happens
    error: str | None = None  # why there is no capture (set by start or stop)
    dropped: int | None = None  # packets the kernel dropped before tcpdump read them
    _proc: subprocess.Popen | None = None
    _lines: list[str] = field(default_factory=list)
    _heard: threading.Event = field(default_factory=threading.Event)
    _timer: threading.Timer | None = None

    def start(self) -> bool:
        """True once tcpdump listens; False with `error` set when it cannot (missing, not permitted)."""
        binary = shutil.which(self.cmd[0])
        if binary is None:
            self.error = f"{self.cmd[0]} is not installed here (apt-get install tcpdump)"
            return False
        try:
            self._proc = subprocess.Popen([binary, *self.cmd[1:]], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                          errors="replace")  # in the rank's process group: stopped with it
        except OSError as exc:
            self.error = f"{self.cmd[0]} could not start: {exc}"
            return False
        threading.Thread(target=self._read, daemon=True).start()
        end = time.monotonic() + START_S
        while not self._heard.wait(0.02):
            if self._proc.poll() is not None or time.monotonic() > end:
                self._fail("did not start listening" if self._proc.poll() is None else "exited")
                return False
        self._timer = threading.Timer(self.max_s, self._interrupt)
        self._timer.daemon = True
        self._timer.start()
        return True

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self._lines.append(line.strip())
            if _LISTENING.search(line):
                self._heard.set()

    def _fail(self, what: str) -> None:
        self._end()
        said = next((x for x in self._lines if x and not _LISTENING.search(x)), "")
        said = said.removeprefix("tcpdump: ")
        self.error = f"tcpdump {what}" + (f": {said}" if said else "") + _hint(said)

    def _settle(self) -> None:
        """Let tcpdump write what the kernel already gave it: SIGINT ends its loop at once, and
        packets it has not read yet (a busy host, the transfer's last ones) would be lost."""
        quiet, longest = SETTLE_S
        end, size, since = time.monotonic() + longest, -1, time.monotonic()
        while time.monotonic() < end and self._proc is not None and self._proc.poll() is None:
            now = os.path.getsize(self.path) if os.path.exists(self.path) else -1
            if now != size:
                size, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(0.03)

    def _interrupt(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGINT)  # tcpdump closes its file and prints its counts
            except ProcessLookupError:
                pass

    def _end(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        proc = self._proc
        if proc is None:
            return
        self._interrupt()
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> bool:
        """Stop it; True when a file was written (`dropped` from tcpdump's closing counts)."""
        if self._proc is None:
            return False
        self._settle()
        self._end()
        time.sleep(0.05)  # its last stderr lines (the counts) reach the reader thread
        found = next((m for x in self._lines if (m := _DROPPED.search(x))), None)
        self.dropped = int(found.group(1)) if found else None
        if not os.path.exists(self.path):
            self.error = "tcpdump wrote no file" + (f": {self._lines[-1]}" if self._lines else "")
            return False
        return True


def _hint(said: str) -> str:
    low = said.lower()
    if "permission" in low or "not permitted" in low:
        return " (a capture needs root or CAP_NET_RAW: run as root, or setcap cap_net_raw,cap_net_admin=eip on tcpdump)"
    return ""
