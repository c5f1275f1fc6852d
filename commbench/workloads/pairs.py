"""Bandwidth between every pair of hosts: point-to-point transfers scheduled as a round-robin
tournament (tournament.py), so the disjoint pairs of a round run at the same time and n hosts take
n-1 rounds (n with a bye for odd n), not n(n-1)/2 runs one after another.

sendrecv mode: per round, first the lower seat of every pair sends --size bytes to the other,
then the other way; one row per direction (src -> dst). bidir mode: both ends send and receive at
once (isend + irecv); one row per pair, its bandwidth per direction (each direction moved
--size bytes in the time). busbw = algbw = size / time (bus factor 1, as nccl-tests sendrecv).

Timing: every rank times its own side (Session.time_each) while its peers in other pairs do the
same; a pair's time per iteration is the slower of its two ends, so pairs never mix. A rank that
sits a round out (the bye, or a second rank of a host under --hosts-only) idles through it.

Faults: each pair runs on a process group of its own (harness/pairgroup.py) and the rounds are
kept in step over the control plane (harness/control.py), never over the run's process group, so
a dead link, host or rank fails only its own pairs. A failed link is a row with a status; rank 0
collects every pair's outcome from either end's mailbox, runs a confirmation round for the
suspects and names the culprit from the pattern (analysis/pairs/linkfaults.py, docs/PAIRS.md).

Rails (--per-rail): every link is measured once per rail (workloads/pairrails.py), rail after rail
within each round, so the rails of a host never compete; each row carries its rail, and each
(host, rail) is judged against the same rail on the other hosts (analysis/pairs/railrank.py).
"""

from __future__ import annotations

import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import psutil
import torch
import torch.distributed as dist

from commbench.analysis.pairs import faultstext, linkfaults, linkrank, railrank
from commbench.workloads import pairlinks, pairrails
from commbench.workloads.pairlinks import pattern
from commbench.workloads import tournament
from commbench.core.linkstatus import NEVER_JOINED
from commbench.core.errors import BadInput, RuntimeFailure
from commbench.harness.arrival import Absent, who
from commbench.core.launch import RankEnv
from commbench.core.options import RunOptions
from commbench.harness.session import Measurement, Session
from commbench.core.units import format_size

MODES = ("sendrecv", "bidir")


@dataclass
class PairsPlan(RunOptions):
    size_bytes: int = 64 << 20
    mode: str = "sendrecv"
    hosts_only: bool = False
    threshold: float = linkrank.DEFAULT_THRESHOLD
    workload: str = "pairs"
    per_rail: bool = False
    rails: list[str] | None = None  # --rails; None: every rail all hosts have
    capture: bool = False  # --capture: headers-only packet captures of the suspect links' confirmation round


def participants(hosts: list[str], hosts_only: bool) -> list[int]:
    """The ranks that take part: all of them, or with hosts_only the first rank of each host
    (local rank 0 under torchrun and Slurm)."""
    if not hosts_only:
        return list(range(len(hosts)))
    first: dict[str, int] = {}
    for rank, host in enumerate(hosts):
        first.setdefault(host, rank)
    return sorted(first.values())


def nobody_reaches_rank0(control, call) -> bool:
    """Whether every peer that answered `call` says rank 0 does not answer it either (their `rank0`
    keys, waited for at most --timeout: they reach the end of the main rounds about together)."""
    others = [r for r in call.answered if r not in (0, control.rank)]
    end = time.monotonic() + control.timeout
    while others and time.monotonic() < end:
        said = [control.read(r, "rank0") or ("unreachable" if not control.answers(r) else None) for r in others]
        if "answers" in said:
            return False
        if all(s == "unreachable" for s in said):  # (one that left since is no witness for rank 0 either)
            return True
        time.sleep(0.1)
    return not others


def endpoint_names(hosts: list[str], ranks: list[int]) -> dict[int, str]:
    """Host names when each host has one participant, else host/rank (as linkrank names them)."""
    per_host = Counter(hosts[r] for r in ranks)
    return {r: hosts[r] if per_host[hosts[r]] == 1 else f"{hosts[r]}/r{r}" for r in ranks}


@dataclass
class PairsWorkload:
    plan: PairsPlan
    failure_message: str | None = None
    absent: Absent | None = None  # rank 0: the ranks that never joined (the runner went on without them)
    goes_on_without_absent: ClassVar[bool] = True  # the links among the hosts that came are worth measuring

    def validate(self, world: int) -> None:
        if world < 2:
            raise BadInput(f"pairs needs at least 2 ranks (one per host), this run has {world}: "
                           "run under a launcher on several hosts, or raise --nproc")

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        if self.plan.per_rail and backend != "gloo":
            raise BadInput(f"--per-rail binds each pair's transfer to a rail through gloo, but this run uses "
                           f"{backend}: add --backend gloo (NCCL picks its interfaces per process: "
                           "NCCL_SOCKET_IFNAME)")
        need = self.plan.size_bytes * (3 if self.plan.check else 2)  # send, receive, expected
        if device.type == "cuda":
            have, ranks = torch.cuda.mem_get_info(device)[0], 1
        else:
            have, ranks = psutil.virtual_memory().available, 1 if self.plan.hosts_only else env.local_world_size
        if need * ranks > 0.9 * have:
            raise BadInput(f"pairs of {format_size(self.plan.size_bytes)} need about {format_size(need * ranks)} "
                           f"here but {format_size(have)} is free: lower --size"
                           + (" or use --no-check" if self.plan.check else ""))

    def total_points(self, world: int) -> int:
        return len(tournament.rounds(list(range(world)))) * self._phases()

    def _phases(self) -> int:
        return 2 if self.plan.mode == "sendrecv" else 1

    def run(self, session: Session, repetitions: range) -> bool:
        plan = self.plan
        hosts, here = self._gather(session)
        pairlinks.control_of(session).peers()  # every mailbox's address, while rank 0 can still be reached by all
        players = participants(hosts, plan.hosts_only)
        if len(players) < 2:
            raise BadInput(f"--hosts-only found {len(players)} host ({hosts[0]}): run on several hosts under a "
                           "launcher, or drop --hosts-only to pair the ranks of this host")
        chosen = pairrails.choose(here, hosts, players, plan.rails) if plan.per_rail else []
        rails: list[str | None] = list(chosen) if plan.per_rail else [None]
        names = endpoint_names(hosts, players)
        schedule = tournament.rounds(players)
        self._header(session, hosts, players, schedule, rails)
        if plan.per_rail and not plan.rails:
            for text in pairrails.partial(here, hosts, players, chosen):  # a rail some hosts lack: said, not hidden
                session.reporter.line(f"# Rail {text}: not on every host, not measured (name it with --rails to "
                                      "be told which host lacks it)")
        buffers = self._buffers(session, players)
        absent = self._absent_rows(session, hosts, players, rails)  # kept first: the verdict names their host
        tester = pairlinks.LinkTester(session, plan, hosts, names, buffers, players, here)
        for repetition in repetitions:
            for number, pairs in enumerate(schedule, 1):
                for phase in range(self._phases()):
                    links = [(a, b) if phase == 0 else (b, a) for a, b in pairs]
                    for rail in rails:  # one after the other: rails of a host never compete
                        where = f"{repetition}.{number}.{phase}" + (f".{pairlinks.rail_token(rail)}" if rail else "")
                        tester.step(where, links, repetition, number, rail=rail)
                    session.reporter.advance(f"round {number}/{len(schedule)}")
        if self._without_rank0(session, players):
            return False  # nobody can read this rank's outcomes any more: no plan or "done" will come
        tester.confirm(self._phases() == 1)
        tester.finish()
        return self._conclude(session, tester, absent)

    @staticmethod
    def _without_rank0(session: Session, players: list[int]) -> bool:
        """After the main rounds each rank says in its mailbox whether rank 0 answers it (`rank0`). A
        rank that rank 0's host does not answer either names its own host when it is the one cut off;
        else, when every peer it reaches says the same, the lowest of them says in one line that they
        still reach each other (rank 0 may be the one cut off, and cannot say it). True then: this
        rank is done (rank 0 can neither plan a confirmation round with it nor collect from it)."""
        control = pairlinks.control_of(session)
        if session.rank == 0 or session.rank not in players or control.suspended_s():
            return False
        call = None if control.answers(0) else control.roll_call(players)
        if call is None or 0 not in call.unreachable:  # hung or gone: its host answers
            control.put("rank0", "answers")
            return False
        control.put("rank0", "unreachable")
        if not call.cut_off and not nobody_reaches_rank0(control, call):
            return False
        line = (f"commbench: rank {session.rank} on {control.host}: {control.describe(call)}"
                if call.cut_off else control.together(call))
        if line is not None:
            print(line, file=sys.stderr, flush=True)
        return True

    def _gather(self, session: Session) -> tuple[list[str], list[dict[str, str]]]:
        """Every rank's host name and, with --per-rail, its rails (at start: the fabric is whole)."""
        mine = (socket.gethostname(), pairrails.local_rails() if self.plan.per_rail else {})
        everyone: list = [None] * session.world
        dist.all_gather_object(everyone, mine, group=session.group)
        return [h for h, _ in everyone], [r for _, r in everyone]

    def _header(self, session: Session, hosts: list[str], players: list[int], schedule, rails) -> None:
        plan, reporter = self.plan, session.reporter
        n_hosts = len({hosts[r] for r in players})
        reporter.line(f"# Pairs: {plan.mode} of {format_size(plan.size_bytes)} between {len(players)} "
                      f"{'hosts' if len(players) == n_hosts else f'ranks on {n_hosts} host(s)'}, {len(schedule)} "
                      f"rounds of disjoint pairs at once"
                      + (", each direction in turn" if plan.mode == "sendrecv" else
                         ", both directions at once (GB/s per direction)")
                      + (f"; rail after rail: {', '.join(rails)}" if rails != [None] else ""))
        reporter.line(f"#  {'round':>5}  {'link':<40} {'time (us)':>12} {'GB/s':>9} {'#wrong':>7}")

    def _absent_rows(self, session: Session, hosts: list[str], players: list[int],
                     rails: list[str | None]) -> list[dict]:
        """Rank 0: a row with status `never joined` for each link (on each rail) of a host none of
        whose ranks joined, to every host that did (both directions in sendrecv), written at once.
        Its ranks are numbered after the run's (the run's ranks were renumbered without it)."""
        if session.rank != 0 or self.absent is None:
            return []
        gone = {h: r for r, h in sorted(self.absent.hosts.items(), reverse=True) if h not in hosts}
        gone.update({f"rank {r} (host unknown)": r for r in self.absent.ranks if r not in self.absent.hosts})
        rows = []
        for n, (host, launched) in enumerate(sorted(gone.items(), key=lambda x: x[1])):
            text = f"{who(launched, self.absent)} never joined the run (its rank number at launch)"
            session.reporter.line(f"# Never joined: {host} (rank {launched} at launch): its links are stored with "
                                  f"status `{NEVER_JOINED}`")
            for p, rail in ((p, rail) for rail in rails for p in players):
                for link in ([(p, None)] if self.plan.mode == "bidir" else [(p, None), (None, p)]):
                    rows.append(self._absent_row(session, hosts, link, host, session.world + n, text, rail))
        session.write(rows)
        return rows

    def _absent_row(self, session: Session, hosts: list[str], link: tuple[int | None, int | None], host: str,
                    rank: int, text: str, rail: str | None) -> dict:
        """One never-joined link's row: None in `link` stands for the absent end."""
        (src, src_host), (dst, dst_host) = ((rank, host) if r is None else (r, hosts[r]) for r in link)
        row = session.record(collective=pairlinks.COLLECTIVE[self.plan.mode], dtype="uint8", op=None, root=-1,
                             size_bytes=self.plan.size_bytes, count=self.plan.size_bytes, in_place=False,
                             busbw_factor=1.0, m=Measurement([float("nan")], 0, None), repetition=0,
                             src_host=src_host, dst_host=dst_host, src_rank=src, dst_rank=dst, status=NEVER_JOINED,
                             error=text, confirm=None, rail=rail)
        row["samples_us"] = []
        return row

    def _buffers(self, session: Session, players: list[int]):
        if session.rank not in players:
            return None
        send = pattern(session.rank, self.plan.size_bytes, session.device)
        return send, torch.zeros(self.plan.size_bytes, dtype=torch.uint8, device=session.device)

    def _conclude(self, session: Session, tester: pairlinks.LinkTester, absent: list[dict]) -> bool:
        """Rank 0 ranks the links, names slow hosts and failed hosts or links; the others are done."""
        if session.rank != 0:
            return False
        rows = absent + tester.rows
        lines, slow = [], None
        if rows:
            import pandas as pd

            frame = pd.DataFrame(rows)
            runs = linkrank.links_by_run(frame)
            rails = railrank.by_rail(frame, self.plan.run_id) if self.plan.per_rail else None
            if rails:  # each (host, rail) against the same rail on the other hosts
                ranked = railrank.rank_rails(rails, self.plan.threshold)
                lines += railrank.render(ranked)
                slow = railrank.verdict(ranked)
            elif runs and not self.plan.per_rail:
                ranking = linkrank.rank_links(next(iter(runs.values())), self.plan.threshold)
                lines += linkrank.render(ranking)
                slow = linkrank.verdict(ranking)
            verdict = linkfaults.faults(frame)
            if verdict.failed:
                lines += faultstext.render_faults(verdict)
            lines += tester.capture_lines()  # --capture: the packets of the suspect links (paircapture.py)
        session.reporter.line("#")
        for line in lines:
            session.reporter.line(line)
        return self._outcome(tester, slow, verdict if rows else None)

    def _outcome(self, tester, slow: str | None, verdict) -> bool:
        """Exit 1 for wrong data, a slow host or a named fault; 3 (raised) when no verdict."""
        named = [] if verdict is None else verdict.named
        problems = []
        if tester.any_wrong:
            problems.append("some transfers arrived wrong (see the #wrong column): the link or the network "
                            "corrupts data")
        problems += [f"{c.kind} {c.label}: {c.status} ({'; '.join(c.evidence[:1])})" for c in named]
        if slow:
            problems.append(slow)
        if problems:
            self.failure_message = "commbench: " + "; also ".join(problems)
            return True
        if verdict is not None and verdict.exit_code == 3:
            raise RuntimeFailure(f"pairs reached no verdict: {verdict.undecided}")
        return False
