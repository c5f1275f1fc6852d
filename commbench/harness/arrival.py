"""Who arrived: the run's rendezvous bounded by --timeout, and, when a rank never comes, one line
from rank 0 naming it (its host where the launcher tells, and what a probe of that host said),
instead of every rank's backend timeout and c10d's native stack frames.

A rank other than rank 0 first reaches rank 0's store port with plain TCP connections (retried
until the deadline): only then does it build its c10d TCPStore client, whose connect retries log
each failure to stderr with the C++ stack frames of its exception (TCPStore.cpp, "TCP client failed
to connect/validate"). A rank that never gets through says so in one line naming rank 0's address.
Every rank that reached the store counts itself in (`register`) and waits until every rank has
(`await_all`), polling one counter on rank 0's store rather than c10d's `wait`; only then does the
process group rendezvous, so it never waits on an absent rank. At the deadline rank 0 gives up for
everyone (the counter goes negative), finds the ranks whose key is absent, probes their hosts and
names them; the ranks that did arrive say one short line. A workload that can measure without
them (`pairs`: the links among the hosts that came) asks to go on: rank 0 then puts the ranks that
joined under JOINED (empty: too few to go on), and those ranks rendezvous again among themselves,
renumbered in order (harness/runner.py), while rank 0 names the absent ones.

Hosts of ranks that never arrived come from the launcher: COMMBENCH_RANK_HOSTS (a comma list, one
host a rank, for any wrapper that knows the placement), Slurm (SLURM_JOB_NODELIST with
SLURM_TASKS_PER_NODE, block or cyclic), `commbench lab run` (rank r runs on the lab's r-th host,
the order of its hosts file), the local launcher (every rank on this host), torchrun (the other
ranks of the same node block, when one of them arrived). mpirun tells nothing: the rank alone.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from commbench.core.errors import RuntimeFailure
from commbench.core.launch import RankEnv
from commbench.harness.tcpprobe import probe

COUNT = "commbench/arrival/count"
ACK = "commbench/arrival/ack"
JOINED = "commbench/arrival/joined"  # rank 0, going on without the absent ranks: those that joined, "0,1,3"
HOST = "commbench/arrival/host/"
GAVE_UP = 1 << 40  # subtracted from the count by rank 0 at its deadline: every rank stops waiting
PROBE_S = 3.0  # a host's kernel answers a connection within this (an ARP failure takes about 3 s)
RETRY_S = 0.5  # between two connection attempts to rank 0's store port
GRACE_S = 5.0  # how much longer than its own deadline a rank waits for rank 0's word
LINGER_S = 2.0  # how long rank 0 keeps its store up for the others to read that it gave up
MAX_NAMED = 8  # ranks named in the line; the rest are counted
MAX_PROBED = 32  # hosts probed at once


class Store(Protocol):
    """What this module needs of a c10d store (dist.Store has these)."""

    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def add(self, key: str, amount: int) -> int: ...
    def check(self, keys: list[str]) -> bool: ...


def reach(addr: str, port: int, deadline: float, sleep: Callable[[float], None] = time.sleep) -> str | None:
    """Connect to rank 0's store port until it accepts (None) or `deadline` (time.monotonic)
    passes: then what the last attempt found. 'refused' at first is normal (rank 0 not serving yet)."""
    last = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return last
        last = probe(addr, port, min(PROBE_S, left))
        if last == "open":
            return None
        sleep(max(0.0, min(RETRY_S, deadline - time.monotonic())))


def unreached_line(rank: int, addr: str, port: int, timeout: float, said: str) -> str:
    """The one line of a rank that never reached rank 0's store."""
    why = {"refused": "its host answers but nothing listens on that port (rank 0 did not start, or MASTER_PORT "
                      "differs)",
           "no route": "no route to it", "unknown host": "the name does not resolve"}.get(said, "no answer from it")
    return (f"rank {rank} could not reach rank 0 at {addr}:{port} within {timeout:g} s: {why}; check this host's "
            "link (ip link, ibstat), its route to MASTER_ADDR and the firewall")


def register(store: Store, rank: int, host: str) -> int:
    """Count this rank in (its host kept for rank 0); the count after it (negative: rank 0 gave up)."""
    store.set(HOST + str(rank), host)
    return int(store.add(COUNT, 1))


def await_all(store: Store, world: int, deadline: float, sleep: Callable[[float], None] = time.sleep) -> int:
    """Poll the count until every rank is in (returns `world`), rank 0 gave up (a negative count)
    or `deadline` passed (the last count). One store operation a poll, every 50 ms at first, then
    less often (up to every 0.5 s): a thousand ranks must not flood rank 0's store."""
    pause = 0.05
    while True:
        count = int(store.add(COUNT, 0))
        if count >= world or count < 0 or time.monotonic() >= deadline:
            return count
        sleep(max(0.0, min(pause, deadline - time.monotonic())))
        pause = min(0.5, pause * 1.3)


def give_up(store: Store) -> int:
    """Rank 0 at its deadline: every waiting rank stops; returns the count of ranks that were in."""
    return int(store.add(COUNT, -GAVE_UP)) + GAVE_UP


def acknowledge(store: Store) -> None:
    """A rank that saw rank 0 give up says so, so that rank 0 need not keep its store up longer."""
    store.add(ACK, 1)


def linger(store: Store, limit_s: float = LINGER_S, sleep: Callable[[float], None] = time.sleep) -> None:
    """Rank 0, having given up: keep the store up until every other rank that came in (a late one
    too) acknowledged, at most limit_s: a c10d store call to a store that is gone logs its native
    stack frames on that rank's stderr."""
    end = time.monotonic() + limit_s
    while int(store.add(ACK, 0)) < int(store.add(COUNT, 0)) + GAVE_UP - 1 and time.monotonic() < end:
        sleep(0.05)


def missing(store: Store, world: int) -> list[int]:
    """The ranks that never counted themselves in (one check a rank)."""
    return [r for r in range(world) if not store.check([HOST + str(r)])]


# ---- where a rank runs, as the launcher tells -------------------------------------------------


def _slurm_counts(value: str, limit: int) -> list[int] | None:
    """Tasks per node from '2(x3),1' -> [2, 2, 2, 1], at most `limit` nodes; None when unreadable."""
    counts: list[int] = []
    for part in filter(None, value.split(",")):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            return None
        counts += [int(m.group(1))] * min(int(m.group(2) or 1), limit - len(counts))
        if len(counts) >= limit:
            break
    return counts or None


def slurm_hosts(environ: Mapping[str, str], world: int) -> dict[int, str]:
    """Rank -> host from Slurm's node list and tasks per node (block, or cyclic where
    SLURM_DISTRIBUTION says so); {} when Slurm does not tell."""
    import hostlist

    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST") or ""
    per_node = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE") or ""
    try:
        nodes = hostlist.expand_hostlist(nodelist) if nodelist else []
    except hostlist.BadHostlist:
        return {}
    counts = _slurm_counts(per_node, len(nodes)) if nodes else None
    if not counts or len(counts) != len(nodes):
        return {}
    how = environ.get("SLURM_DISTRIBUTION", "block").split(":")[0]
    order: list[str] = []
    if how == "block":
        for node, n in zip(nodes, counts):
            order += [node] * min(n, world - len(order))
    elif how == "cyclic":
        left = list(counts)
        while len(order) < world and any(left):
            for i, node in enumerate(nodes):
                if left[i] and len(order) < world:
                    order.append(node)
                    left[i] -= 1
    return dict(enumerate(order))


def lab_hosts(hosts_file: str = "/etc/hosts") -> dict[int, str]:
    """Under `commbench lab run`, rank r runs on the lab's r-th host: the order of the lab's hosts
    file (lab/network.py writes it, lab/nsexec.py mounts it over /etc/hosts), localhost left out."""
    try:
        with open(hosts_file, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return {}
    names = [words[1] for words in (line.split() for line in lines)
             if len(words) >= 2 and not words[0].startswith("#") and words[1] != "localhost"]
    return dict(enumerate(names))


def launcher_hosts(launcher: str, world: int, environ: Mapping[str, str] | None = None) -> dict[int, str]:
    """Rank -> host as the launcher's environment tells it; {} where it does not (mpirun)."""
    env = os.environ if environ is None else environ
    given = [h.strip() for h in env.get("COMMBENCH_RANK_HOSTS", "").split(",")]
    if len(given) == world and all(given):
        return dict(enumerate(given))
    if launcher == "slurm":
        return slurm_hosts(env, world)
    if launcher == "lab":
        names = lab_hosts()
        return names if len(names) >= world else {}
    if launcher == "local":
        return dict.fromkeys(range(world), socket.gethostname())
    return {}


def block_hosts(absent: list[int], local_world: int, host_of: Callable[[int], str | None],
                world: int) -> dict[int, str]:
    """torchrun: a node's ranks are one block of local_world ranks; an absent rank's host is that
    of any rank of its block that arrived ({} for blocks none of whose ranks arrived)."""
    found: dict[int, str] = {}
    if local_world < 1:
        return found
    for block in sorted({r // local_world for r in absent}):
        ranks = range(block * local_world, min(world, (block + 1) * local_world))
        host = next((h for h in (host_of(r) for r in ranks if r not in absent) if h), None)
        if host:
            found.update({r: host for r in absent if r // local_world == block})
    return found


# ---- the diagnosis --------------------------------------------------------------------------


@dataclass(frozen=True)
class Joined:
    """The ranks that go on without the absent ones (their numbers at launch, ascending) and, on rank
    0, what it found of the absent ones and its line naming them."""

    ranks: list[int]
    absent: Absent | None = None
    line: str = ""

    def rank_of(self, rank: int) -> int:
        """`rank`'s number among the ranks that joined (the run's rank from now on)."""
        return self.ranks.index(rank)


@dataclass
class Absent:
    """The ranks that never joined, their hosts where known, and what each host's probe said."""

    ranks: list[int]
    world: int
    hosts: dict[int, str] = field(default_factory=dict)
    said: dict[str, str] = field(default_factory=dict)  # host -> probe(...), for the hosts probed
    addrs: dict[str, str] = field(default_factory=dict)  # host -> the address probed


def resolve(host: str, timeout: float = 2.0) -> str | None:
    """The IPv4 address of `host` within `timeout` (a lookup may block on DNS: a thread bounds it)."""
    box: list[str] = []

    def look() -> None:
        try:
            box.append(str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]))
        except (OSError, IndexError, UnicodeError):  # no such name, no address, a name IDNA refuses
            pass

    t = threading.Thread(target=look, name="commbench-resolve", daemon=True)
    t.start()
    t.join(timeout)
    return box[0] if box else None


def probe_hosts(absent: Absent, own_host: str, port: int) -> None:
    """Probe each absent rank's host (not this one's: its ranks are processes, not a link) on
    `port`, where nothing listens but rank 0's store: 'refused' means the host is up."""
    hosts = sorted({h for h in absent.hosts.values() if h != own_host})[:MAX_PROBED]
    if not hosts:
        return
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        addrs = dict(zip(hosts, pool.map(resolve, hosts)))
        found = {h: a for h, a in addrs.items() if a}
        said = dict(zip(found, pool.map(lambda h: probe(found[h], port, PROBE_S), found)))
    absent.addrs.update(found)
    absent.said.update(said)


_EVIDENCE = {
    "no answer": "no answer from it",
    "no route": "no route to it",
    "refused": "its host answers, but no rank came from it",
    "open": "its host answers, but no rank came from it",
}


def who(rank: int, absent: Absent) -> str:
    """An absent rank as rank 0 names it: with its host and its probe's evidence where known."""
    host = absent.hosts.get(rank)
    if host is None:
        return f"rank {rank}"
    said = absent.said.get(host)
    addr = absent.addrs.get(host)
    where = f"host {host}" + (f", {addr}" if addr and addr != host else "")
    return f"rank {rank} ({where}: {_EVIDENCE[said]})" if said in _EVIDENCE else f"rank {rank} (host {where[5:]})"


def _fix(absent: Absent) -> str:
    said = {absent.said.get(absent.hosts.get(r, ""), "") for r in absent.ranks}
    if said and said <= {"no answer", "no route"}:
        if len(absent.ranks) == absent.world - 1 and len(absent.said) > 1:
            return ("none of the other ranks joined and none of their hosts answers: this host's own link or "
                    "route is the likely cause (ip link, ibstat, ip route)")
        return "check its link (ip link, ibstat) and its route to MASTER_ADDR"
    if said & {"refused", "open"}:
        return ("check that the rank started there (the launcher's log) and that it can reach MASTER_ADDR "
                "(the firewall)")
    return "check that it started, its link (ip link, ibstat) and MASTER_ADDR"


def never_joined_line(absent: Absent, where: str, timeout: float, going_on: int = 0) -> str:
    """Rank 0's one line: who never joined the process group at `where` within --timeout, with
    each host's evidence, and what to check; `going_on`: how many ranks go on without them."""
    named = [who(r, absent) for r in absent.ranks[:MAX_NAMED]]
    more = len(absent.ranks) - len(named)
    listed = ", ".join(named) + (f" and {more} more" if more > 0 else "")
    count = "" if len(absent.ranks) == 1 else f"{len(absent.ranks)} of {absent.world} ranks, "
    on = (f"; the {going_on} ranks that did go on without {'it' if len(absent.ranks) == 1 else 'them'}, "
          f"renumbered 0-{going_on - 1} in order") if going_on else ""
    return f"{count}{listed} never joined the process group at {where} within {timeout:g} s{on}; {_fix(absent)}"


def joined_line(rank: int, where: str, timeout: float) -> str:
    """The short line of a rank that joined while another did not (rank 0 names who)."""
    return (f"rank {rank}: the process group at {where} did not form within {timeout:g} s (rank 0 names the "
            "ranks that never joined)")


# ---- the rendezvous, as the runner calls it -------------------------------------------------


def reach_rank0(env: RankEnv, timeout: float) -> float:
    """Before a rank builds its store client: reach rank 0's store port within --timeout, or raise
    RuntimeFailure with one line naming rank 0's address. Returns the rendezvous' deadline
    (time.monotonic). Rank 0 serves the store itself (under torchrun's agent store it connects too)."""
    deadline = time.monotonic() + timeout
    if env.rank != 0 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        said = reach(env.master_addr, env.master_port, deadline)
        if said is not None:
            raise RuntimeFailure(unreached_line(env.rank, env.master_addr, env.master_port, timeout, said))
    return deadline


def arrive(store: Store, env: RankEnv, timeout: float, deadline: float,
           quiet: Callable[[], None] = lambda: None, go_on: bool = False) -> Joined | None:
    """Count this rank in and wait for every rank until `deadline` (None: all came). Rank 0 then
    gives up for everyone and raises RuntimeFailure naming the ranks that never came; the others
    raise a short one (rank 0 names them), after `quiet` has stopped every other use of the store on
    this rank (the control plane's start-time gather) and before they tell rank 0 that it may go.
    With `go_on` (every rank runs the same workload, so all pass the same) two ranks or more that
    joined go on without the others instead: each returns the Joined ranks, rank 0's with the line."""
    where, world = f"{env.master_addr}:{env.master_port}", env.world_size
    try:
        count = register(store, env.rank, socket.gethostname())
        if count >= 0:
            count = await_all(store, world, deadline if env.rank == 0 else deadline + GRACE_S)
        if count >= world:
            return None
        if env.rank != 0:
            ranks = await_joined(store, deadline + GRACE_S + 2 * PROBE_S) if count < 0 and go_on else None
            if ranks and env.rank in ranks:
                return Joined(ranks)
            if count < 0:
                quiet()
                acknowledge(store)
            raise RuntimeFailure(joined_line(env.rank, where, timeout))
        joined = give_up(store)
        if joined >= world:  # the last one came in the meantime: go on
            store.add(COUNT, GAVE_UP)
            return None
        gone = missing(store, world)
        ranks = [r for r in range(world) if r not in gone]
        if go_on:  # said at once, before the probes: the others wait for it
            store.set(JOINED, ",".join(map(str, ranks)) if len(ranks) >= 2 else "")
    except RuntimeError:  # rank 0's store stopped answering (its process ended); ours is no RuntimeError
        raise RuntimeFailure(joined_line(env.rank, where, timeout)) from None
    absent = diagnose(store, env, gone)  # probes take seconds: the others read that rank 0 gave up meanwhile
    if go_on and len(ranks) >= 2:
        return Joined(ranks, absent, never_joined_line(absent, where, timeout, len(ranks)))
    linger(store)
    raise RuntimeFailure(never_joined_line(absent, where, timeout))


def await_joined(store: Store, deadline: float, sleep: Callable[[float], None] = time.sleep) -> list[int] | None:
    """A rank that saw rank 0 give up, in a run that may go on: the ranks that go on, as rank 0
    put them ([] when too few joined; None when rank 0 said nothing by `deadline`)."""
    while not store.check([JOINED]):
        if time.monotonic() >= deadline:
            return None
        sleep(0.05)
    return [int(r) for r in store.get(JOINED).decode().split(",") if r]


def diagnose(store: Store, env: RankEnv, ranks: list[int]) -> Absent:
    """Rank 0: the absent ranks' hosts where the launcher tells, and their hosts' probes."""
    absent = Absent(ranks, env.world_size)
    told = launcher_hosts(env.launcher, env.world_size)
    absent.hosts = {r: told[r] for r in absent.ranks if r in told}
    if env.launcher == "torchrun" and not absent.hosts:
        def host_of(r: int) -> str | None:
            return store.get(HOST + str(r)).decode(errors="replace")
        absent.hosts = block_hosts(absent.ranks, env.local_world_size, host_of, env.world_size)
    probe_hosts(absent, socket.gethostname(), env.master_port)
    return absent
