"""What NCCL's own debug output (NCCL_DEBUG=INFO) says about a run: the transports its channels
really used and the library version (the algorithm and protocol per operation: net/nccltuning.py).

A silent fallback from InfiniBand to sockets is the classic cause of "busbw is 10x too low", and
NCCL names the transport of every connection it sets up:

    host:1234:5678 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
    host:1234:5678 [0] NCCL INFO Channel 01 : 2[c7000] -> 3[ca000] via P2P/IPC/read
    host:1234:5678 [0] NCCL INFO Channel 13 : 10[2] -> 11[3] via SHM/direct/direct

`transport` keeps the first two parts of the `via` word (`NET/IB`, `NET/Socket`, `P2P/IPC`,
`P2P/CUMEM`) or the first one (`SHM`, `CollNet`, `NVLS`), drops a plugin's `_vN` suffix
(`NET/IBext_v8` -> `NET/IBext`), and joins the distinct ones, sorted: "NET/IB,P2P/IPC". When no
connection line was printed (one rank, or NCCL_DEBUG_SUBSYS without INIT), the network NCCL
selected is the answer instead ("Using network Socket" -> "NET/Socket"), and failing that the
network plugins that initialised ("NET/IB : Using [0]mlx5_0:1/IB ...", less those NCCL then
reports as "Failed to initialize NET plugin IB").
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from collections.abc import Iterable, Mapping

from commbench.net.nccltuning import TuningCollector, merged_subsys

_VIA = re.compile(r"NCCL INFO .*?\bvia\s+(.+?)\s*$", re.ASCII)
_USING_NETWORK = re.compile(r"NCCL INFO Using network\s+(.+?)\s*$", re.ASCII)
_NET_USING = re.compile(r"NCCL INFO NET/([A-Za-z][\w ]*?)\s*:\s*Using\b", re.ASCII)
_NET_FAILED = re.compile(r"NCCL INFO Failed to initialize NET plugin\s+(.+?)\s*$", re.ASCII)
_VERSION = re.compile(r"NCCL version\s+([0-9]+\.[0-9]+\.[0-9]+)", re.ASCII)
_PLUGIN_SUFFIX = re.compile(r"_v[0-9]+$", re.ASCII)

# The first part of a `via` word that names a network transport (the second part is the plugin).
_TWO_PART = {"NET", "P2P"}


def classify(via: str) -> str:
    """'NET/IB/0/GDRDMA' -> 'NET/IB'; 'P2P/IPC/read' -> 'P2P/IPC'; 'SHM/direct/direct' -> 'SHM'."""
    parts = via.split("/")
    if parts[0] in _TWO_PART and len(parts) > 1:
        name = _PLUGIN_SUFFIX.sub("", parts[1])
        if parts[0] == "P2P" and name.startswith("direct"):
            name = "direct"
        return f"{parts[0]}/{name}"
    return parts[0]


class TransportCollector:
    """Feed it lines (any mix of NCCL INFO and other output); `transport` is the answer so far."""

    def __init__(self) -> None:
        self.channels: set[str] = set()  # "Channel .. via X": what connections use
        self.selected: set[str] = set()  # "Using network X": the network plugin the communicator got
        self.offered: set[str] = set()  # "NET/X : Using [0]dev": plugins that initialised
        self.failed: set[str] = set()  # "Failed to initialize NET plugin X"
        self.nccl_version: str | None = None

    def feed(self, line: str) -> None:
        if "NCCL" not in line:
            return
        if self.nccl_version is None and (m := _VERSION.search(line)):
            self.nccl_version = m.group(1)
        if "NCCL INFO" not in line:
            return
        if m := _VIA.search(line):
            self.channels.add(classify(m.group(1)))
        elif m := _USING_NETWORK.search(line):
            self.selected.add("NET/" + _PLUGIN_SUFFIX.sub("", m.group(1).strip()))
        elif m := _NET_FAILED.search(line):
            self.failed.add("NET/" + _PLUGIN_SUFFIX.sub("", m.group(1).strip()))
        elif m := _NET_USING.search(line):
            self.offered.add("NET/" + _PLUGIN_SUFFIX.sub("", m.group(1).strip()))

    @property
    def transport(self) -> str | None:
        found = self.channels or self.selected or (self.offered - self.failed)
        return ",".join(sorted(found)) if found else None


def transports(lines: Iterable[str]) -> str | None:
    collector = TransportCollector()
    for line in lines:
        collector.feed(line)
    return collector.transport


def debug_file_pattern(folder: str | Path, run_id: str) -> str:
    """NCCL_DEBUG_FILE for a run: NCCL puts the host name for %h and the process id for %p."""
    return str(Path(folder) / f"{run_id}.nccl-debug.%h.%p.log")


def read_debug_files(paths: Iterable[str | Path]) -> str | None:
    """The transport named in NCCL debug files (unreadable files are skipped: this is a diagnosis)."""
    return read_debug_facts(paths)[0].transport


def read_debug_facts(paths: Iterable[str | Path]) -> tuple[TransportCollector, TuningCollector]:
    """What NCCL debug files say: the transport, and the algorithm and protocol per operation
    (net/nccltuning.py); unreadable files are skipped."""
    transport, tuning = TransportCollector(), TuningCollector()
    for p in paths:
        try:
            with open(p, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    transport.feed(line)
                    tuning.feed(line)
        except OSError:
            continue
    return transport, tuning


def own_debug_files(environ: Mapping[str, str] | None = None, pid: int | None = None) -> list[str]:
    """This process's NCCL debug files (NCCL_DEBUG_FILE, %h = host, %p = pid), sorted."""
    environ = os.environ if environ is None else environ
    pattern = environ.get("NCCL_DEBUG_FILE")
    if not pattern:
        return []
    wanted = glob.escape(pattern).replace("%h", "*").replace("%p", str(pid if pid is not None else os.getpid()))
    return sorted(glob.glob(wanted))


def own_debug_file_transport(environ: dict | None = None, pid: int | None = None) -> str | None:
    """The transport in this process's NCCL debug file (NCCL_DEBUG_FILE, %h = host, %p = pid)."""
    return read_debug_files(own_debug_files(environ, pid))


def record_transport(writer) -> None:
    """Rank 0 at the end of a run: put the transport its NCCL debug file names into every row."""
    transport = own_debug_file_transport()
    if transport and writer.rows:
        for row in writer.rows:
            row["transport"] = transport
        writer.append([])


def record_debug(writer, environ: dict | None = None, pid: int | None = None) -> None:
    """Rank 0 at the end of a run: what its NCCL debug file says into the rows, the transport into
    every row and NCCL's algorithm and protocol into the rows of the points it named (NCCL
    prints those on rank 0 only, so rank 0's own file has them all)."""
    paths = own_debug_files(environ, pid)
    if not paths or not writer.rows:
        return
    transport, tuning = read_debug_facts(paths)
    if transport.transport:
        for row in writer.rows:
            row["transport"] = transport.transport
    if tuning.fill(writer.rows) or transport.transport:
        writer.append([])


def enable_debug_file(out: str, run_id: str, backend: str) -> str:
    """sweep --nccl-debug: NCCL_DEBUG=INFO into one file per rank beside the results, with the
    subsystems that name the transport and the algorithm per operation added to any
    NCCL_DEBUG_SUBSYS of the user's (net/nccltuning.py merged_subsys)."""
    from commbench.core.errors import BadInput
    from commbench.core.results import resolve_out

    if backend != "nccl":
        raise BadInput("--nccl-debug records the transport and algorithms NCCL used: it needs --backend nccl (GPUs)")
    pattern = debug_file_pattern(resolve_out(out, run_id).parent, run_id)
    os.environ["NCCL_DEBUG"] = "INFO"
    os.environ["NCCL_DEBUG_FILE"] = pattern
    os.environ["NCCL_DEBUG_SUBSYS"] = merged_subsys(os.environ.get("NCCL_DEBUG_SUBSYS"))
    return pattern
