"""The control plane: coordination that outlives the data plane under test.

Every rank serves a small mailbox of its own (harness/mailbox.py: HTTP on a thread, so it answers
while the main thread waits inside a collective) and reads the others'. A rank
writes only to its own mailbox (heartbeats, where it is, what it measured, why it stopped), so a
rank cut off from some peers still keeps its books, and whoever can reach it reads them: a link
or rank that dies takes the collective with it, not the bookkeeping. The mailboxes' addresses are
exchanged once at start, through the store the process group rendezvouses on (rank 0's), while
the fabric is still whole. Nothing here runs inside a timed loop: heartbeats come from a
background thread and a workload marks only the boundaries of its points (enter / leave).

A rank whose mailbox does not answer is told apart by a TCP connection to its probe port (a socket
only probes use, harness/tcpprobe.py), which the kernel answers while the host is up, also while the process is stopped:
- hung: the connection opens, the process does not answer (SIGSTOP, a deadlock, a busy loop);
- gone: the connection is refused: the host is up, the process is not there (killed, crashed);
- unreachable: no answer at all (a link down, a blackhole route, a dead host).

Nothing here blocks past its deadline whatever the network does: the peers' addresses are gathered
by a thread of their own as the ranks publish them (bounded by --timeout; rank 0's store is never
read after that), every read of a mailbox and every probe has its timeout, and a rank asked to stop
(SIGINT / SIGTERM) whose main thread stays blocked in a call the network does not give back (a
collective on a dead link, a store read) leaves by itself seconds later (harness/stopguard.py).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta

import torch.distributed as dist

from commbench.core import linkstatus
from commbench.net.envinfo import iface_facts, traffic_iface
from commbench.harness import observer
from commbench.harness.mailbox import Mailbox, read_box
from commbench.harness.observer import OwnLink, Sight
from commbench.harness.stopguard import StopGuard
from commbench.harness.tcpprobe import host_answers, probe, probe_listener

HEARTBEAT_S = 0.5
ROLL_CALL_S = 2.0  # how long a roll call waits for heartbeats to move (several heartbeats)
PROBE_S = 2.0
REMOTE_S = 3.0  # a read from another rank's mailbox gives up after this long
STUCK_SLACK_S = 15.0  # beyond --timeout before a rank that the backend does not give back leaves
SUSPENDED_S = 5.0  # a heartbeat (due every HEARTBEAT_S) this late: the process itself did not run
GATHER_SLACK_S = 15.0  # beyond --timeout: how long the start-time gather looks for a rank's address
_PEERS = "commbench/ctl/peer/"


@dataclass(frozen=True)
class Peer:
    rank: int
    host: str
    addr: str
    port: int  # its mailbox
    pair_port: int  # the TCPStore its pairs rendezvous on (harness/pairgroup.py)
    probe_port: int  # a port only probes connect to (its backlog is theirs alone)


@dataclass
class RollCall:
    """Who answered the control plane within a roll call, and what the silent ones' hosts said."""

    answered: list[int] = field(default_factory=list)
    hung: list[int] = field(default_factory=list)  # the process exists but does not answer
    gone: list[int] = field(default_factory=list)  # its host answers, the process is not there
    unreachable: list[int] = field(default_factory=list)  # neither host nor process answers
    last: dict[int, dict] = field(default_factory=dict)  # each rank's mailbox as last read ({}: never)
    observer: int = -1  # the rank that called it
    sight: Sight | None = None  # the caller reaches nobody and judged itself (harness/observer.py)

    @property
    def cut_off(self) -> bool:
        """The caller is certain its own host or link is to blame: no silent peer is named."""
        return self.sight is not None and self.sight.certain

    @property
    def silent(self) -> list[int]:
        return sorted(self.hung + self.gone + self.unreachable)

    def status(self, rank: int) -> str | None:
        """The failure status a link to `rank` gets (docs/RESULTS.md): None when it answered."""
        if rank in self.unreachable:
            return linkstatus.UNREACHABLE
        if rank in self.hung:
            return linkstatus.TIMEOUT
        return linkstatus.ERROR if rank in self.gone else None

    def link_status(self, a: int, b: int) -> str | None:
        """The failure status of the link a <-> b when neither end reported it: its silent end's
        status (a before b); `unobserved` (core/linkstatus.py) when the caller is neither end and
        judged itself cut off: two ends it cannot reach are not unreachable on its word alone."""
        silent = [r for r in (a, b) if r in self.silent]
        if not silent:
            return None
        if self.sight is not None and self.observer not in (a, b):
            return linkstatus.UNOBSERVED
        return self.status(silent[0])


def _peer_of(rank: int, info: dict) -> Peer:
    return Peer(rank, str(info["host"]), str(info["addr"]), int(info["port"]), int(info["pair_port"]),
                int(info["probe_port"]))


def has_answered(before: dict | None, after: dict | None) -> bool:
    """A rank answered when its heartbeat moved between two reads, or it reported why it stopped."""
    if after is None:
        return False
    if after.get("report"):
        return True
    return before is not None and int(after.get("beat", 0)) > int(before.get("beat", 0))


class ControlPlane:
    """One rank's end of the control plane (see the module docstring)."""

    def __init__(self, main: dist.Store, rank: int, world: int, addr: str | None, timeout: float,
                 iface: str | None = None):
        self.main, self.rank, self.world, self.timeout = main, rank, world, timeout
        self.iface = iface  # this rank's interface towards the others, whose state judges it (observer.py)
        self._own = Mailbox()
        self._probe = probe_listener()
        # Pairs of which this rank is the lower end rendezvous here (a c10d store, as gloo needs).
        self.pair_store = dist.TCPStore("0.0.0.0", 0, 1, True, timeout=timedelta(seconds=timeout),
                                        wait_for_workers=False)
        self._stop = threading.Event()
        self._inside: tuple[int, str, float] | None = None
        self._seq = 0
        self._progress = (0, "the start", time.monotonic())  # the last point boundary: (seq, what, when)
        self._tick = time.monotonic()  # the last heartbeat
        self._naps: list[tuple[float, float]] = []  # (when it woke, seconds): times this process did not run
        self.host = socket.gethostname()
        me = {"host": self.host, "addr": addr or "127.0.0.1", "port": self._own.server_address[1],
              "pair_port": self.pair_store.port, "probe_port": self._probe.getsockname()[1]}
        main.set(_PEERS + str(rank), json.dumps(me))
        self._peers: dict[int, Peer] = {rank: _peer_of(rank, me)}
        self._gathered = threading.Event()  # the start-time gather of the peers' addresses has ended
        self._closing = threading.Event()  # close() was called (the threads of this module stop)
        self._guard: StopGuard | None = None
        threading.Thread(target=self._gather, name="commbench-peers", daemon=True).start()
        threading.Thread(target=self._heartbeat, name="commbench-heartbeat", daemon=True).start()

    @classmethod
    def serve(cls, master_addr: str, master_port: int, rank: int, world: int, addr: str | None,
              timeout: float) -> ControlPlane:
        """Rank 0 serves the main store on master_addr:master_port, the others connect to it. Under
        torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE) the agent serves it and every rank
        connects, with the attempt's prefix, as torch's own rendezvous does."""
        agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        main: dist.Store = dist.TCPStore(master_addr, master_port, world, rank == 0 and not agent,
                                         timeout=timedelta(seconds=timeout), wait_for_workers=False)
        if agent:
            main = dist.PrefixStore(f"/worker/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", main)
        return cls.on(main, rank, world, addr, timeout, traffic_iface(master_addr))

    @classmethod
    def on(cls, main: dist.Store, rank: int, world: int, addr: str | None, timeout: float,
           iface: str | None) -> ControlPlane:
        """A plane on the main store `main`, guarding this process's stop (harness/stopguard.py)."""
        plane = cls(main, rank, world, addr, timeout, iface)
        plane._guard = StopGuard.install(plane)
        return plane

    @property
    def blocked_in(self) -> str:
        """What this rank's main thread was last known to be doing: a point, or what follows one."""
        return self._progress[1]

    def group_store(self) -> dist.Store:
        """The store the process group under test rendezvouses on."""
        return dist.PrefixStore("commbench/pg", self.main)

    # ---- mailboxes ---------------------------------------------------------------------------

    def _gather(self) -> None:
        """The start-time gather (on a thread of its own): each rank's entry from the main store as
        soon as it is there, polled with `check` so that the store's connection is never held by a
        wait (the process group rendezvouses on it meanwhile); given up --timeout + GATHER_SLACK_S
        after the start (a rank that never published its address never joined either). The main
        store is never read after this."""
        budget, waited, pause = self.timeout + GATHER_SLACK_S, 0.0, 0.05
        while not self._closing.is_set():
            for r in range(self.world):
                if self._closing.is_set():  # close() between two reads: no store call after it
                    break
                if r not in self._peers and (entry := self._entry(r)) is not None:
                    self._peers[r] = entry
            if len(self._peers) >= self.world or waited >= budget:
                break
            self._closing.wait(pause)
            waited, pause = waited + pause, min(0.5, pause * 2)
        self._gathered.set()

    def _entry(self, rank: int) -> Peer | None:
        """`rank`'s published address, or None while it is not there (or the store fails)."""
        key = _PEERS + str(rank)
        try:
            check = getattr(self.main, "check", None)
            if check is not None and not check([key]):
                return None
            return _peer_of(rank, json.loads(self.main.get(key)))
        except Exception:  # noqa: BLE001 - absent (KeyError), a store error or a damaged entry: not there yet
            return None

    def gather(self, wait_s: float | None = None) -> list[int]:
        """Wait (at most wait_s, default --timeout + GATHER_SLACK_S) for the start-time gather of
        the peers' addresses; the ranks whose address is still unknown. For the runner, right after
        the group is joined, while every rank can reach rank 0."""
        self._gathered.wait(self.timeout + GATHER_SLACK_S if wait_s is None else wait_s)
        return [r for r in range(self.world) if r not in self._peers]

    def peers(self, wait_s: float | None = None) -> dict[int, Peer]:
        """Every rank's host, address and mailbox known so far: gathered once at start (never read
        from the store here). While the gather still runs this waits for it, at most wait_s (default
        the patience of a read, REMOTE_S or less): a rank whose address never came is left out."""
        if not self._gathered.is_set():
            self._gathered.wait(self._patience(REMOTE_S) if wait_s is None else wait_s)
        return dict(sorted(self._peers.items()))

    def _named(self) -> dict[int, Peer]:
        """Every rank's entry, a stand-in naming an unknown host for a rank whose address never came."""
        known = self.peers()
        return {r: known.get(r) or Peer(r, "an unknown host", "address unknown", 0, 0, 0) for r in range(self.world)}

    def put(self, key: str, value: str) -> None:
        """Into this rank's own mailbox (always reachable: it is served by this process)."""
        self._own.put(key, value)

    def _patience(self, longest: float) -> float:
        """How long to wait for an answer: `longest`, or less under a short --timeout, so that a
        roll call fits in the half of --timeout after a hang is noticed."""
        return max(0.2, min(longest, self.timeout / 10))

    def read(self, rank: int, key: str = "") -> str | None:
        """`key` from `rank`'s mailbox (all its keys as JSON with key ""); None when absent, or when
        the rank does not answer in time (REMOTE_S, less under a short --timeout)."""
        if rank == self.rank:
            return self._own.get(key)
        peer = self.peers().get(rank)
        if peer is None:
            return None  # its address never reached this rank: it cannot be read
        return read_box(peer.addr, peer.port, key, self._patience(REMOTE_S))

    def read_all(self, rank: int) -> dict[str, str] | None:
        text = self.read(rank, "")
        return None if text is None else json.loads(text)

    def _heartbeat(self) -> None:
        beats = 0
        while True:  # the first beat at once: a mailbox without one is not up yet
            beats += 1
            now = time.monotonic()
            if now - self._tick > SUSPENDED_S:
                self._naps.append((now, now - self._tick))
            self._tick = now
            self.put("beat", str(beats))
            if self._stop.wait(HEARTBEAT_S):
                return

    def suspended_s(self, within: float | None = None) -> float:
        """The longest time this process did not run (SIGSTOP, a debugger, a frozen host) among those
        that ended in the last `within` s (default --timeout + STUCK_SLACK_S, how long the failures it
        causes take to surface), or still go on (the heartbeat has not beaten since waking); 0 when
        none reaches half of --timeout, too short for peers to give up on this rank. Peers that went
        on meanwhile are no failure of theirs."""
        now = time.monotonic()
        within = self.timeout + STUCK_SLACK_S if within is None else within
        longest = max([now - self._tick] + [gap for woke, gap in list(self._naps) if now - woke <= within])
        return longest if longest >= max(SUSPENDED_S, self.timeout / 2) else 0.0

    def store_of(self, rank: int) -> dist.Store:
        """The pair store of `rank` (this rank's own for itself), for a pair's rendezvous."""
        if rank == self.rank:
            return self.pair_store
        peer = self.peers().get(rank)
        if peer is None:
            raise RuntimeError(f"rank {rank}'s address never reached rank {self.rank}: its pair store is unknown")
        return dist.TCPStore(peer.addr, peer.pair_port, 1, False, timeout=timedelta(seconds=self.timeout),
                             wait_for_workers=False)

    def answers(self, rank: int) -> bool:
        """Whether `rank`'s mailbox answers now (one read)."""
        return self.read(rank, "beat") is not None

    def barrier(self, name: str, ranks: list[int], deadline_s: float) -> list[int]:
        """Wait until every rank in `ranks` has reached `name` (put by each into its own mailbox),
        or no longer answers, or deadline_s passed. Returns the ranks that did not arrive."""
        self.put("at/" + name, "1")
        waiting = [r for r in ranks if r != self.rank]
        end = time.monotonic() + deadline_s
        while waiting and time.monotonic() < end:
            with ThreadPoolExecutor(max_workers=min(32, len(waiting))) as pool:
                boxes = dict(zip(waiting, pool.map(self.read_all, waiting)))
            waiting = [r for r, box in boxes.items() if box is not None and ("at/" + name) not in box]
            if waiting:
                time.sleep(0.05)
        self._progress = (self._seq, f"what follows the barrier {name}", time.monotonic())  # not stuck: it returned
        return waiting

    def relay(self, key: str, ranks: list[int], deadline_s: float, silence_s: float | None = None) -> str | None:
        """`key` from the first of `ranks` whose mailbox has it, polling until deadline_s, then kept
        in this rank's own mailbox too: a rank cut off from the one that wrote it (a blackholed link
        to rank 0) reads it from any peer that has it. Gives up early when none of `ranks` has
        answered for silence_s (default --timeout): this rank is cut off from all of them."""
        silence_s = self.timeout if silence_s is None else silence_s
        end = time.monotonic() + deadline_s
        heard = time.monotonic()
        while True:
            for r in ranks:
                box = self.read_all(r)
                if box is None:
                    continue
                heard = time.monotonic()
                if key in box:
                    self.put(key, box[key])
                    return box[key]
            now = time.monotonic()
            if now >= end or now - heard > silence_s:
                return None
            time.sleep(0.1)

    # ---- roll call ---------------------------------------------------------------------------

    def report(self, message: str) -> None:
        """This rank stopped: say why (a report counts as an answer in a roll call)."""
        self.put("report", message)

    def roll_call(self, ranks: list[int] | None = None) -> RollCall:
        """Each rank answers within a few heartbeats (its heartbeat moves, or it reported why it
        stopped) or its host is probed: hung, gone or unreachable. Ranks are asked at once."""
        ranks = [r for r in (range(self.world) if ranks is None else ranks) if r != self.rank]
        wait_s = self._patience(ROLL_CALL_S)
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(ranks)))) as pool:
            before = dict(zip(ranks, pool.map(self.read_all, ranks)))
            time.sleep(wait_s)
            after = dict(zip(ranks, pool.map(self.read_all, ranks)))
            silent = [r for r in ranks if not has_answered(before[r], after[r])]
            peers = self.peers()
            probes = dict(zip(silent, pool.map(lambda r: probe(peers[r].addr, peers[r].probe_port,
                                                               self._patience(PROBE_S)) if r in peers else "no answer",
                                               silent)))
        call = RollCall(answered=sorted([self.rank] + [r for r in ranks if r not in probes]),
                        last={r: after[r] or before[r] or {} for r in ranks}, observer=self.rank)
        for r, said in probes.items():
            {"open": call.hung, "refused": call.gone}.get(said, call.unreachable).append(r)
        self.put("sees", json.dumps(call.answered))  # who answered whom: the others judge themselves by it
        if call.unreachable:
            call.sight = self._judge_self(call, ranks)
        return call

    def own_link(self) -> OwnLink:
        """This rank's interface towards the others and its state now (net/envinfo.iface_facts)."""
        if not self.iface:
            return OwnLink(None, None)
        try:
            return OwnLink(self.iface, iface_facts(self.iface).get("operstate"))
        except Exception:  # noqa: BLE001 - a judgement without the link's state, never a failure of its own
            return OwnLink(self.iface, None)

    def _judge_self(self, call: RollCall, ranks: list[int]) -> Sight | None:
        """Before the unreachable peers are blamed: this rank's own link, its route to them, and what
        the peers it read say they reach (harness/observer.py). The ranks left out of a partial roll
        call are probed (at once: a host that is up answers at once) unless its own link is down."""
        link = self.own_link()
        reached = [r for r in call.answered + call.hung + call.gone if r != self.rank]
        peers = self.peers()
        rest = [r for r in range(self.world) if r != self.rank and r not in ranks and r in peers]
        if not link.down and not reached and rest:
            with ThreadPoolExecutor(max_workers=min(32, len(rest))) as pool:
                said = pool.map(lambda r: probe(peers[r].addr, peers[r].probe_port, self._patience(PROBE_S)), rest)
                reached = [r for r, s in zip(rest, said) if host_answers(s)]
        lost = call.unreachable + ([r for r in rest if r not in reached] if not reached else [])
        views = {r: json.loads(box["sees"]) for r, box in call.last.items() if box.get("sees")}
        routes = observer.no_route({r: peers[r].addr for r in lost if r in peers})
        return observer.judge(self.rank, lost, reached, views, link, routes)

    def together(self, call: RollCall) -> str | None:
        """A rank that answers others while some rank is unreachable: one line from the lowest of
        those that still reach each other (harness/observer.still_together), else None."""
        together = observer.still_together(self.rank, call.unreachable, call.answered)
        if together is None or call.sight is not None:
            return None
        peers = self._named()
        silent = ", ".join(f"rank {r} on {peers[r].host}" for r in call.unreachable)
        verb = "do not answer" if len(call.unreachable) > 1 else "does not answer"
        return (f"commbench: rank {self.rank} on {peers[self.rank].host}: {silent} {verb}; ranks "
                f"{', '.join(map(str, together))} still reach each other")

    def describe(self, call: RollCall) -> str:
        """One line: who did not answer and what that points at; or that every rank answered."""
        peers = self._named()
        if not call.silent:
            return "every rank answered the roll call (nothing hung or unreachable: see the backend's message)"
        if call.sight is not None and call.cut_off:
            return observer.line(self.rank, peers[self.rank].host, call.sight)
        parts = [f"rank {r} on {peers[r].host} ({peers[r].addr}) is unreachable: neither it nor its host answers "
                 "(a link down, a blackhole route or a dead host)" for r in call.unreachable]
        parts += [f"rank {r} on {peers[r].host} is hung: it does not answer but its process is there (stopped, "
                  "deadlocked or busy)" for r in call.hung]
        parts += [f"rank {r} on {peers[r].host} is gone: its host answers but the process is not there (killed "
                  "or crashed)" for r in call.gone]
        others = [r for r in call.answered if r != self.rank]
        if call.sight is not None:  # not certain: the others are named, and so is this rank's own host
            parts.append(observer.line(self.rank, peers[self.rank].host, call.sight))
        return "; ".join(parts) + (f"; ranks {', '.join(map(str, others))} answered" if others else "")

    # ---- naming a hang while it happens --------------------------------------------------------

    def enter(self, label: str) -> None:
        """Before a point's first call (never inside the timed loop): this rank is in point `seq`."""
        self._seq += 1
        self.put("at", str(self._seq))
        self._inside = (self._seq, label, time.monotonic())
        self._progress = (self._seq, label, time.monotonic())

    def leave(self) -> None:
        self._inside = None
        self._progress = (self._seq, f"what follows {self._progress[1]}", time.monotonic())

    def watch(self, say, fraction: float = 0.5) -> None:
        """Rank 0: when a point has waited `fraction` of --timeout, one line naming the ranks that
        have not entered it or do not answer (`say` prints it); the backend's timeout follows.
        Every rank: a point still not back STUCK_SLACK_S after --timeout while a peer is silent
        means the backend blocks on a dead socket (TCP retries for minutes): say so and leave."""
        threading.Thread(target=self._watchdog, args=(say, fraction * self.timeout), name="commbench-watchdog",
                         daemon=True).start()

    def _watchdog(self, say, after_s: float) -> None:
        warned, checked = 0, None
        while not self._stop.wait(0.25):
            inside, progress = self._inside, self._progress
            if inside and self.rank == 0 and inside[0] != warned and time.monotonic() - inside[2] >= after_s:
                warned = inside[0]
                say(self._hang_line(*inside))
            # Inside a point or between two (a check, a gather, a failure's report): no boundary
            # for --timeout and more while a peer is silent means the backend does not give back.
            idle = time.monotonic() - progress[2]
            if progress != checked and idle >= self.timeout + STUCK_SLACK_S:
                checked = progress
                self._leave_if_stuck(say, progress[1], idle)

    def _leave_if_stuck(self, say, label: str, waited: float) -> None:
        call = self.roll_call()
        if not call.silent:
            return  # every peer answers: a long point, not a dead one
        peers = self._named()
        asleep = self.suspended_s(within=waited)
        if asleep:
            self._leave(say, f"commbench: rank {self.rank} on {peers[self.rank].host}: in {label}, "
                             f"{self.absence(asleep)} ({self.who_answered(call)})")
        others = set(range(self.world)) - {self.rank}
        why = ("no other rank answers it: this rank's own link or host is the likely cause"
               if set(call.silent) == others and not call.cut_off else self.describe(call))
        self._leave(say, f"commbench: rank {self.rank} on {peers[self.rank].host}: {label} has not returned after "
                         f"{waited:.0f} s (--timeout {self.timeout:g} s) and {why}: "
                         "the backend is blocked on a dead link")

    @staticmethod
    def _leave(say, line: str) -> None:
        say(f"{line}; leaving (every finished row is already written)")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)

    def absence(self, asleep: float) -> str:
        """What a rank that did not run for `asleep` s (suspended_s) tells the user instead of blaming
        the peers it finds gone on waking."""
        longer = f", longer than --timeout {self.timeout:g} s" if asleep >= self.timeout else ""
        return (f"this process was suspended for {asleep:.0f} s (SIGSTOP, a debugger or a frozen host){longer}: "
                "the other ranks went on without it")

    def who_answered(self, call: RollCall) -> str:
        """Who answers now, by rank only: after this rank's own absence a silent peer may simply
        have finished, so no host is blamed."""
        def ranks(rs: list[int]) -> str:
            return f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"
        others = [r for r in call.answered if r != self.rank]
        parts = [f"{ranks(call.silent)} no longer answer{'' if len(call.silent) > 1 else 's'}"] if call.silent else []
        return "; ".join(parts + ([f"{ranks(others)} answered"] if others else []))

    def _hang_line(self, seq: int, label: str, started: float) -> str:
        peers = self._named()
        call = self.roll_call()
        behind = [] if call.cut_off else [r for r, box in call.last.items() if int(box.get("at", 0)) < seq]
        parts = [f"{label} has waited {time.monotonic() - started:.0f} s of --timeout {self.timeout:g} s"]
        if behind:
            parts.append("not entered by " + ", ".join(f"rank {r} on {peers[r].host}" for r in behind))
        parts.append(self.describe(call) if call.silent else "every rank answers the control plane (a slow or "
                     "stuck collective, not a lost rank)")
        return "commbench: hang: " + "; ".join(parts)

    def close(self) -> None:
        self._stop.set()
        self._closing.set()
        if self._guard is not None:
            self._guard.close()
        self._own.shutdown()
        self._own.server_close()
        self._probe.close()
