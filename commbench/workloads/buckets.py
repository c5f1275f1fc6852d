"""Gradient buckets: one step's gradients reduced in buckets, the way DeepSpeed's ZeRO 1/2
(and DDP) do it, for several bucket sizes side by side.

DeepSpeed counts bucket sizes in elements (reduce_bucket_size: 5e8 means 5e8 gradient
elements, 1 GB in bf16). Per bucket size, one timed iteration reduces every bucket of a flat
gradient buffer, with up to `overlap` collectives in flight (async ops, each one waited on), and
the row records the time of the whole reduction: its algbw is gradient bytes / time and busbw
applies the collective's bus factor, so the curve over bucket sizes shows where per-collective
latency stops mattering (the knee users tune for).

With --layout tp=2 (docs/LAYOUTS.md) every data-parallel group reduces its share of the gradients
(--grad-bytes / (tp x pp): the parameters it holds) at once; a row per group (harness/groups.py).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar
from collections.abc import Callable

import torch
import torch.distributed as dist

from commbench.harness import faults
from commbench.core.vocab import check_backend_support, chunk_elements
from commbench.harness.collectives import BY_NAME, Buffers, CallArgs
from commbench.harness.data import check_bytes, count_mismatches, input_pattern, reducer
from commbench.harness.dtypes import get_dtype
from commbench.harness.memory import check_need
from commbench.core.errors import BadInput
from commbench.core.launch import RankEnv
from commbench.core.options import RunOptions
from commbench.harness import groups as grouping
from commbench.harness.session import Measurement, Session
from commbench.core.layout import GroupWork, InDataGroups
from commbench.core import wire
from commbench.core.units import format_size


@dataclass
class BucketPlan(RunOptions):
    grad_bytes: int = 64 << 20
    bucket_elems: list[int] = field(default_factory=lambda: [10**5, 10**6, 10**7, 5 * 10**7, 5 * 10**8])
    dtype: str = "bfloat16"
    op: str = "all_reduce"
    overlap: int = 1
    params: int | None = None  # the model size the gradients came from, when given that way
    workload: str = "buckets"


@dataclass(frozen=True)
class BucketLayout:
    """How one bucket size cuts the flat gradient buffer of one rank."""

    total: int  # gradient elements reduced per step
    bucket: int  # elements per bucket (the last one may be smaller)
    starts: tuple[int, ...]

    @property
    def n_buckets(self) -> int:
        return len(self.starts)

    def bounds(self):
        for start in self.starts:
            yield start, min(start + self.bucket, self.total)


MAX_BUCKETS = 100_000  # per step: each bucket is a view and a collective of its own


def _cut(plan: BucketPlan, bucket_elems: int, world: int, shards: int = 1) -> tuple[int, int]:
    """(elements reduced, elements per bucket). reduce_scatter needs every bucket to split evenly
    over the ranks: sizes are rounded down to a multiple of world chunks of 16 bytes
    (vocab.chunk_elements), as nccl-tests rounds its reduce_scatter. `shards`: the ranks that share
    one model copy (--layout's tp x pp), each dp group reducing its 1/shards of the gradients."""
    itemsize = get_dtype(plan.dtype).itemsize
    total = plan.grad_bytes // shards // itemsize
    bucket = max(1, min(bucket_elems, total))
    if plan.op == "reduce_scatter":
        unit = chunk_elements(itemsize) * world
        total, bucket = (total // unit) * unit, max(unit, (bucket // unit) * unit)
    return total, bucket


def layout_for(plan: BucketPlan, bucket_elems: int, world: int, shards: int = 1) -> BucketLayout:
    total, bucket = _cut(plan, bucket_elems, world, shards)
    return BucketLayout(total, bucket, tuple(range(0, total, bucket)))


@dataclass
class BucketWorkload(InDataGroups):
    command: ClassVar[str] = "buckets"
    plan: BucketPlan
    shards: int = 1  # ranks that share one model copy (--layout's tp x pp): a dp group reduces 1/shards


    def layouts(self, world: int) -> list[BucketLayout]:
        seen, out = set(), []
        for b in self.plan.bucket_elems:
            lay = layout_for(self.plan, b, world, self.shards)
            if lay.total and lay.bucket not in seen:
                seen.add(lay.bucket)
                out.append(lay)
        return out

    def validate(self, world: int) -> None:
        world = self.group_size(world)  # the ranks one reduction spans: a dp group's with --layout
        for elems in self.plan.bucket_elems:  # counted before any layout is built
            total, bucket = _cut(self.plan, elems, world, self.shards)
            if -(-total // bucket) > MAX_BUCKETS:
                raise BadInput(f"{format_size(self.plan.grad_bytes)} of gradients in buckets of {elems:,} elements is "
                               f"{-(-total // bucket):,} buckets per step; the most is {MAX_BUCKETS:,}: raise "
                               "--bucket-size or lower --grad-bytes (or --params)")
        if not self.layouts(world):
            itemsize = get_dtype(self.plan.dtype).itemsize
            unit = itemsize * (chunk_elements(itemsize) * world if self.plan.op == "reduce_scatter" else 1)
            raise BadInput(f"--grad-bytes {self.plan.grad_bytes} holds no whole bucket on {world} ranks: "
                           f"raise it to at least {unit}")

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        check_backend_support(backend, get_dtype(self.plan.dtype), "sum")
        need = self.plan.grad_bytes * (2 if self.plan.op == "reduce_scatter" else 1)
        need += check_bytes(self.plan.grad_bytes // get_dtype(self.plan.dtype).itemsize) if self.plan.check else 0
        check_need(need, env.local_world_size, device, f"reducing {format_size(self.plan.grad_bytes)} of gradients",
                   "lower --grad-bytes (or --params)" + (" or use --no-check" if self.plan.check else ""))

    def total_points(self, world: int) -> int:
        return len(self.layouts(self.group_size(world)))

    def run(self, session: Session, repetitions: range) -> bool:
        plan = self.plan
        work = self.data_groups(session.world)
        mine = grouping.build([work], session.rank)[0] if work else None
        rank, world = (mine.local, mine.size) if mine else (session.rank, session.world)
        dtype = get_dtype(plan.dtype)
        self._device = str(session.device)
        grads = torch.empty(layout_for(plan, plan.grad_bytes, world, self.shards).total, dtype=dtype.torch_dtype,
                            device=session.device)
        out = torch.empty(grads.numel() // world, dtype=dtype.torch_dtype, device=session.device) \
            if plan.op == "reduce_scatter" else None
        reporter = session.reporter
        reporter.line(f"# Gradient buckets: {format_size(grads.numel() * dtype.itemsize)} of {dtype.name} "
                      f"gradients{f' ({plan.params:,} parameters)' if plan.params else ''}, {plan.op} per bucket, "
                      f"{plan.overlap} in flight")
        if work:
            reporter.line(self._groups_line(work))
        reporter.line("#  bucket (elements)   bucket (B)  collectives   time/step (us)   algbw   busbw  #wrong")
        step = _Step(session, mine, grouping.group_session(session, mine) if mine else session, grads, out,
                     CallArgs(rank, world, 0, "sum"))
        any_wrong = False
        for repetition in repetitions:
            reporter.repetition(repetition, session.ctx.plan.repetitions)
            for lay in self.layouts(world):
                any_wrong = self._point(step, lay, repetition) or any_wrong
                reporter.advance(f"bucket {lay.bucket}")
        if mine:
            grouping.release([mine])
        return any_wrong

    def _groups_line(self, work: GroupWork) -> str:
        solo = "; with each alone too (--solo: A B B A)" if self.plan.solo else ""
        shown = " ".join(f"{i}:[{','.join(map(str, g))}]" for i, g in enumerate(work.groups))
        return (f"# In {len(work.groups)} data-parallel groups of {len(work.groups[0])} ranks, all at once{solo}; "
                f"each reduces 1/{self.shards} of --grad-bytes (--layout's tp x pp): dp {shown}")

    def _point(self, step: _Step, lay: BucketLayout, repetition: int) -> bool:
        """One bucket size: its step timed (in every dp group at once with --layout), checked, its
        rows written and a line each (a group's concurrent row with --layout); True if wrong."""
        plan, session, args, mine = self.plan, step.session, step.args, step.mine
        dtype = get_dtype(plan.dtype)
        call = self._bind(lay, step.grads, step.out, args.world, step.sub.group)
        step.grads.copy_(input_pattern(args.rank, step.grads.numel(), dtype, "sum", step.grads.device))
        label = f"{plan.op} of buckets of {lay.bucket:,} elements"
        check = (lambda: self._check(step, lay, call)) if plan.check else None

        def record(index: int, m: Measurement) -> dict:
            return session.record(collective=plan.op, dtype=dtype.name, op="sum", root=-1,
                                  size_bytes=lay.total * dtype.itemsize, count=lay.total, in_place=step.out is None,
                                  busbw_factor=BY_NAME[plan.op].busbw_factor(args.world), m=m, repetition=repetition,
                                  bucket_bytes=lay.bucket * dtype.itemsize, n_collectives=lay.n_buckets,
                                  overlap=plan.overlap)

        if mine is None:
            timing = session.time_call(call, label)
            wrong = check() if check else None
            rows = [record(0, timing.measurement(wrong))] if session.rank == 0 else []
        else:
            results, wrong = grouping.measure(session, mine, step.sub, call, label, plan.solo, check)
            rows = grouping.group_rows(session, mine.work, results, True, record) if results is not None else []
        session.write(rows)
        for row in rows:
            if row.get("concurrent") is not False:
                session.reporter.line(_line(row, lay, dtype.itemsize))
        return bool(wrong) or any(r["wrong"] for r in rows)

    def _check(self, step: _Step, lay: BucketLayout, call: Callable[[], None]) -> int:
        """#wrong over the ranks one reduction spans: the inputs again, one call, each rank's output."""
        args, session = step.args, step.session
        dtype = get_dtype(self.plan.dtype)
        step.grads.copy_(input_pattern(args.rank, step.grads.numel(), dtype, "sum", step.grads.device))
        call()
        if session.device.type == "cuda":
            torch.cuda.synchronize(session.device)
        got = step.grads if step.out is None else step.out
        if faults.corrupts_output(session.rank):
            got.view(-1)[0] += 1
        return step.sub.sum_over_ranks(count_mismatches(got, self._expected(lay, args, dtype), dtype, args))

    def _bind(self, lay: BucketLayout, grads: torch.Tensor, out: torch.Tensor | None, world: int,
              group=None) -> Callable[[], None]:
        """One step's reduction: every bucket, at most `overlap` collectives in flight."""
        bound = BY_NAME[self.plan.op]
        if bound.start is None:
            raise ValueError(self.plan.op)
        inputs = [grads[a:b] for a, b in lay.bounds()]
        # all_reduce works on each bucket in place; reduce_scatter writes it to the rank's part of `out`
        outputs = inputs if out is None else [out[a // world:b // world] for a, b in lay.bounds()]
        args = CallArgs(0, world, 0, "sum", group, async_op=True)
        launches = [bound.start(Buffers(i, o), args) for i, o in zip(inputs, outputs)]
        depth = self.plan.overlap

        def step() -> None:
            pending: deque[dist.Work | None] = deque()
            for launch in launches:
                pending.append(launch())
                if len(pending) >= depth:
                    _wait(pending.popleft())
            while pending:
                _wait(pending.popleft())

        return step

    def _expected(self, lay: BucketLayout, args: CallArgs, dtype) -> torch.Tensor:
        device = torch.device(self._device)
        full = reducer("sum", args.world, dtype)(lambda r: input_pattern(r, lay.total, dtype, "sum", device))
        if self.plan.op == "all_reduce":
            return full
        chunks = []
        for a, b in lay.bounds():
            c = (b - a) // args.world
            chunks.append(full[a + args.rank * c: a + (args.rank + 1) * c])
        return torch.cat(chunks)


@dataclass
class _Step:
    """What every bucket size of a run shares on this rank: its session, its dp group with --layout
    (and the session measuring on it; the run's without), the gradient buffers and its place."""

    session: Session
    mine: grouping.RankGroup | None
    sub: Session
    grads: torch.Tensor
    out: torch.Tensor | None
    args: CallArgs


def _wait(work: dist.Work | None) -> None:
    if work is not None:  # a started call with async_op always has one
        work.wait()


def _line(row: dict, lay: BucketLayout, itemsize: int) -> str:
    wrong = row.get("wrong")
    return (f"  {lay.bucket:18d} {lay.bucket * itemsize:12d} {lay.n_buckets:12d} "
            f"{row['time_us']:16.1f} {row['algbw_GBps']:7.3f} {row['busbw_GBps']:7.3f} "
            f"{'N/A' if wrong is None else wrong:>7}" + wire.mark(row.get("wire")) + grouping.row_suffix(row))
