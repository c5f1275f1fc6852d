"""The zero workload: a ZeRO schedule (workloads/zeroschedule.py says what DeepSpeed issues per
stage, and why) run with real collectives, one optimizer step a sample, per stage, bucket size and
gradient_accumulation_steps; --overlap keeps as many reductions in flight as DeepSpeed does.
With --layout tp=2 (docs/LAYOUTS.md) every data-parallel group runs the schedule at once, over the
parameters it holds (P / (tp x pp)), as DeepSpeed with a model-parallel group issues it; a row per
group (harness/groups.py)."""
from __future__ import annotations

import dataclasses
import json
from collections import Counter, deque
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from commbench.core.vocab import check_backend_support, volume_factor
from commbench.harness.dtypes import get_dtype
from commbench.harness.collectives import BY_NAME, Buffers, CallArgs
from commbench.harness.memory import check_need
from commbench.core.errors import BadInput
from commbench.core.launch import RankEnv
from commbench.core.options import RunOptions
from commbench.harness import groups as grouping
from commbench.harness.session import Measurement, Session
from commbench.core.layout import GroupWork, InDataGroups
from commbench.core import wire
from commbench.core.units import format_size, format_us
from commbench.workloads.zeroschedule import (MAX_GRAD_ACCUM, MAX_STEP_COLLECTIVES, PAPER_VOLUME, REDUCTIONS,
                                              Comm, curve_comms, in_flight, module_sizes, param_count,
                                              scaled, step_collectives, step_schedule)


@dataclass
class ZeroPlan(RunOptions):
    stages: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    layers: int = 24
    hidden: int = 2048
    vocab: int = 50257
    model: str = "1.3b"
    dtype: str = "bfloat16"
    reduce_bucket_size: int = 500_000_000
    # A grid of reduce bucket sizes to run with every stage (zero --bucket-size); empty: the one above
    reduce_bucket_sizes: list[int] = field(default_factory=list)
    prefetch_bucket_size: int = 50_000_000
    micro_batches: int = 1  # gradient_accumulation_steps
    # An axis of gradient_accumulation_steps values (zero --grad-accum); empty: micro_batches alone
    grad_accums: list[int] = field(default_factory=list)
    overlap_comm: bool | None = None  # None: DeepSpeed's default (on for stage 3 only)
    curve: list[str] = field(default_factory=list)  # --curve: results of a sweep to predict from
    # [stage, bucket, grad_accum, predicted us per step at full scale], filled by validate()
    predicted: list[list] = field(default_factory=list)
    multi_rank_allreduce: bool = True  # use_multi_rank_bucket_allreduce
    scale: float = 1.0
    ds_config: str | None = None
    wide: bool = False  # --wide: the full table (full model, paper volume, ratios, times in us)
    workload: str = "zero"


@dataclass
class ZeroWorkload(InDataGroups):
    command: ClassVar[str] = "zero"
    plan: ZeroPlan
    shards: int = 1  # ranks that share one copy of the model (--layout's tp x pp): a dp group holds P / shards

    def modules(self) -> list[int]:
        sizes = module_sizes(self.plan.layers, self.plan.hidden, self.plan.vocab)
        return sizes if self.shards == 1 else [max(1, m // self.shards) for m in sizes]


    def buckets(self) -> list[int]:
        return list(self.plan.reduce_bucket_sizes) or [self.plan.reduce_bucket_size]

    def grad_accums(self) -> list[int]:
        return list(self.plan.grad_accums) or [max(1, self.plan.micro_batches)]

    def settings(self) -> list[tuple[int, int, int]]:
        """(grad_accum, bucket, stage) of every point, in the order they run."""
        return [(g, b, s) for g in self.grad_accums() for b in self.buckets() for s in self.plan.stages]

    def full_schedule(self, stage: int, reduce_bucket: int | None = None, grad_accum: int | None = None) -> list[Comm]:
        p = self.plan
        return step_schedule(stage, self.modules(), reduce_bucket or p.reduce_bucket_size, p.prefetch_bucket_size,
                             grad_accum or p.micro_batches, p.multi_rank_allreduce)

    def schedule(self, stage: int, world: int, reduce_bucket: int | None = None,
                 grad_accum: int | None = None) -> list[Comm]:
        return scaled(self.full_schedule(stage, reduce_bucket, grad_accum), self.plan.scale,
                      get_dtype(self.plan.dtype).itemsize, world)

    def predict(self, world: int) -> None:
        """Each setting's communication time per step at full scale from the --curve sweep, into
        plan.predicted; a curve that lacks a collective or size, or another world size, is refused."""
        from commbench.analysis.tune.predict import load_curve, predict_us

        p = self.plan
        curve = load_curve(list(p.curve))
        itemsize = get_dtype(p.dtype).itemsize
        p.predicted = [[s, b, g, predict_us(curve, curve_comms(self.full_schedule(s, b, g), itemsize, world),
                                            world, p.dtype)]
                       for g, b, s in self.settings()]

    def predicted_us(self, stage: int, bucket: int, grad_accum: int) -> float | None:
        return next((us for s, b, g, us in self.plan.predicted if (s, b, g) == (stage, bucket, grad_accum)), None)

    def validate(self, world: int) -> None:
        if world < 2:
            raise BadInput("a ZeRO schedule needs at least 2 ranks: raise --nproc")
        ranks = self.group_size(world)  # a dp group's with --layout
        p = self.plan
        params = param_count(p.layers, p.hidden, p.vocab)
        for g, bucket, stage in self.settings():
            if not 1 <= g <= MAX_GRAD_ACCUM:
                raise BadInput(f"gradient_accumulation_steps {g} is outside 1..{MAX_GRAD_ACCUM}: "
                               "pass --grad-accum values such as 1,4,8")
            n = step_collectives(stage, p.layers, params, bucket, g)
            if n > MAX_STEP_COLLECTIVES:
                fix = ("a smaller shape (--model, --layers/--hidden/--vocab)" if stage == 0 else
                       "a larger --bucket-size (or reduce_bucket_size in --ds-config), fewer "
                       "gradient_accumulation_steps (--grad-accum), or a smaller shape")
                raise BadInput(f"ZeRO-{stage} of {p.model} ({params:.3g} parameters) with buckets of {bucket:.3g} "
                               f"elements and {g} micro-batch(es) is {n:,} collectives per step; the most is "
                               f"{MAX_STEP_COLLECTIVES:,}: use {fix}")
        if p.curve:
            self.predict(ranks)

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        check_backend_support(backend, get_dtype(self.plan.dtype), "sum")
        itemsize = get_dtype(self.plan.dtype).itemsize
        # every collective of a step has its own buffers (message + one rank's part)
        n = self.group_size(env.world_size)  # with --layout, a dp group's share of the parameters
        need = max(sum(c.numel for c in self.schedule(s, n, b, g))
                   for g, b, s in self.settings()) * itemsize * 1.5
        check_need(int(need), env.local_world_size, device, "one step's buffers", "lower --scale")

    def total_points(self, world: int) -> int:
        return len(self.settings())

    def run(self, session: Session, repetitions: range) -> bool:
        plan = self.plan
        dtype = get_dtype(plan.dtype)
        params = sum(self.modules())
        reporter = session.reporter
        # a scaled model's bytes alone read as the model's (issue #19): the full model's stand beside them
        scaled_run = plan.scale != 1
        overlap = {None: "DeepSpeed's default (stage 3 only)", True: "on", False: "off"}[plan.overlap_comm]
        reporter.line(f"# ZeRO schedules: {plan.model} shape ({params / 1e9:.3g}B parameters, {plan.layers} layers, "
                      f"hidden {plan.hidden}), {dtype.name}, scale {plan.scale:g}"
                      + (f" (every message 1/{1 / plan.scale:.3g} of the full model's)" if scaled_run else ""))
        reporter.line(f"#   buckets reduce {' / '.join(f'{b:.3g}' for b in self.buckets())} | "
                      f"prefetch {plan.prefetch_bucket_size:.3g} elements, "
                      f"micro-batches per step {' / '.join(str(g) for g in self.grad_accums())}, "
                      f"overlap_comm {overlap}")
        for note in self.config_changes():
            reporter.line(f"# config: {note}")
        work = self.data_groups(session.world)
        mine = grouping.build([work], session.rank)[0] if work else None
        sub = grouping.group_session(session, mine) if mine else None
        if work:
            reporter.line(self._groups_line(work))
        reporter.line(self._header())
        for repetition in repetitions:
            reporter.repetition(repetition, session.ctx.plan.repetitions)
            for g, bucket, stage in self.settings():
                self._point(session, dtype, repetition, (stage, bucket, g), mine, sub)
                reporter.advance(f"stage {stage}")
        if mine:
            grouping.release([mine])
        if scaled_run:
            reporter.line(f"# bytes/rank/step and paper are the scaled model's (--scale {plan.scale:g}); full model: "
                          f"the same step's bytes per rank at full size ({plan.model}: {params / 1e9:.3g}B parameters, "
                          f"{format_size(params * dtype.itemsize)} of {dtype.name})")
        if plan.curve:
            reporter.line("# predicted: the full-scale step's collectives, each timed from the --curve sweep at its "
                          "size (sum of calls x time, no overlap)" + ("" if not scaled_run else
                                                                       "; measured/predicted only at --scale 1"))
        return False

    def config_changes(self) -> list[str]:
        """What this run uses other than --ds-config's settings, as the engine path words them."""
        p = self.plan
        if not p.ds_config:
            return []
        from commbench.integrations.deepspeed import config as dsconfig
        from commbench.integrations.deepspeed import adapt as dsadapt

        return dsadapt.asked_changes(dsconfig.load(p.ds_config), stages=p.stages, grad_accums=self.grad_accums(),
                                      reduce_buckets=self.buckets(), dtype=p.dtype, overlap=p.overlap_comm)

    def _header(self) -> str:
        if not self.plan.wide:  # 120 columns: --wide adds the full model, the paper's volume and the ratios
            return (f"#  stage   bucket  GAS  flight  {'collectives':38s}  bytes/rank/step  {'time/step':>10s}   busbw"
                    + (f"  {'predicted':>10s}" if self.plan.curve else ""))
        return ("#  stage  reduce bucket  GAS  in flight  collectives                                   "
                "bytes/rank/step   " + ("full model   " if self.plan.scale != 1 else "")
                + "paper (xP)   ratio   time/step (us)   busbw" + (self._predicted_header() if self.plan.curve else ""))

    def _predicted_header(self) -> str:
        return "   predicted (us)" + ("   measured/predicted" if self.plan.scale == 1 else "")

    def _groups_line(self, work: GroupWork) -> str:
        solo = "; with each alone too (--solo: A B B A)" if self.plan.solo else ""
        shown = " ".join(f"{i}:[{','.join(map(str, g))}]" for i, g in enumerate(work.groups))
        return (f"# In {len(work.groups)} data-parallel groups of {len(work.groups[0])} ranks, all at once{solo}; "
                f"each holds 1/{self.shards} of the parameters (--layout's tp x pp): dp {shown}")

    def _point(self, session: Session, dtype, repetition: int, setting: tuple[int, int, int],
               mine: grouping.RankGroup | None = None, sub: Session | None = None) -> None:
        """One setting (stage, bucket, grad_accum): its step timed (in every dp group at once with
        --layout), its rows written, a table line each (a group's concurrent row with --layout)."""
        stage, bucket, g = setting
        plan = self.plan
        world = mine.size if mine else session.world
        sched = self.schedule(stage, world, bucket, g)
        depth = in_flight(stage, plan.overlap_comm)
        call = _bind(sched, dtype.torch_dtype, session.device, world, mine.pg if mine else session.group, depth,
                     mine.ranks if mine else None)
        label = f"ZeRO-{stage} step (buckets of {bucket:.3g} elements, {g} micro-batch(es))"

        def record(index: int, m: Measurement) -> dict:
            return self._row(session, dtype, sched, world, m, repetition, setting, depth)

        if mine is None or sub is None:
            timing = session.time_call(call, label)
            rows = [record(0, timing.measurement(None))] if session.rank == 0 else []
        else:
            results, _ = grouping.measure(session, mine, sub, call, label, plan.solo)
            rows = grouping.group_rows(session, mine.work, results, True, record) if results is not None else []
        session.write(rows)
        for row in rows:
            if row.get("concurrent") is not False:
                session.reporter.line(self._line(row, sched, world, setting, depth))

    def _row(self, session: Session, dtype, sched: list[Comm], world: int, m: Measurement, repetition: int,
             setting: tuple[int, int, int], depth: int) -> dict:
        stage, bucket, g = setting
        moved = sum(c.numel * dtype.itemsize * volume_factor(c.op, world) for c in sched)
        total = sum(c.numel * dtype.itemsize for c in sched)
        paper = PAPER_VOLUME[stage] * g * sum(self.modules()) * self.plan.scale * dtype.itemsize * (world - 1) / world
        ops = Counter(c.op for c in sched)
        by_op = {op: {"count": ops[op], "bytes": sum(c.numel for c in sched if c.op == op) * dtype.itemsize}
                 for op in sorted(ops)}
        return session.record(collective="zero_step", dtype=dtype.name, op="sum", root=-1, size_bytes=total,
                              count=sum(c.numel for c in sched), in_place=True, busbw_factor=moved / total,
                              m=m, repetition=repetition, zero_stage=stage,
                              bucket_bytes=bucket * dtype.itemsize, grad_accum=g, overlap=depth,
                              n_collectives=len(sched), scale=self.plan.scale, bytes_per_rank=int(moved),
                              paper_bytes_per_rank=int(paper), ops=json.dumps(by_op, sort_keys=True))

    def _line(self, row: dict[str, Any], sched: list[Comm], world: int, setting: tuple[int, int, int],
              depth: int) -> str:
        stage, bucket, g = setting
        plan, dtype = self.plan, get_dtype(self.plan.dtype)
        moved, paper = row["bytes_per_rank"], row["paper_bytes_per_rank"]
        at_full = sum(c.numel * dtype.itemsize * volume_factor(c.op, world)
                      for c in self.full_schedule(stage, bucket, g))
        counts = ", ".join(f"{op} x{n}" for op, n in sorted(Counter(c.op for c in sched).items()))
        if not plan.wide:
            us = self.predicted_us(stage, bucket, g)
            return (f"  {stage:5d}  {bucket:7.3g}  {g:3d}  {depth:6d}  {counts:38s}  {format_size(moved):>15s}  "
                    f"{format_us(row['time_us']):>10s}  {row['busbw_GBps']:6.3f}"
                    + ("" if us is None else f"  {format_us(us):>10s}")
                    + wire.mark(row.get("wire")) + grouping.row_suffix(row))
        full_col = f"{format_size(at_full):>10s}   " if plan.scale != 1 else ""
        return (f"  {stage:5d}  {bucket:13.3g}  {g:3d}  {depth:9d}  {counts:44s}  {format_size(moved):>15s}   "
                f"{full_col}{PAPER_VOLUME[stage] * g}P={format_size(paper):>9s}  {moved / paper:6.3f}  "
                f"{row['time_us']:15.0f}  {row['busbw_GBps']:6.3f}" + self._predicted_cols(stage, bucket, g, row)
                + wire.mark(row.get("wire")) + grouping.row_suffix(row))

    def _predicted_cols(self, stage: int, bucket: int, g: int, row: dict) -> str:
        us = self.predicted_us(stage, bucket, g)
        if us is None:
            return ""
        ratio = f"   {row['time_us'] / us:20.3f}" if self.plan.scale == 1 and us > 0 else ""
        return f"   {us:14.0f}{ratio}"


def _bind(sched: list[Comm], torch_dtype, device, world: int, group=None, depth: int = 1,
          ranks: tuple[int, ...] | None = None) -> Callable[[], None]:
    """One step: every collective of the schedule, in order, each on its own buffers; up to
    `depth` gradient reductions in flight at once (overlap_comm), anything else after they end.
    `ranks`: the group's global ranks (torch names a reduce's destination by its global rank)."""
    launches = []  # (is a reduction, the started calls whose works to wait on)
    dsts = list(ranks) if ranks else list(range(world))

    def make(numel: int) -> torch.Tensor:
        return torch.ones(numel, dtype=torch_dtype, device=device)

    for c in sched:
        bound = BY_NAME.get(c.op)
        if bound is None or bound.start is None:
            raise ValueError(c.op)
        args = CallArgs(0, world, 0, "sum", group, async_op=True)
        if bound.rooted:
            # DeepSpeed reduces each bucket's slices to the ranks that own them: one reduce per owner
            full, part = make(c.numel), c.numel // world
            starts = [bound.start(Buffers(t, t), dataclasses.replace(args, root=d))
                      for d, t in zip(dsts, [full[r * part:(r + 1) * part] for r in range(world)])]
        else:
            starts = [bound.start(bound.buffers(c.numel, c.numel // world, make), args)]
        launches.append((c.op in REDUCTIONS and c.phase == "backward", starts))

    def step() -> None:
        pending: deque = deque()
        for reduction, starts in launches:
            if not reduction:  # a gather waits for the reductions before it, and is waited on
                while pending:
                    _wait(pending.popleft())
                _wait([start() for start in starts])
                continue
            pending.append([start() for start in starts])
            if len(pending) >= depth:
                _wait(pending.popleft())
        while pending:
            _wait(pending.popleft())

    return step


def _wait(works) -> None:
    for work in works:
        work.wait()
