"""ZeRO schedules: one optimizer step's communication for a model shape and a DeepSpeed
config, per ZeRO stage, run with real collectives.

The schedule mirrors what DeepSpeed 0.19.8 really issues (verified in its source and with its
comms logger; docs/DEEPSPEED.md has the references), which is not the ZeRO paper's 2P/2P/3P:

- stage 0: gradients all-reduced in fixed buckets of 5e8 elements (reduce_bucket_size is not
  used), once per optimizer step;
- stages 1 and 2: gradients all-reduced per bucket of reduce_bucket_size (the default
  use_multi_rank_bucket_allreduce: true; with false, each bucket's slices are reduced to their
  owners), then ONE all-gather of the updated partitions (allgather_bucket_size is ignored on
  torch >= 1.13). Stage 1 reduces once per optimizer step, stage 2 after every micro-batch;
- stage 3: per micro-batch, parameters all-gathered module by module in forward and again in
  backward (grouped up to stage3_prefetch_bucket_size), gradients reduce-scattered per bucket of
  reduce_bucket_size.

So per optimizer step with g micro-batches a rank moves 2P (stage 0), 3P (stage 1), (2g+1)P
(stage 2), 3gP (stage 3), in the paper's units (an all-reduce counts 2(n-1)/n of its message,
the others (n-1)/n); with use_multi_rank_bucket_allreduce: false stages 1/2 drop to 2P and
(g+1)P. Each row stores the schedule's volume next to the paper's (2P, 2P, 2P, 3P per
micro-batch) so the difference is visible. `--scale` multiplies every collective's size (how
many collectives of which kind is kept) so that a 1.3B-shaped step runs on a small machine.

When each stage reduces, with gradient_accumulation_steps g (`--grad-accum`, an axis; lines of
DeepSpeed 0.19.8's site-packages/deepspeed/runtime/):
- engine.py allreduce_gradients L3073-3097, run from _backward_epilogue L3163-3165 after every
  backward: stage 2/3 (partition_gradients) go on, stages 0 and 1 reduce only when
  is_gradient_accumulation_boundary() (L3442, true on the g-th micro-batch): once per step;
- zero/stage_1_and_2.py reduce_ready_partitions_and_remove_grads L2293-2295: the gradient hooks
  reduce a bucket when partition_gradients (stage 2: every micro-batch) or at the boundary
  (stage 1 with overlap_comm: still once per step);
- zero/stage3.py reduce_ready_partitions_and_remove_grads L2160-2164 has no boundary test: a
  reduce-scatter per bucket per micro-batch, and the parameters are gathered per micro-batch.

overlap_comm (`--overlap`): how many gradient reductions are in flight while the next bucket
fills. Stages 1/2 double-buffer the bucket (stage_1_and_2.py setup_buckets L3272-3278, the index
swapped in reduce_independent_p_g_buckets_and_remove_grads L1422-1428): 2. Stage 3 keeps up to
max_param_reduce_events = 2 reductions pending and issues a third (stage3.py L462, L1664-1667): 3.
Stage 0 reduces synchronously (engine.py allreduce_bucket): 1. Without overlap_comm: 1.
DeepSpeed's default is on for stage 3 only (DeepSpeedZeroConfig.overlap_comm_valid).
"""

from __future__ import annotations

import json
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist

from commbench.core.vocab import ALIGN, check_backend_support, volume_factor
from commbench.harness.dtypes import get_dtype
from commbench.harness.collectives import all_gather_flat, reduce_scatter_flat
from commbench.harness.memory import check_need
from commbench.core.errors import BadInput
from commbench.core.launch import RankEnv
from commbench.core.options import RunOptions
from commbench.harness.runner import Session
from commbench.core import wire
from commbench.core.units import format_size

# name -> (layers, hidden, vocab): GPT-2 small, GPT-3 XL (1.3B), LLaMA-7B-like
MODELS = {"gpt2-125m": (12, 768, 50257), "1.3b": (24, 2048, 50257), "7b": (32, 4096, 32000)}
PAPER_VOLUME = {0: 2, 1: 2, 2: 2, 3: 3}  # x P per rank per micro-batch (ZeRO paper, section 7)
DEFAULT_CPU_STEP_BYTES = 32 << 20  # --scale auto on CPU: the scaled model holds this many bytes


MAX_STEP_COLLECTIVES = 100_000  # one step's collectives, each with buffers of its own


def param_count(layers: int, hidden: int, vocab: int) -> int:
    """sum(module_sizes(...)), without building the list (any shape answers at once)."""
    return 2 * vocab * hidden + layers * (12 * hidden * hidden + 11 * hidden)


def module_sizes(layers: int, hidden: int, vocab: int) -> list[int]:
    """Parameter elements per module of the synthetic transformer (the one the DeepSpeed engine
    workload trains): embedding, per block LayerNorm, qkv, proj, mlp up, mlp down; the head."""
    h = hidden
    block = [2 * h, 3 * h * h + 3 * h, h * h + h, 4 * h * h + 4 * h, 4 * h * h + h]
    return [vocab * h] + block * layers + [h * vocab]


@dataclass(frozen=True)
class Comm:
    op: str  # all_reduce | reduce | all_gather | reduce_scatter
    numel: int  # elements of the whole message (nccl-tests S / itemsize)
    phase: str  # forward | backward | step


def _chunks(total: int, size: int) -> list[int]:
    size = max(1, size)
    return [min(size, total - start) for start in range(0, total, size)]


def _grouped(sizes: list[int], limit: int) -> list[int]:
    """Consecutive modules fetched together until `limit` elements (stage 3 prefetch)."""
    groups, current = [], 0
    for s in sizes:
        if current and current + s > limit:
            groups.append(current)
            current = 0
        current += s
    return groups + ([current] if current else [])


STAGE0_BUCKET = 500_000_000  # DeepSpeed's stage-0 allreduce bucket (engine.allreduce_gradients)


def step_schedule(stage: int, modules: list[int], reduce_bucket: int, prefetch_bucket: int,
                  micro_batches: int = 1, multi_rank_allreduce: bool = True) -> list[Comm]:
    """The collectives of one optimizer step (micro_batches forward/backward passes + step)."""
    total = sum(modules)
    g = max(1, micro_batches)
    if stage == 0:
        return [Comm("all_reduce", n, "backward") for n in _chunks(total, STAGE0_BUCKET)]
    if stage in (1, 2):
        grad_op = "all_reduce" if multi_rank_allreduce else "reduce"
        grads = [Comm(grad_op, n, "backward") for n in _chunks(total, reduce_bucket)]
        reductions = grads * (g if stage == 2 else 1)
        return reductions + [Comm("all_gather", total, "step")]
    if stage == 3:
        fwd = [Comm("all_gather", n, "forward") for n in _grouped(modules, prefetch_bucket)]
        bwd = [Comm("all_gather", n, "backward") for n in _grouped(list(reversed(modules)), prefetch_bucket)]
        grads = [Comm("reduce_scatter", n, "backward") for n in _chunks(total, reduce_bucket)]
        return (fwd + bwd + grads) * g
    raise BadInput(f"ZeRO stage {stage} does not exist: use 0, 1, 2 or 3")


def step_collectives(stage: int, layers: int, params: int, reduce_bucket: int, micro_batches: int = 1) -> int:
    """How many collectives step_schedule issues (stage 3: at most one gather per module each
    way), counted arithmetically, so that a shape or bucket that would make billions is refused
    before any list is built."""
    g = max(1, micro_batches)
    chunks = -(-params // max(1, reduce_bucket))
    if stage == 0:
        return -(-params // STAGE0_BUCKET)
    if stage in (1, 2):
        return chunks * (g if stage == 2 else 1) + 1
    return g * (2 * (5 * layers + 2) + chunks)


def engine_bytes_per_rank(layers: int, hidden: int, vocab: int, stages: list[int]) -> int:
    """At least what one rank of the real DeepSpeed engine holds: the fp32 model as built (4 B per
    parameter) at every stage; at stage 0 the 16-bit weights and gradients, the fp32 master copy
    and Adam's two moments, none of them partitioned (16 B per parameter)."""
    return param_count(layers, hidden, vocab) * (16 if 0 in stages else 4)


REDUCTIONS = ("all_reduce", "reduce", "reduce_scatter")
MAX_GRAD_ACCUM = 1024


def in_flight(stage: int, overlap_comm: bool | None) -> int:
    """Gradient reductions in flight at once (the module docstring says where DeepSpeed decides);
    overlap_comm None: DeepSpeed's default, on for stage 3 only."""
    on = stage == 3 if overlap_comm is None else overlap_comm
    return 1 if not on or stage == 0 else {1: 2, 2: 2, 3: 3}[stage]


def curve_comms(schedule: list[Comm], itemsize: int, world: int) -> list[tuple[str, int, int]]:
    """(collective, bytes per call as a sweep measures it, calls per step): the terms of a
    prediction. A `reduce` bucket is one reduce per owner of 1/world of the bucket each."""
    calls: Counter = Counter()
    for c in schedule:
        if c.op == "reduce":
            calls[("reduce", c.numel // world * itemsize)] += world
        else:
            calls[(c.op, c.numel * itemsize)] += 1
    return [(op, size, n) for (op, size), n in sorted(calls.items())]


def scaled(schedule: list[Comm], scale: float, world: int) -> list[Comm]:
    """Every message times `scale`, rounded to a whole chunk per rank (ALIGN x world elements)."""
    unit = ALIGN * world
    return [Comm(c.op, max(unit, int(c.numel * scale) // unit * unit), c.phase) for c in schedule]


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
    workload: str = "zero"


@dataclass
class ZeroWorkload:
    plan: ZeroPlan

    def modules(self) -> list[int]:
        return module_sizes(self.plan.layers, self.plan.hidden, self.plan.vocab)

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
        return scaled(self.full_schedule(stage, reduce_bucket, grad_accum), self.plan.scale, world)

    def predict(self, world: int) -> None:
        """Each setting's communication time per step at full scale from the --curve sweep, into
        plan.predicted; a curve that lacks a collective or size, or another world size, is refused."""
        from commbench.analysis.predict import load_curve, predict_us

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
            self.predict(world)

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        check_backend_support(backend, get_dtype(self.plan.dtype), "sum")
        itemsize = get_dtype(self.plan.dtype).itemsize
        # every collective of a step has its own buffers (message + one rank's part)
        need = max(sum(c.numel for c in self.schedule(s, env.world_size, b, g))
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
                      + (f" (every message 1/{1 / plan.scale:.3g} of the full model's)" if scaled_run else "") + ", "
                      f"buckets reduce {' / '.join(f'{b:.3g}' for b in self.buckets())} | "
                      f"prefetch {plan.prefetch_bucket_size:.3g} elements, "
                      f"micro-batches per step {' / '.join(str(g) for g in self.grad_accums())}, overlap_comm {overlap}")
        reporter.line("#  stage  reduce bucket  GAS  in flight  collectives                                   "
                      "bytes/rank/step   " + ("full model   " if scaled_run else "")
                      + "paper (xP)   ratio   time/step (us)   busbw" + (self._predicted_header() if plan.curve else ""))
        for repetition in repetitions:
            for g, bucket, stage in self.settings():
                self._point(session, dtype, repetition, stage, bucket, g)
                reporter.advance(f"stage {stage}")
        if scaled_run:
            reporter.line(f"# bytes/rank/step and paper are the scaled model's (--scale {plan.scale:g}); full model: "
                          f"the same step's bytes per rank at full size ({plan.model}: {params / 1e9:.3g}B parameters, "
                          f"{format_size(params * dtype.itemsize)} of {dtype.name})")
        if plan.curve:
            reporter.line("# predicted: the full-scale step's collectives, each timed from the --curve sweep at its "
                          "size (sum of calls x time, no overlap)" + ("" if not scaled_run else
                                                                       "; measured/predicted only at --scale 1"))
        return False

    def _predicted_header(self) -> str:
        return "   predicted (us)" + ("   measured/predicted" if self.plan.scale == 1 else "")

    def _point(self, session: Session, dtype, repetition: int, stage: int, bucket: int, g: int) -> None:
        """One setting: its step timed, its row written, its table line printed."""
        plan, world, reporter = self.plan, session.world, session.reporter
        sched = self.schedule(stage, world, bucket, g)
        depth = in_flight(stage, plan.overlap_comm)
        call = _bind(sched, dtype.torch_dtype, session.device, world, session.group, depth)
        timing = session.time_call(call, f"ZeRO-{stage} step (buckets of {bucket:.3g} elements, {g} micro-batch(es))")
        if session.rank != 0:
            return
        moved = sum(c.numel * dtype.itemsize * volume_factor(c.op, world) for c in sched)
        at_full = sum(c.numel * dtype.itemsize * volume_factor(c.op, world) for c in self.full_schedule(stage, bucket, g))
        total = sum(c.numel * dtype.itemsize for c in sched)
        params = sum(self.modules())
        paper = PAPER_VOLUME[stage] * g * params * plan.scale * dtype.itemsize * (world - 1) / world
        ops = Counter(c.op for c in sched)
        by_op = {op: {"count": ops[op], "bytes": sum(c.numel for c in sched if c.op == op) * dtype.itemsize}
                 for op in sorted(ops)}
        row = session.record(collective="zero_step", dtype=dtype.name, op="sum", root=-1, size_bytes=total,
                             count=sum(c.numel for c in sched), in_place=True, busbw_factor=moved / total,
                             m=timing.measurement(None), repetition=repetition, zero_stage=stage,
                             bucket_bytes=bucket * dtype.itemsize, grad_accum=g, overlap=depth,
                             n_collectives=len(sched), scale=plan.scale, bytes_per_rank=int(moved),
                             paper_bytes_per_rank=int(paper), ops=json.dumps(by_op, sort_keys=True))
        session.write([row])
        counts = ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))
        full_col = f"{format_size(at_full):>10s}   " if plan.scale != 1 else ""
        reporter.line(f"  {stage:5d}  {bucket:13.3g}  {g:3d}  {depth:9d}  {counts:44s}  {format_size(moved):>15s}   "
                      f"{full_col}{PAPER_VOLUME[stage] * g}P={format_size(paper):>9s}  {moved / paper:6.3f}  "
                      f"{row['time_us']:15.0f}  {row['busbw_GBps']:6.3f}" + self._predicted_cols(stage, bucket, g, row)
                      + wire.mark(row.get("wire")))

    def _predicted_cols(self, stage: int, bucket: int, g: int, row: dict) -> str:
        us = self.predicted_us(stage, bucket, g)
        if us is None:
            return ""
        ratio = f"   {row['time_us'] / us:20.3f}" if self.plan.scale == 1 and us > 0 else ""
        return f"   {us:14.0f}{ratio}"


def _bind(sched: list[Comm], torch_dtype, device, world: int, group=None, depth: int = 1) -> Callable[[], None]:
    """One step: every collective of the schedule, in order, each on its own buffers; up to
    `depth` gradient reductions in flight at once (overlap_comm), anything else after they end."""
    launches = []  # (is a reduction, launch() -> the async works to wait on)
    for c in sched:
        full = torch.ones(c.numel, dtype=torch_dtype, device=device)
        part = torch.ones(c.numel // world, dtype=torch_dtype, device=device)
        if c.op == "all_reduce":
            launch = (lambda t=full: [dist.all_reduce(t, group=group, async_op=True)])
        elif c.op == "reduce":
            # DeepSpeed reduces each bucket's slices to the ranks that own them: one reduce per owner
            owners = [full[r * part.numel():(r + 1) * part.numel()] for r in range(world)]
            launch = (lambda owners=owners: [dist.reduce(t, dst=r, group=group, async_op=True)
                                             for r, t in enumerate(owners)])
        elif c.op == "all_gather":
            launch = (lambda o=full, i=part: [all_gather_flat(o, i, group=group, async_op=True)])
        elif c.op == "reduce_scatter":
            launch = (lambda o=part, i=full: [reduce_scatter_flat(o, i, group=group, async_op=True)])
        else:
            raise ValueError(c.op)
        launches.append((c.op in REDUCTIONS and c.phase == "backward", launch))

    def step() -> None:
        pending: deque = deque()
        for reduction, launch in launches:
            if not reduction:  # a gather waits for the reductions before it, and is waited on
                while pending:
                    _wait(pending.popleft())
                _wait(launch())
                continue
            pending.append(launch())
            if len(pending) >= depth:
                _wait(pending.popleft())
        while pending:
            _wait(pending.popleft())

    return step


def _wait(works) -> None:
    for work in works:
        work.wait()
