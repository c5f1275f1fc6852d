"""ZeRO schedules: one optimizer step's communication for a model shape and a DeepSpeed
config, per ZeRO stage, as arithmetic (no torch: the CLI checks shapes and tune plans with it;
workloads/zero.py runs a schedule with real collectives).

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

from collections import Counter
from dataclasses import dataclass

from commbench.core.errors import BadInput
from commbench.core.vocab import REDUCING, chunk_elements

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


REDUCTIONS = REDUCING  # what a step reduces gradients with
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


def scaled(schedule: list[Comm], scale: float, itemsize: int, world: int) -> list[Comm]:
    """Every message times `scale`, rounded to a whole chunk per rank (world chunks of 16 bytes:
    vocab.chunk_elements(itemsize) x world elements)."""
    unit = chunk_elements(itemsize) * world
    return [Comm(c.op, max(unit, int(c.numel * scale) // unit * unit), c.phase) for c in schedule]
