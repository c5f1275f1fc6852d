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
"""

from __future__ import annotations

import socket
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import psutil
import torch
import torch.distributed as dist

from commbench.harness import faults
from commbench.analysis import linkrank
from commbench.workloads import tournament
from commbench.core.errors import BadInput
from commbench.core.launch import RankEnv
from commbench.core.options import RunOptions
from commbench.harness.runner import Measurement, Session
from commbench.core.units import format_size

MODES = ("sendrecv", "bidir")
COLLECTIVE = {"sendrecv": "sendrecv", "bidir": "sendrecv_bidir"}
PATTERN_PERIOD = 251  # prime: a stream shifted by a few bytes, or another rank's data, does not match


@dataclass
class PairsPlan(RunOptions):
    size_bytes: int = 64 << 20
    mode: str = "sendrecv"
    hosts_only: bool = False
    threshold: float = linkrank.DEFAULT_THRESHOLD
    workload: str = "pairs"


def participants(hosts: list[str], hosts_only: bool) -> list[int]:
    """The ranks that take part: all of them, or with hosts_only the first rank of each host
    (local rank 0 under torchrun and Slurm)."""
    if not hosts_only:
        return list(range(len(hosts)))
    first: dict[str, int] = {}
    for rank, host in enumerate(hosts):
        first.setdefault(host, rank)
    return sorted(first.values())


def endpoint_names(hosts: list[str], ranks: list[int]) -> dict[int, str]:
    """Host names when each host has one participant, else host/rank (as linkrank names them)."""
    per_host = Counter(hosts[r] for r in ranks)
    return {r: hosts[r] if per_host[hosts[r]] == 1 else f"{hosts[r]}/r{r}" for r in ranks}


def pattern(rank: int, numel: int, device) -> torch.Tensor:
    """What `rank` sends: bytes 1..251 in a rank-dependent order, built without an index tensor
    (an int64 arange of a 1 GiB message would need 8 GiB)."""
    base = (torch.arange(PATTERN_PERIOD, dtype=torch.int64) * 7 + 13 * rank) % PATTERN_PERIOD + 1
    return base.to(torch.uint8).repeat(-(-numel // PATTERN_PERIOD))[:numel].to(device)


@dataclass
class PairsWorkload:
    plan: PairsPlan
    failure_message: str | None = None

    def validate(self, world: int) -> None:
        if world < 2:
            raise BadInput(f"pairs needs at least 2 ranks (one per host), this run has {world}: "
                           "run under a launcher on several hosts, or raise --nproc")

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
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

    def run(self, session: Session) -> bool:
        plan, rank = self.plan, session.rank
        hosts: list[str] = [None] * session.world  # type: ignore[list-item]
        dist.all_gather_object(hosts, socket.gethostname(), group=session.group)
        players = participants(hosts, plan.hosts_only)
        if len(players) < 2:
            raise BadInput(f"--hosts-only found {len(players)} host ({hosts[0]}): run on several hosts under a "
                           "launcher, or drop --hosts-only to pair the ranks of this host")
        names = endpoint_names(hosts, players)
        schedule = tournament.rounds(players)
        reporter = session.reporter
        n_hosts = len({hosts[r] for r in players})
        reporter.line(f"# Pairs: {plan.mode} of {format_size(plan.size_bytes)} between {len(players)} "
                      f"{'hosts' if len(players) == n_hosts else f'ranks on {n_hosts} host(s)'}, {len(schedule)} "
                      f"rounds of disjoint pairs at once"
                      + (", each direction in turn" if plan.mode == "sendrecv" else
                         ", both directions at once (GB/s per direction)"))
        reporter.line(f"#  {'round':>5}  {'link':<40} {'time (us)':>12} {'GB/s':>9} {'#wrong':>7}")

        send = recv = None
        if rank in players:
            send = pattern(rank, plan.size_bytes, session.device)
            recv = torch.zeros(plan.size_bytes, dtype=torch.uint8, device=session.device)
        rows: list[dict] = []
        any_wrong = False
        for repetition in range(plan.repetitions):
            for number, pairs in enumerate(schedule, 1):
                for phase in range(self._phases()):
                    links = [(a, b) if phase == 0 else (b, a) for a, b in pairs]
                    call, peer, receives = self._bind(links, rank, send, recv, session.group)
                    per_rank, iters = session.time_each(call)
                    wrong = self._check(session, call, peer, receives, recv) if plan.check else None
                    for src, dst in links:
                        samples = [max(x, y) for x, y in zip(per_rank[src], per_rank[dst])]
                        bad = None if wrong is None else wrong[dst] + (wrong[src] if plan.mode == "bidir" else 0)
                        any_wrong = any_wrong or bool(bad)
                        if rank != 0:
                            continue
                        row = session.record(collective=COLLECTIVE[plan.mode], dtype="uint8", op=None, root=-1,
                                             size_bytes=plan.size_bytes, count=plan.size_bytes, in_place=False,
                                             busbw_factor=1.0, m=Measurement(samples, iters, bad),
                                             repetition=repetition, src_host=hosts[src], dst_host=hosts[dst],
                                             src_rank=src, dst_rank=dst)
                        rows.append(row)
                        arrow = "<->" if plan.mode == "bidir" else "->"
                        reporter.line(f"   {number:5d}  {f'{names[src]} {arrow} {names[dst]}':<40} "
                                      f"{row['time_us']:12.1f} {row['busbw_GBps']:9.4f} "
                                      f"{'N/A' if bad is None else bad:>7}")
                    session.write(rows[-len(links):] if rank == 0 else [])
                    reporter.advance(f"round {number}/{len(schedule)}")
        slow = self._conclude(session, rows)
        if any_wrong:
            self.failure_message = ("commbench: some transfers arrived wrong (see the #wrong column): the link or "
                                    "the network corrupts data" + (f"; also {slow}" if slow else ""))
        elif slow:
            self.failure_message = f"commbench: {slow}"
        return any_wrong or bool(slow)

    def _conclude(self, session: Session, rows: list[dict]) -> str | None:
        """Rank 0 ranks the links and names slow hosts; every rank learns whether there are any."""
        message = None
        if session.rank == 0 and rows:
            import pandas as pd

            links = next(iter(linkrank.links_by_run(pd.DataFrame(rows)).values()))
            ranking = linkrank.rank_links(links, self.plan.threshold)
            session.reporter.line("#")
            for line in linkrank.render(ranking):
                session.reporter.line(line)
            message = linkrank.verdict(ranking)
        box = [message]
        dist.broadcast_object_list(box, src=0, group=session.group)
        return box[0]

    def _bind(self, links: list[tuple[int, int]], rank: int, send, recv,
              group) -> tuple[Callable[[], None], int | None, bool]:
        """This rank's side of the round: (the call, its peer, whether it receives)."""
        for src, dst in links:
            if self.plan.mode == "bidir" and rank in (src, dst):
                peer = dst if rank == src else src
                ops = [dist.P2POp(dist.isend, send, peer, group), dist.P2POp(dist.irecv, recv, peer, group)]

                def both() -> None:
                    for work in dist.batch_isend_irecv(ops):
                        work.wait()
                return both, peer, True
            if rank == src:
                return (lambda: dist.send(send, dst, group=group)), dst, False
            if rank == dst:
                return (lambda: dist.recv(recv, src, group=group)), src, True
        return (lambda: None), None, False

    def _check(self, session: Session, call, peer: int | None, receives: bool, recv) -> list[int]:
        """One more transfer into a cleared buffer; the receiver counts bytes that differ from
        what its peer sends. Returns every rank's count."""
        mine = 0
        if receives:
            recv.zero_()
        call()
        if receives:
            if session.device.type == "cuda":
                torch.cuda.synchronize(session.device)
            if faults.corrupts_output(session.rank):
                recv[0] += 1
            mine = int((recv != pattern(peer, recv.numel(), session.device)).sum().item())
        counts = torch.tensor([mine], dtype=torch.int64, device=session.device)
        everyone = [torch.empty_like(counts) for _ in range(session.world)]
        dist.all_gather(everyone, counts, group=session.group)
        return [int(t.item()) for t in everyone]
