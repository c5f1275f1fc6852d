"""The size sweep: every collective of the plan at every size of the nccl-tests grid, printed
as the nccl-tests table."""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from commbench.harness import faults
from commbench.core.vocab import Layout, check_backend_support
from commbench.harness.collectives import BY_NAME, CallArgs, Collective
from commbench.harness.console import Cell, format_row, placement_header, precision_mark, repetition_text
from commbench.harness.data import allocate, count_wrong, fill
from commbench.harness.dtypes import DType, get_dtype
from commbench.core.launch import RankEnv
from commbench.harness.memory import check_fits
from commbench.core import wire
from commbench.core.units import format_size
from commbench.core.linkrate import effective_rate, rate_text
from commbench.core.errors import BadInput
from commbench.core.layout import DEFAULT_COLLECTIVE, GroupWork, group_work
from commbench.harness.plan import Point, SweepPlan, validate
from commbench.workloads import groupsweep
from commbench.harness.session import Measurement, Session


def measure_point(session: Session, collective: Collective, layout: Layout, point: Point, dtype: DType,
                  args: CallArgs) -> Measurement:
    bufs = allocate(collective, layout, dtype, point.in_place, session.device)
    fill(bufs, args, dtype, point.in_place)
    call = collective.bind(bufs, args)
    timing = session.time_call(call, f"{collective.name} {format_size(point.size_bytes)}"
                                      f"{' in place' if point.in_place else ''}")

    wrong = None
    if session.ctx.plan.check:
        fill(bufs, args, dtype, point.in_place)
        call()
        if session.device.type == "cuda":
            torch.cuda.synchronize(session.device)
        if faults.corrupts_output(args.rank):
            bufs.recv.view(-1)[0] += 1
        wrong = session.sum_over_ranks(count_wrong(collective, layout, bufs, args, dtype))
    ranks = timing.ranks if collective.exits_together else replace(timing.ranks, skew_s=None)
    return Measurement(timing.samples_s, timing.iters, wrong, ranks, timing.wire)


@dataclass
class SweepWorkload:
    plan: SweepPlan
    warned: bool = field(default=False, init=False, repr=False)  # the hosts' links differ: said once

    def validate(self, world: int) -> None:
        if self.plan.metrics:  # refused before anything runs, not after the run
            from commbench.core.outputs import check_new

            check_new(self.plan.metrics, "sweep", "--metrics", force=True)
        works = self.works(world)
        if not works:
            validate(self.plan, world)
        elif self.plan.layout is not None and self.plan.collectives != [DEFAULT_COLLECTIVE["dp"]]:
            raise BadInput(f"with --layout the collectives come from --group (e.g. --group dp:"
                           f"{self.plan.collectives[0]}): drop --collective {','.join(self.plan.collectives)}")
        for work in works:
            _check_work(self.plan, work)

    def works(self, world: int) -> tuple[GroupWork, ...]:
        """--layout/--split's groups (core/layout.py); () for a plain sweep."""
        p = self.plan
        return _works(world, tuple(p.collectives), p.layout, p.order, p.group, p.split, p.solo)

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        reduces = any(c.reduces for c in self.plan.entries())
        check_backend_support(backend, get_dtype(self.plan.dtype), self.plan.op if reduces else None)
        check_fits(self.plan, env.world_size, env.local_world_size, device)

    def finished(self, rows: Sequence[Mapping]) -> None:
        """Rank 0 after the closing lines: --metrics FILE from the run's own rows (analysis/export/metrics.py)."""
        if self.plan.metrics and rows:
            from commbench.analysis.export.metrics import write_metrics

            path = write_metrics(rows, self.plan.metrics)
            print(f"# Metrics: {path}", flush=True)

    def total_points(self, world: int) -> int:
        if self.works(world):
            return groupsweep.total_points(self.plan, self.works(world))
        return sum(len(pts) for c in self.plan.entries() for _, pts in self.plan.points(c, world))

    def run(self, session: Session, repetitions: range) -> bool:
        line = link_mismatch(session.ctx.net.get("per_host") or {}) if session.rank == 0 else None
        if line and not self.warned:  # once, not once per --env setting
            self.warned = True
            print(f"commbench: warning: {line}", file=sys.stderr, flush=True)
        return self._grid(session, repetitions, {})

    def _grid(self, session: Session, repetitions: range, extra: dict) -> bool:
        plan, rank, world = self.plan, session.rank, session.world
        if self.works(world):
            return groupsweep.run_groups(session, plan, self.works(world), repetitions, extra)
        dtype = get_dtype(plan.dtype)
        work = [(c, plan.points(c, world, rank)) for c in plan.entries()]
        reporter = session.reporter
        any_wrong = False
        for repetition in repetitions:
            for collective, grid in work:
                op = plan.op if collective.reduces else None
                root = plan.root if collective.rooted else -1
                args = CallArgs(rank, world, plan.root, op, session.group)
                reporter.line(f"# Collective test starting: {collective.name}"
                              + (f"  ({repetition_text(repetition, plan.repetitions)})"
                                 if plan.repetitions > 1 else ""))
                placements = tuple(plan.placements_for(collective))  # one half where torch has one
                reporter.line(placement_header(placements))
                for layout, points in grid:
                    cells: dict[bool, Cell] = {}
                    records = []
                    for point in points:
                        m = measure_point(session, collective, layout, point, dtype, args)
                        if rank == 0:
                            rec = session.record(collective=collective.name, dtype=dtype.name, op=op, root=root,
                                                 size_bytes=point.size_bytes, count=point.count,
                                                 in_place=point.in_place, busbw_factor=collective.busbw_factor(world),
                                                 m=m, repetition=repetition, **extra)
                            records.append(rec)
                            cells[point.in_place] = Cell(rec["time_us"], rec["algbw_GBps"], rec["busbw_GBps"], m.wrong)
                        any_wrong = any_wrong or bool(m.wrong)
                        reporter.advance(f"{collective.name} {point.size_bytes} B")
                    session.write(records)
                    first = points[0]
                    marks = "".join(dict.fromkeys(wire.mark(r.get("wire")) for r in records))
                    reporter.line(format_row(first.size_bytes, first.count, dtype.nccl_name, op or "none", root,
                                             cells.get(False), cells.get(True), placements)
                                  + precision_mark(records, plan) + marks)
                reporter.line(f"# Collective test concluded: {collective.name}")
        return any_wrong


_works = functools.lru_cache(maxsize=8)(group_work)  # asked for by every step of a run, on every rank


def _check_work(plan: SweepPlan, work: GroupWork) -> None:
    """What a group of the work needs: a placement of its collective, a size that is not empty at
    its group size, its root among its ranks."""
    collective = BY_NAME[work.collective]
    smallest = min(len(g) for g in work.groups)
    where = f"{work.dim} groups" if work.dim != "split" else "--split's groups"
    if not plan.placements_for(collective):
        raise BadInput(f"{collective.name} ({where}) cannot run with placement {plan.placement!r}: use --placement "
                       f"{collective.placements[0]} or both")
    if collective.rooted and plan.root >= smallest:
        raise BadInput(f"--root {plan.root} is not a rank of every one of the {where} ({smallest} ranks): the root "
                       f"of a group is its place in the group; pick one below {smallest}")
    if not groupsweep.kept_sizes(plan, collective, {len(g) for g in work.groups}):
        raise BadInput(f"every size rounds to 0 elements for {collective.name} in {where} of {smallest} ranks: "
                       "raise --max-bytes")


def link_mismatch(per_host: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One line when the hosts' traffic links differ in MTU or rate (a shaper's rate where one caps
    the link, core/linkrate.py): the slowest link paces every collective, and the table cannot say
    which host it is (issue #40); `commbench pairs` can. None with one host or equal links."""
    mtus, rates = {}, {}
    for host, facts in per_host.items():
        ifaces = (facts.get("host_net") or {}).get("interfaces") or []
        named = [i for i in ifaces if i.get("name") == facts.get("iface")]
        mtus[host] = facts.get("mtu")
        rates[host] = effective_rate({**facts, **(named[0] if named else {})})[0]
    parts = []
    if len({m for m in mtus.values() if m}) > 1:
        parts.append("MTU " + ", ".join(f"{m} on {h}" for h, m in mtus.items()))
    known = [r for r in rates.values() if r]
    if known and max(known) > 1.05 * min(known):  # a few % is two NICs' rounding, not a different link
        parts.append("link rate " + ", ".join(f"{rate_text(r) if r else '?'} on {h}" for h, r in rates.items()))
    if not parts:
        return None
    return (f"the hosts' links differ ({'; '.join(parts)}): the slowest sets every collective's pace; "
            "`commbench pairs` measures each pair of hosts and names the slow one (docs/PAIRS.md)")
