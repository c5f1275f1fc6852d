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
"""

from __future__ import annotations

import json
from collections import Counter
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

    def schedule(self, stage: int, world: int, reduce_bucket: int | None = None) -> list[Comm]:
        p = self.plan
        full = step_schedule(stage, self.modules(), reduce_bucket or p.reduce_bucket_size, p.prefetch_bucket_size,
                             p.micro_batches, p.multi_rank_allreduce)
        return scaled(full, p.scale, world)

    def validate(self, world: int) -> None:
        if world < 2:
            raise BadInput("a ZeRO schedule needs at least 2 ranks: raise --nproc")
        p = self.plan
        params = param_count(p.layers, p.hidden, p.vocab)
        for stage in p.stages:
            for bucket in self.buckets():
                n = step_collectives(stage, p.layers, params, bucket, p.micro_batches)
                if n > MAX_STEP_COLLECTIVES:
                    fix = ("a smaller shape (--model, --layers/--hidden/--vocab)" if stage == 0 else
                           "a larger --bucket-size (or reduce_bucket_size in --ds-config), fewer "
                           "gradient_accumulation_steps, or a smaller shape")
                    raise BadInput(f"ZeRO-{stage} of {p.model} ({params:.3g} parameters) with buckets of {bucket:.3g} "
                                   f"elements is {n:,} collectives per step; the most is {MAX_STEP_COLLECTIVES:,}: "
                                   f"use {fix}")

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        check_backend_support(backend, get_dtype(self.plan.dtype), "sum")
        itemsize = get_dtype(self.plan.dtype).itemsize
        # every collective of a step has its own buffers (message + one rank's part)
        need = max(sum(c.numel for c in self.schedule(s, env.world_size, b))
                   for s in self.plan.stages for b in self.buckets()) * itemsize * 1.5
        check_need(int(need), env.local_world_size, device, "one step's buffers", "lower --scale")

    def total_points(self, world: int) -> int:
        return len(self.plan.stages) * len(self.buckets())

    def run(self, session: Session) -> bool:
        plan, world = self.plan, session.world
        dtype = get_dtype(plan.dtype)
        params = sum(self.modules())
        reporter = session.reporter
        # a scaled model's bytes alone read as the model's (issue #19): the full model's stand beside them
        full = plan.scale != 1
        reporter.line(f"# ZeRO schedules: {plan.model} shape ({params / 1e9:.3g}B parameters, {plan.layers} layers, "
                      f"hidden {plan.hidden}), {dtype.name}, scale {plan.scale:g}"
                      + (f" (every message 1/{1 / plan.scale:.3g} of the full model's)" if full else "") + ", "
                      f"buckets reduce {' / '.join(f'{b:.3g}' for b in self.buckets())} | "
                      f"prefetch {plan.prefetch_bucket_size:.3g} elements, "
                      f"{plan.micro_batches} micro-batch(es) per step")
        reporter.line("#  stage  reduce bucket  collectives                                   bytes/rank/step   "
                      + ("full model   " if full else "") + "paper (xP)   ratio   time/step (us)   busbw")
        for repetition in range(plan.repetitions):
            for bucket, stage in ((b, s) for b in self.buckets() for s in plan.stages):
                sched = self.schedule(stage, world, bucket)
                call = _bind(sched, dtype.torch_dtype, session.device, world, session.group)
                timing = session.time_call(call, f"ZeRO-{stage} step (buckets of {bucket:.3g} elements)")
                moved = sum(c.numel * dtype.itemsize * volume_factor(c.op, world) for c in sched)
                total = sum(c.numel * dtype.itemsize for c in sched)
                paper = (PAPER_VOLUME[stage] * plan.micro_batches * params * plan.scale * dtype.itemsize
                         * (world - 1) / world)
                ops = Counter(c.op for c in sched)
                by_op = {op: {"count": ops[op], "bytes": sum(c.numel for c in sched if c.op == op) * dtype.itemsize}
                         for op in sorted(ops)}
                if session.rank == 0:
                    row = session.record(collective="zero_step", dtype=dtype.name, op="sum", root=-1,
                                         size_bytes=total, count=sum(c.numel for c in sched), in_place=True,
                                         busbw_factor=moved / total, m=timing.measurement(None),
                                         repetition=repetition, zero_stage=stage,
                                         bucket_bytes=bucket * dtype.itemsize,
                                         n_collectives=len(sched), scale=plan.scale,
                                         bytes_per_rank=int(moved), paper_bytes_per_rank=int(paper),
                                         ops=json.dumps(by_op, sort_keys=True))
                    session.write([row])
                    counts = ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))
                    at_full = f"{format_size(moved / plan.scale):>10s}   " if full else ""
                    reporter.line(f"  {stage:5d}  {bucket:13.3g}  {counts:44s}  {format_size(moved):>15s}   {at_full}"
                                  f"{PAPER_VOLUME[stage] * plan.micro_batches}P={format_size(paper):>9s}  {moved / paper:6.3f}  "
                                  f"{row['time_us']:15.0f}  {row['busbw_GBps']:6.3f}" + wire.mark(row.get("wire")))
                reporter.advance(f"stage {stage}")
        if full:
            reporter.line(f"# bytes/rank/step and paper are the scaled model's (--scale {plan.scale:g}); full model: "
                          f"the same step's bytes per rank at full size ({plan.model}: {params / 1e9:.3g}B parameters, "
                          f"{format_size(params * dtype.itemsize)} of {dtype.name})")
        return False


def _bind(sched: list[Comm], torch_dtype, device, world: int, group=None) -> Callable[[], None]:
    """One step: every collective of the schedule, in order, each on its own buffers."""
    calls = []
    for c in sched:
        full = torch.ones(c.numel, dtype=torch_dtype, device=device)
        part = torch.ones(c.numel // world, dtype=torch_dtype, device=device)
        if c.op == "all_reduce":
            calls.append(lambda t=full: dist.all_reduce(t, group=group))
        elif c.op == "reduce":
            # DeepSpeed reduces each bucket's slices to the ranks that own them: one reduce per owner
            owners = [full[r * part.numel():(r + 1) * part.numel()] for r in range(world)]
            calls.append(lambda owners=owners: [dist.reduce(t, dst=r, group=group) for r, t in enumerate(owners)])
        elif c.op == "all_gather":
            calls.append(lambda o=full, i=part: all_gather_flat(o, i, group=group))
        elif c.op == "reduce_scatter":
            calls.append(lambda o=part, i=full: reduce_scatter_flat(o, i, group=group))
        else:
            raise ValueError(c.op)

    def step() -> None:
        for call in calls:
            call()

    return step
