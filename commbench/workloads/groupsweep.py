"""The size sweep in parallel groups (`sweep --layout`/`--split`, docs/LAYOUTS.md): at every size,
every group of every named dimension runs its collective at once (harness/groups.py), with --solo
each group alone too (A B B A); a row per group and kind of pass, a live line per point and
dimension naming its slowest group, the groups' aggregate bytes a second and, with --solo, its
contention factor; after the run, the slowest groups and their late ranks.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from commbench.core import stragglers
from commbench.core.contention import Contention, aggregate_bps, contention
from commbench.core.grouplabel import group_label
from commbench.core.layout import GroupWork
from commbench.core.units import format_size
from commbench.core.vocab import Layout
from commbench.harness import groups as grouping
from commbench.harness.collectives import BY_NAME, Buffers, CallArgs, Collective
from commbench.harness.console import bw
from commbench.harness.data import allocate, fill
from commbench.harness.dtypes import DType, get_dtype
from commbench.harness.groups import Passes, RankGroup
from commbench.harness.plan import SweepPlan
from commbench.harness.session import Measurement, Session

_HEAD = (f"#{'size':>11s} {'count':>11s} {'type':>8s} {'redop':>6s} {'place':>5s}  {'slowest group':<22s} "
         f"{'time':>9s} {'busbw':>8s} {'median':>8s} {'aggregate':>10s}")
_UNITS = (f"#{'(B)':>11s} {'(elements)':>11s} {'':>8s} {'':>6s} {'':>5s}  {'':<22s} {'(us)':>9s} {'(GB/s)':>8s} "
          f"{'(GB/s)':>8s} {'(GB/s)':>10s}")


def kept_sizes(plan: SweepPlan, collective: Collective, sizes: Iterable[int]) -> list[int]:
    """The requested sizes every group measures, in lockstep: those that round to a new, non-empty
    point (plan.points' rule) for every group size of the work (a split's colors may differ)."""
    itemsize = get_dtype(plan.dtype).itemsize
    seen: dict[int, set[int]] = {n: set() for n in sizes}
    kept = []
    for requested in plan.sizes:
        lays = {n: collective.for_size(requested, itemsize, n, 0) for n in seen}
        if all(lay.send_numel and lay.recv_numel and lay.size_bytes(itemsize) not in seen[n]
               for n, lay in lays.items()):
            kept.append(requested)
            for n, lay in lays.items():
                seen[n].add(lay.size_bytes(itemsize))
    return kept


def total_points(plan: SweepPlan, works: Sequence[GroupWork]) -> int:
    return sum(len(kept_sizes(plan, BY_NAME[w.collective], {len(g) for g in w.groups}))
               * len(plan.placements_for(BY_NAME[w.collective])) for w in works)


def run_groups(session: Session, plan: SweepPlan, works: Sequence[GroupWork], repetitions: range,
               extra: dict) -> bool:
    """Every point of every work, repetition after repetition; True if any output was wrong."""
    mine = grouping.build(works, session.rank)
    first = len(session.writer.rows) if session.writer is not None else 0  # this call's rows (a setting's pass)
    any_wrong = False
    for repetition in repetitions:
        any_wrong = _repetition(session, plan, mine, repetition, extra) or any_wrong
    grouping.release(mine)
    if session.writer is not None:
        rows = session.writer.rows[first:]
        for line in slowest_lines(rows) + group_straggler_lines(rows, session):
            session.reporter.line(line)
    return any_wrong


def slowest_lines(rows: Sequence[dict]) -> list[str]:
    """Per dimension: how often each group was the slowest of a concurrent pass (the lowest busbw
    at a point), the most often first, and with --solo its median contention factor over them."""
    points: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("group_dim") and r["concurrent"]:
            key = (r["group_dim"], r["collective"], r["size_bytes"], r["in_place"], r["repetition"], r.get("settings"))
            points.setdefault(key, []).append(r)
    lines = []
    for dim in dict.fromkeys(k[0] for k in points):
        mine = [p for k, p in points.items() if k[0] == dim]
        counts = Counter(min(p, key=lambda r: r["busbw_GBps"])["group_index"] for p in mine)
        ranks = {r["group_index"]: r["group_ranks"] for p in mine for r in p}
        shown = ", ".join(f"{dim}{g} [{ranks[g]}] at {n}" for g, n in counts.most_common())
        lines.append(f"# {dim}: the slowest group at {len(mine)} points: {shown}{_contention_text(mine)}")
    return lines


def _contention_text(points: list[list[dict]]) -> str:
    by_group: dict[int, list[float]] = {}
    for p in points:
        for r in p:
            if r.get("contention") is not None:
                by_group.setdefault(r["group_index"], []).append(r["contention"])
    if not by_group:
        return ""
    shown = ", ".join(f"{g}: {statistics.median(v):.2f}" for g, v in sorted(by_group.items()))
    return f"; median contention by group {shown}"


def shared_points(plan: SweepPlan, works: Sequence[GroupWork]) -> list[tuple[int, tuple[tuple[int, bool], ...]]]:
    """(requested size, the (work, in place) pairs that run together) in the grid's order: at each
    size every work that keeps it runs its first placement together with the others' first, then
    its second with their second (all_reduce runs in place only and send/recv out of place only,
    yet they run together)."""
    kept = [set(kept_sizes(plan, BY_NAME[w.collective], {len(g) for g in w.groups})) for w in works]
    placements = [plan.placements_for(BY_NAME[w.collective]) for w in works]
    out: list[tuple[int, tuple[tuple[int, bool], ...]]] = []
    for requested in plan.sizes:
        for k in range(2):
            active = tuple((i, p[k]) for i, p in enumerate(placements) if requested in kept[i] and k < len(p))
            if active:
                out.append((requested, active))
    return out


def _repetition(session: Session, plan: SweepPlan, mine: list[RankGroup], repetition: int, extra: dict) -> bool:
    for line in header_lines([g.work for g in mine], plan, repetition):
        session.reporter.line(line)
    subs = [grouping.group_session(session, g, watched=len(mine) == 1) for g in mine]
    any_wrong = False
    for requested, active in shared_points(plan, [g.work for g in mine]):
        groups = [(mine[i], subs[i], in_place) for i, in_place in active]
        any_wrong = _point(session, plan, groups, requested, repetition, extra) or any_wrong
    session.reporter.line(f"# Groups concluded: {', '.join(f'{g.work.dim} {g.work.collective}' for g in mine)}")
    return any_wrong


def header_lines(works: Sequence[GroupWork], plan: SweepPlan, repetition: int) -> list[str]:
    parts, shown = [], []
    for work in works:
        sizes = sorted({len(g) for g in work.groups})
        count = f"{len(work.groups)} groups" if len(work.groups) > 1 else "1 group"
        parts.append(f"{work.dim} {work.collective}, {count} of {'/'.join(map(str, sizes))} ranks")
        shown.append(f"#   {work.dim} " + " ".join(f"{work.label(i)}:[{','.join(map(str, g))}]"
                                                   for i, g in enumerate(work.groups)))
    solo = "; with each alone too (--solo: A B B A)" if plan.solo else ""
    rep = f"  (repetition {repetition + 1} of {plan.repetitions})" if plan.repetitions > 1 else ""
    return [f"# Groups starting: {'; '.join(parts)}, all at once{solo}{rep}", *shown, _HEAD, _UNITS]


@dataclass
class _Setup:
    """One group's part of a point on this rank."""

    group: RankGroup
    sub: Session
    collective: Collective
    layout: Layout
    bufs: Buffers
    args: CallArgs
    call: Callable[[], None]
    label: str
    passes: dict[bool, Passes]
    in_place: bool


def _setup(session: Session, plan: SweepPlan, group: RankGroup, sub: Session, dtype: DType, requested: int,
           in_place: bool) -> _Setup:
    collective = BY_NAME[group.work.collective]
    layout = collective.for_size(requested, dtype.itemsize, group.size, group.local)
    bufs = allocate(collective, layout, dtype, in_place, session.device)
    args = grouping.check_args(group, plan.root, plan.op if collective.reduces else None)
    fill(bufs, args, dtype, in_place)
    label = f"{group.work.dim} {collective.name} {format_size(layout.size_bytes(dtype.itemsize))}"
    return _Setup(group, sub, collective, layout, bufs, args, grouping.bind(collective, bufs, group, args), label,
                  {True: Passes(), False: Passes()}, in_place)


def _point(session: Session, plan: SweepPlan, groups: list[tuple[RankGroup, Session, bool]], requested: int,
           repetition: int, extra: dict) -> bool:
    """One point: the passes (A, with --solo B B A), the #wrong check, every group's rows and a
    live line per work on rank 0."""
    dtype = get_dtype(plan.dtype)
    setups = [_setup(session, plan, g, sub, dtype, requested, in_place) for g, sub, in_place in groups]
    jobs = [grouping.Job(s.sub, s.call, s.label, s.passes[True]) for s in setups]
    grouping.concurrent_pass(session, jobs)
    if plan.solo:  # A B B A: drift over the point's time falls on both kinds alike
        for _ in range(2):
            for s in setups:
                grouping.solo_pass(session, s.sub, s.group, s.call, s.label, s.passes[False])
        grouping.concurrent_pass(session, jobs)
    any_wrong = False
    for s in setups:
        wrong = (grouping.wrong_in_group(s.sub, s.collective, s.layout, s.bufs, s.group, s.args, dtype, s.in_place,
                                         s.call) if plan.check else None)
        results = grouping.gather_passes(session, s.group, s.passes, wrong)
        session.reporter.advance(s.label)
        any_wrong = any_wrong or bool(wrong)
        if results is not None:
            rows = point_rows(session, plan, s.group.work, s.collective, dtype, requested, s.in_place, results,
                              repetition, extra)
            session.write(rows)
            session.reporter.line(point_line(rows, dtype, plan))
            any_wrong = any_wrong or any(r["wrong"] for r in rows)
    return any_wrong


def point_rows(session: Session, plan: SweepPlan, work: GroupWork, collective: Collective, dtype: DType,
               requested: int, in_place: bool, results: list[dict], repetition: int, extra: dict) -> list[dict]:
    """Rank 0: a row per group and kind of pass (harness/groups.py group_rows); the concurrent row
    carries the contention factor."""
    def record(index: int, m: Measurement) -> dict:
        n = len(work.groups[index])
        lay = collective.for_size(requested, dtype.itemsize, n, 0)
        return session.record(collective=collective.name, dtype=dtype.name, op=plan.op if collective.reduces else None,
                              root=plan.root if collective.rooted else -1, size_bytes=lay.size_bytes(dtype.itemsize),
                              count=lay.count, in_place=in_place, busbw_factor=collective.busbw_factor(n), m=m,
                              repetition=repetition, **extra)

    return grouping.group_rows(session, work, results, collective.exits_together, record)


def point_line(rows: list[dict], dtype: DType, plan: SweepPlan) -> str:
    """The live line of a point: its slowest group (lowest busbw) while all ran at once, that
    group's time and busbw, the groups' median busbw, what they moved together a second and, with
    --solo, the slowest group's contention factor."""
    concurrent = [r for r in rows if r["concurrent"]]
    slow = min(concurrent, key=lambda r: r["busbw_GBps"])
    median = sorted(r["busbw_GBps"] for r in concurrent)[len(concurrent) // 2]
    total = aggregate_bps(slow["size_bytes"], [r["time_us"] * 1e-6 for r in concurrent]) / 1e9
    name = group_label(slow["group_dim"], slow["group_index"], True, slow["group_ranks"])
    line = (f" {slow['size_bytes']:>11d} {slow['count']:>11d} {dtype.nccl_name:>8s} {slow['op'] or 'none':>6s} "
            f"{'in' if slow['in_place'] else 'out':>5s}  {name:<22s} {slow['time_us']:9.1f} "
            f"{bw(slow['busbw_GBps'], 8)} {bw(median, 8)} {bw(total, 10)}")
    if any(r["wrong"] for r in rows):
        line += f"  #wrong {sum(r['wrong'] for r in concurrent)}"
    solo = next((r for r in rows if not r["concurrent"] and r["group_index"] == slow["group_index"]), None)
    if solo is not None:
        line += "  " + contention_of(slow, solo).text()
    return line


def contention_of(concurrent: dict, solo: dict) -> Contention:
    return contention([t * 1e-6 for t in concurrent["samples_us"]], [t * 1e-6 for t in solo["samples_us"]])


def group_straggler_lines(rows: list[dict], session: Session) -> list[str]:
    """Per group: its late ranks and hosts (core/stragglers.py) over its concurrent rows, named by
    their global ranks."""
    ctx, lines = session.ctx, list[str]()
    if not ctx.rank_host:
        return lines
    keys = dict.fromkeys((r["group_dim"], r["group_index"], r["group_ranks"]) for r in rows if r.get("group_dim"))
    for dim, index, text in keys:
        ranks = [int(r) for r in text.split(",")]
        mine = [r for r in rows if r.get("group_dim") == dim and r["group_index"] == index and r["concurrent"]]
        for f in stragglers.findings(mine, [ctx.hosts[ctx.rank_host[r]] for r in ranks]):
            f = (dataclasses.replace(f, rank=ranks[f.rank]) if isinstance(f, stragglers.Straggler)
                 else dataclasses.replace(f, ranks=tuple(ranks[r] for r in f.ranks)))
            lines.append(f"# {dim} group {index} [{text}]: {f.text()}")
    return lines
