"""Gradient buckets: one step's gradients reduced in buckets, the way DeepSpeed's ZeRO 1/2
(and DDP) do it, for several bucket sizes side by side.

DeepSpeed counts bucket sizes in elements (reduce_bucket_size: 5e8 means 5e8 gradient
elements, 1 GB in bf16). Per bucket size, one timed iteration reduces every bucket of a flat
gradient buffer, with up to `overlap` collectives in flight (async ops, each one waited on), and
the row records the time of the whole reduction: its algbw is gradient bytes / time and busbw
applies the collective's bus factor, so the curve over bucket sizes shows where per-collective
latency stops mattering (the knee users tune for).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from collections.abc import Callable

import torch
import torch.distributed as dist

from commbench.harness import faults
from commbench.core.vocab import check_backend_support, chunk_elements
from commbench.harness.collectives import BY_NAME, CallArgs, reduce_scatter_flat
from commbench.harness.data import check_bytes, count_mismatches, input_pattern, reducer
from commbench.harness.dtypes import get_dtype, torch_op
from commbench.harness.memory import check_need
from commbench.core.errors import BadInput
from commbench.core.launch import RankEnv
from commbench.core.options import RunOptions
from commbench.harness.runner import Session
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


def _cut(plan: BucketPlan, bucket_elems: int, world: int) -> tuple[int, int]:
    """(elements reduced, elements per bucket). reduce_scatter needs every bucket to split evenly
    over the ranks: sizes are rounded down to a multiple of world chunks of 16 bytes
    (vocab.chunk_elements), as nccl-tests rounds its reduce_scatter."""
    itemsize = get_dtype(plan.dtype).itemsize
    total = plan.grad_bytes // itemsize
    bucket = max(1, min(bucket_elems, total))
    if plan.op == "reduce_scatter":
        unit = chunk_elements(itemsize) * world
        total, bucket = (total // unit) * unit, max(unit, (bucket // unit) * unit)
    return total, bucket


def layout_for(plan: BucketPlan, bucket_elems: int, world: int) -> BucketLayout:
    total, bucket = _cut(plan, bucket_elems, world)
    return BucketLayout(total, bucket, tuple(range(0, total, bucket)))


@dataclass
class BucketWorkload:
    plan: BucketPlan

    def layouts(self, world: int) -> list[BucketLayout]:
        seen, out = set(), []
        for b in self.plan.bucket_elems:
            lay = layout_for(self.plan, b, world)
            if lay.total and lay.bucket not in seen:
                seen.add(lay.bucket)
                out.append(lay)
        return out

    def validate(self, world: int) -> None:
        for elems in self.plan.bucket_elems:  # counted before any layout is built
            total, bucket = _cut(self.plan, elems, world)
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
        return len(self.layouts(world))

    def run(self, session: Session, repetitions: range) -> bool:
        plan, rank, world = self.plan, session.rank, session.world
        dtype = get_dtype(plan.dtype)
        self._device = str(session.device)
        collective = BY_NAME[plan.op]
        args = CallArgs(rank, world, 0, "sum")
        grads = torch.empty(layout_for(plan, plan.grad_bytes, world).total, dtype=dtype.torch_dtype,
                            device=session.device)
        out = torch.empty(grads.numel() // world, dtype=dtype.torch_dtype, device=session.device) \
            if plan.op == "reduce_scatter" else None
        reporter = session.reporter
        reporter.line(f"# Gradient buckets: {format_size(grads.numel() * dtype.itemsize)} of {dtype.name} "
                      f"gradients{f' ({plan.params:,} parameters)' if plan.params else ''}, {plan.op} per bucket, "
                      f"{plan.overlap} in flight")
        reporter.line("#  bucket (elements)   bucket (B)  collectives   time/step (us)   algbw   busbw  #wrong")
        any_wrong = False
        for repetition in repetitions:
            reporter.repetition(repetition, session.ctx.plan.repetitions)
            for lay in self.layouts(world):
                call = self._bind(lay, grads, out, world, session.group)
                grads.copy_(input_pattern(rank, grads.numel(), dtype, "sum", grads.device))
                timing = session.time_call(call, f"{plan.op} of buckets of {lay.bucket:,} elements")
                wrong = None
                if plan.check:
                    grads.copy_(input_pattern(rank, grads.numel(), dtype, "sum", grads.device))
                    call()
                    if session.device.type == "cuda":
                        torch.cuda.synchronize(session.device)
                    got = grads if out is None else out
                    if faults.corrupts_output(rank):
                        got.view(-1)[0] += 1
                    wrong = session.sum_over_ranks(count_mismatches(got, self._expected(lay, args, dtype), dtype, args))
                any_wrong = any_wrong or bool(wrong)
                m = timing.measurement(wrong)
                if rank == 0:
                    row = session.record(collective=plan.op, dtype=dtype.name, op="sum", root=-1,
                                         size_bytes=lay.total * dtype.itemsize, count=lay.total, in_place=out is None,
                                         busbw_factor=collective.busbw_factor(world), m=m, repetition=repetition,
                                         bucket_bytes=lay.bucket * dtype.itemsize, n_collectives=lay.n_buckets,
                                         overlap=plan.overlap)
                    session.write([row])
                    reporter.line(f"  {lay.bucket:18d} {lay.bucket * dtype.itemsize:12d} {lay.n_buckets:12d} "
                                  f"{row['time_us']:16.1f} {row['algbw_GBps']:7.3f} {row['busbw_GBps']:7.3f} "
                                  f"{'N/A' if wrong is None else wrong:>7}" + wire.mark(row.get("wire")))
                reporter.advance(f"bucket {lay.bucket}")
        return any_wrong

    def _bind(self, lay: BucketLayout, grads: torch.Tensor, out: torch.Tensor | None, world: int,
              group=None) -> Callable[[], None]:
        """One step's reduction: every bucket, at most `overlap` collectives in flight."""
        inputs = [grads[a:b] for a, b in lay.bounds()]
        if out is None:
            op = torch_op("sum")
            launches = [lambda t=t: dist.all_reduce(t, op=op, async_op=True, group=group) for t in inputs]
        else:
            outputs = [out[a // world:b // world] for a, b in lay.bounds()]
            launches = [lambda i=i, o=o: reduce_scatter_flat(o, i, op=torch_op("sum"), async_op=True, group=group)
                        for i, o in zip(inputs, outputs)]
        depth = self.plan.overlap

        def step() -> None:
            pending = deque()
            for launch in launches:
                pending.append(launch())
                if len(pending) >= depth:
                    pending.popleft().wait()
            while pending:
                pending.popleft().wait()

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
