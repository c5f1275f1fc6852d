"""Parallel groups on every rank (`sweep --layout`/`--split`, docs/LAYOUTS.md): a process group for
every group of the chosen dimensions, each rank's group running its collective while every other
group runs its own (the concurrent pass), and with --solo each group alone in turn, the others
idle (A B B A); rank 0 gets every group's times in one gather a point, and makes a row per group
and kind of pass (group_rows). zero and buckets --layout time their step in the dp groups the
same way (measure).

The timing loop is the harness's own (Session.time_call) on the rank's group: the per-iteration
maximum and the per-rank columns are the group's, busbw is taken with the group's size. The groups
of a pass start together (a barrier of the world), and each fills --time-budget (or runs -n
iterations) rather than stopping at --precision: a group that stopped early would leave the others
running alone, and the pass would no longer be concurrent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from commbench.core.contention import contention
from commbench.core.grouplabel import group_label
from commbench.core.layout import GroupWork
from commbench.harness import faults
from commbench.harness.collectives import Buffers, CallArgs, Collective
from commbench.harness.data import count_wrong, fill
from commbench.harness.session import Measurement, RankTimes, Session, Timing


@dataclass(frozen=True)
class RankGroup:
    """This rank's group of one GroupWork: its index among the work's groups, its ranks (global, in
    the group's order), its process group and this rank's place in it."""

    work: GroupWork
    index: int
    ranks: tuple[int, ...]
    pg: Any  # torch's ProcessGroup
    local: int

    @property
    def size(self) -> int:
        return len(self.ranks)


def build(works: Sequence[GroupWork], rank: int) -> list[RankGroup]:
    """Every group's process group, made on every rank in the same order (torch requires it, member
    or not); this rank's group of each work, in the works' order. Every work's groups cover every
    rank once (a layout's dimension, a split's colors), so each rank has one of each."""
    made: dict[tuple[int, ...], Any] = {}
    mine: list[RankGroup] = []
    for work in works:
        for index, ranks in enumerate(work.groups):
            if ranks not in made:
                made[ranks] = dist.new_group(list(ranks))
            if rank in ranks:
                mine.append(RankGroup(work, index, ranks, made[ranks], ranks.index(rank)))
    return mine


def release(mine: Sequence[RankGroup]) -> None:
    """This rank's groups closed after a run that went well (each --env/--mtu setting and repetition
    builds its own; a broken group is left alone: its teardown can block on a dead link)."""
    for pg in {id(g.pg): g.pg for g in mine}.values():
        dist.destroy_process_group(pg)


def group_session(session: Session, group: RankGroup, watched: bool = True) -> Session:
    """`session` measuring on `group`: its loop's maxima and gathers over the group only, no counter
    gathers (their probe spans the world), and no early stop at --precision (see above). Not
    `watched`: no point marks on the control plane, whose marks are one rank's one point at a time
    (several dimensions time in threads of their own: concurrent_pass marks the pass as a whole)."""
    plan = dataclasses.replace(session.ctx.plan, precision=0.0)
    return dataclasses.replace(session, ctx=dataclasses.replace(session.ctx, plan=plan), group=group.pg,
                               wire=None, ops=None, warmup_done=None,
                               control=session.control if watched else None)


def check_args(group: RankGroup, root: int, op: str | None) -> CallArgs:
    """The collective's arguments in the group's own numbering: the inputs and the #wrong check are
    those of a run of the group's size (nccl-tests' split runs)."""
    return CallArgs(group.local, group.size, root, op, group.pg)


def bind(collective: Collective, bufs: Buffers, group: RankGroup, args: CallArgs) -> Callable[[], None]:
    """The call one iteration makes. torch names a root and a peer by its global rank, so the
    rooted collectives get the group's root there, and send/recv its own peers: a pipeline's stage
    sends to the next and receives from the one before (neighbouring stages, no wrap), other groups
    pass a ring as nccl-tests' sendrecv does."""
    if collective.name == "sendrecv":
        return _p2p(bufs, group)
    if collective.rooted:
        return collective.bind(bufs, dataclasses.replace(args, root=group.ranks[args.root]))
    return collective.bind(bufs, args)


def chain(group: RankGroup) -> bool:
    return group.work.dim == "pp"


def _p2p(bufs: Buffers, group: RankGroup) -> Callable[[], None]:
    i, n, ranks = group.local, group.size, group.ranks
    last = chain(group)
    to = ranks[i + 1] if i + 1 < n else (None if last else ranks[0])
    frm = ranks[i - 1] if i > 0 else (None if last else ranks[-1])
    ops = ([dist.P2POp(dist.isend, bufs.send, to, group=group.pg)] if to is not None else []) + (
        [dist.P2POp(dist.irecv, bufs.recv, frm, group=group.pg)] if frm is not None else [])

    def step() -> None:
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    return step


def wrong_in_group(sub: Session, collective: Collective, layout, bufs: Buffers, group: RankGroup,
                   args: CallArgs, dtype, in_place: bool, call: Callable[[], None]) -> int:
    """nccl-tests' #wrong over the group's ranks: the inputs again, one call, each rank's output
    checked (a pipeline's first stage receives nothing), summed over the group."""
    fill(bufs, args, dtype, in_place)
    call()
    if sub.device.type == "cuda":
        torch.cuda.synchronize(sub.device)
    if faults.corrupts_output(group.ranks[group.local]):
        bufs.recv.view(-1)[0] += 1
    first_stage = collective.name == "sendrecv" and chain(group) and group.local == 0
    own = 0 if first_stage else count_wrong(collective, layout, bufs, args, dtype)
    return sub.sum_over_ranks(own)


@dataclass
class Passes:
    """One group's passes of one kind at one point: iteration times (the group's max over its
    ranks, s) in pass order, and each pass's per-rank medians (index = place in the group)."""

    samples_s: list[float] = dataclasses.field(default_factory=list)
    iters: int = 0
    warmup: int | None = None
    rank_time_s: list[list[float]] = dataclasses.field(default_factory=list)
    rank_skew_s: list[list[float]] = dataclasses.field(default_factory=list)

    def add(self, timing: Timing, warmup: int | None) -> None:
        self.samples_s += timing.samples_s
        self.iters += timing.iters
        self.warmup = warmup if self.warmup is None else self.warmup
        self.rank_time_s.append(timing.ranks.time_s)
        if timing.ranks.skew_s is not None:
            self.rank_skew_s.append(timing.ranks.skew_s)


@dataclass(frozen=True)
class Job:
    """One dimension's part of a concurrent pass on this rank: its group's session and call."""

    sub: Session
    call: Callable[[], None]
    label: str
    into: Passes


def concurrent_pass(session: Session, jobs: Sequence[Job]) -> None:
    """Every group of every dimension at once: one barrier of the world, then each group its own
    timing loop. A rank in groups of several dimensions (a tp and a dp group) runs each in a thread
    of its own, on a CUDA stream of its own (on one stream NCCL's calls would queue behind each
    other); torch's collectives let go of the GIL while they wait."""
    dist.barrier(group=_world(session))
    if len(jobs) == 1:
        done = [_timed(jobs[0])]
    else:
        control = session.control  # the threads' loops are unmarked: the pass as a whole is one point
        if control is not None:
            control.enter(" + ".join(job.label for job in jobs) + " (every group at once)")
        try:
            with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                done = [f.result() for f in [pool.submit(_timed, job) for job in jobs]]
        finally:
            if control is not None:
                control.leave()
    for job, (timing, warmup) in zip(jobs, done):
        job.into.add(timing, warmup)


def _timed(job: Job) -> tuple[Timing, int | None]:
    label = f"{job.label} (every group at once)"
    if job.sub.device.type != "cuda":
        return job.sub.time_call(job.call, label), job.sub.warmup_done
    device = job.sub.device
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))  # the buffers were filled on the default stream
    with torch.cuda.stream(stream):
        timed = job.sub.time_call(job.call, label), job.sub.warmup_done
    torch.cuda.current_stream(device).wait_stream(stream)  # the #wrong check reads the outputs there
    return timed


def solo_pass(session: Session, sub: Session, group: RankGroup, call: Callable[[], None], label: str,
              into: Passes) -> None:
    """Each group alone, in index order: its ranks time while the others wait in a barrier of the
    world, which lets the next group start once this one is done."""
    for index in range(len(group.work.groups)):
        if index == group.index:
            into.add(sub.time_call(call, f"{label} (group {index} alone)"), sub.warmup_done)
        dist.barrier(group=_world(session))


def gather_passes(session: Session, group: RankGroup, mine: dict[bool, Passes], wrong: int | None
                  ) -> list[dict] | None:
    """Rank 0: every group's passes ({index, wrong, passes: {concurrent: Passes}}, in index order),
    from each group's first rank, in one gather over the world; None elsewhere."""
    item = {"index": group.index, "wrong": wrong, "passes": mine} if group.local == 0 else None
    everyone: list[dict | None] = [None] * dist.get_world_size(_world(session))
    dist.all_gather_object(everyone, item, group=_world(session))
    if session.rank != 0:
        return None
    return sorted((e for e in everyone if e is not None), key=lambda e: e["index"])


def _world(session: Session) -> Any:
    """The group every rank is in: the session's (None: the default one; a fresh one per --env/--mtu
    setting)."""
    return session.group


def measure(session: Session, group: RankGroup, sub: Session, call: Callable[[], None], label: str, solo: bool,
            check: Callable[[], int] | None = None) -> tuple[list[dict] | None, int | None]:
    """One point of a workload that runs one call in each group of one dimension (zero, buckets):
    every group at once, with `solo` each alone too (A B B A, as sweep's), then `check` (the
    group's #wrong, summed over its ranks) once; rank 0 gets every group's passes (gather_passes,
    None elsewhere), and every rank its group's #wrong."""
    passes = {True: Passes(), False: Passes()}
    job = Job(sub, call, label, passes[True])
    concurrent_pass(session, [job])
    if solo:
        for _ in range(2):
            solo_pass(session, sub, group, call, label, passes[False])
        concurrent_pass(session, [job])
    wrong = check() if check is not None else None
    return gather_passes(session, group, passes, wrong), wrong


def group_rows(session: Session, work: GroupWork, results: list[dict], exits_together: bool,
               record: Callable[[int, Measurement], dict]) -> list[dict]:
    """Rank 0: a row per group and kind of pass from gather_passes' results; `record(index, m)`
    makes the workload's row of group `index`, and the group's columns replace the world's. The
    concurrent row carries the contention factor when there are solo passes."""
    rows = []
    for e in results:
        passes: dict[bool, Passes] = e["passes"]
        factor = (contention(passes[True].samples_s, passes[False].samples_s).factor
                  if passes[False].samples_s else None)
        for concurrent in (True, False):
            p = passes[concurrent]
            if not p.samples_s:
                continue
            row = record(e["index"], Measurement(p.samples_s, p.iters, e["wrong"], rank_times(p, exits_together),
                                                 None))
            row.update(group_columns(session, work, e["index"], concurrent, factor if concurrent else None),
                       warmup=p.warmup)
            rows.append(row)
    return rows


def rank_times(p: Passes, exits_together: bool) -> RankTimes:
    """Each rank's own median over the passes of a kind: the passes' mean (each its own loop); the
    skew only where the call's ranks leave it together."""
    def mean(lists: list[list[float]]) -> list[float]:
        return [sum(v) / len(v) for v in zip(*lists)]

    skew = mean(p.rank_skew_s) if exits_together and p.rank_skew_s else None
    return RankTimes(mean(p.rank_time_s), skew)


def group_columns(session: Session, work: GroupWork, index: int, concurrent: bool, factor: float | None) -> dict:
    """The columns a group's row holds instead of the world's: its size and hosts, the per-rank lists
    by place in the group (docs/RESULTS.md, group_index)."""
    ctx, ranks = session.ctx, work.groups[index]
    host_of = [ctx.hosts[ctx.rank_host[r]] for r in ranks] if ctx.rank_host else []
    hosts = list(dict.fromkeys(host_of))
    return {"world_size": len(ranks), "nnodes": len(hosts) or None,
            "ranks_per_node": max((host_of.count(h) for h in hosts), default=None),
            "rank_cpus": [ctx.rank_cpus[r] for r in ranks] if ctx.rank_cpus else None,
            "rank_host": [ctx.rank_host[r] for r in ranks] if ctx.rank_host else None,
            "group_dim": work.dim, "group_index": work.label(index), "group_ranks": ",".join(map(str, ranks)),
            "group_hosts": ",".join(hosts), "concurrent": concurrent, "contention": factor}


def row_suffix(row: dict) -> str:
    """The end of a zero/buckets table line for a group's row: its group and, with --solo, its
    contention factor ('' for a row of no group)."""
    if not row.get("group_dim"):
        return ""
    factor = row.get("contention")
    return (f"   {group_label(row['group_dim'], row['group_index'], True, row['group_ranks'])}"
            + (f" contention {factor:.2f}" if factor is not None else ""))
