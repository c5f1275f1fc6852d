"""The replay workload: a recorded job's communication (core/trace.py, worked out by
core/replayprogram.py) issued again on this fabric: the trace's groups created, each step's ops
in the recorded order on each rank, each on its own buffers, async ops left in flight until the
step ends (they overlap what follows, as the job let them), the compute gaps slept with
--with-gaps. A step is one point of the harness (warm-up, the stop rule, max over ranks,
stragglers, wire counters); each op's own time is read inside the same iterations. Rows: one per
step (`replay_step`) and one per op (docs/REPLAY.md, "Replay")."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from commbench.core import replayprogram as rp
from commbench.core.errors import BadInput
from commbench.core.launch import RankEnv
from commbench.core.layout import GroupWork
from commbench.core.options import RunOptions
from commbench.core.trace import WORLD, Op
from commbench.core.tracereaders import read_any
from commbench.core.units import format_size, format_us
from commbench.core.vocab import BY_NAME, volume_factor
from commbench.harness.dtypes import get_dtype
from commbench.harness import groups as grouping
from commbench.harness.collectives import BY_NAME as BOUND, Buffers, CallArgs, Collective
from commbench.harness.memory import check_need
from commbench.harness.session import Measurement, Session

STEP = rp.STEP_COLLECTIVE  # a step row's collective


@dataclass
class ReplayPlan(RunOptions):
    traces: list[str] = field(default_factory=list)  # one commbench trace, or one file per rank of another source
    steps: str = "marked"  # marked | all | 0,3
    with_gaps: bool = False
    replay_world: int | None = None  # --world-size: the job at another data-parallel size
    workload: str = "replay"


@dataclass
class ReplayWorkload:
    command: ClassVar[str] = "replay"
    plan: ReplayPlan
    _programs: dict[int, rp.Program] = field(default_factory=dict)  # by the run's world size

    @property
    def name(self) -> str:
        return ", ".join(Path(t).name for t in self.plan.traces)

    def program(self, world: int) -> rp.Program:
        """What a run of `world` ranks replays (worked out once: every rank reads the trace)."""
        if world not in self._programs:
            p = self.plan
            built = rp.build(read_any(p.traces), self.name, p.steps, p.with_gaps)
            self._programs[world] = rp.for_run(built, world, self.name, p.replay_world, p.layout, p.order)
        return self._programs[world]

    def validate(self, world: int) -> None:
        if self.plan.cuda_graph:
            raise BadInput("--cuda-graph captures one call, and a replayed step is many: drop --cuda-graph")
        self.program(world)

    def prepare(self, backend: str, device: torch.device, env: RankEnv) -> None:
        check_need(int(self.program(env.world_size).buffer_bytes(env.rank) * 1.1), env.local_world_size, device,
                   "one replayed step's buffers", "replay fewer steps (--steps)")

    def total_points(self, world: int) -> int:
        return len(self.program(world).shapes)

    def run(self, session: Session, repetitions: range) -> bool:
        program, reporter = self.program(session.world), session.reporter
        reporter.line(f"# Replay of {self.name}: {program.world_size} ranks, {len(program.groups)} group(s) besides "
                      f"the default, {len(program.shapes)} distinct step(s)"
                      + (", compute gaps kept (--with-gaps)" if program.with_gaps else ""))
        groups = self._make_groups(session)
        reporter.line(f"#  {'step':>8s}  {'ops':>4s}  {'bytes':>9s}  {'time/step':>10s}  {'recorded':>10s}  "
                      f"{'ratio':>6s}  largest ops")
        try:
            for repetition in repetitions:
                reporter.repetition(repetition, session.ctx.plan.repetitions)
                for shape in program.shapes:
                    self._point(session, shape, groups, repetition)
                    reporter.advance(f"step {shape.step}")
        finally:
            for pg in groups.values():
                if pg is not session.group:
                    dist.destroy_process_group(pg)
        return False

    def _make_groups(self, session: Session) -> dict[str, Any]:
        """The trace's groups, created in the same order on every rank (torch requires it)."""
        made: dict[str, Any] = {WORLD: session.group}
        for g in self.program(session.world).groups:
            made[g.id] = dist.new_group(list(g.ranks))
        return made

    def _point(self, session: Session, shape: rp.Shape, groups: dict[str, Any], repetition: int) -> None:
        mine = shape.ops.get(session.rank, ())
        step, durations = _bind(mine, groups, session.device, self.program(session.world))
        label = f"replayed step {shape.step} ({len(mine)} ops on rank {session.rank})"
        timing = session.time_call(step, label)
        own = {o.key: d[-timing.iters:] for o, d in zip(mine, durations)}
        everyone: list[dict] = [{} for _ in range(session.world)]
        dist.all_gather_object(everyone, own, group=session.group)
        if session.rank != 0:
            return
        slowest = _slowest(everyone, timing.iters)
        rows = [self._step_row(session, shape, timing.measurement(None), repetition)]
        rows += [self._op_row(session, shape, key, samples, timing.iters, repetition)
                 for key, samples in slowest.items()]
        session.write(rows)
        session.reporter.line(self._line(rows[0], rows[1:]))

    def _common(self, shape: rp.Shape) -> dict:
        return {"trace_step": shape.step, "trace_steps": rp.format_steps(shape.steps),
                "trace_file": self.name}

    def _step_row(self, session: Session, shape: rp.Shape, m: Measurement, repetition: int) -> dict:
        keys = shape.keys()
        program = self.program(session.world)
        sizes = {k: shape.first(k).bytes for k in keys}
        total = sum(sizes.values()) or 1
        moved = sum(sizes[k] * volume_factor(shape.first(k).op, program.group_size(shape.first(k).group))
                    for k in keys)
        counts = Counter(shape.first(k).op for k in keys)
        ops = {op: {"count": counts[op], "bytes": sum(sizes[k] for k in keys if shape.first(k).op == op)}
               for op in sorted(counts)}
        dtypes = {shape.first(k).dtype for k in keys if shape.first(k).dtype}
        return session.record(collective=STEP, dtype=dtypes.pop() if len(dtypes) == 1 else "mixed", op=None,
                              root=-1, size_bytes=total, count=total, in_place=False, busbw_factor=moved / total,
                              m=m, repetition=repetition, n_collectives=len(keys), ops=json.dumps(ops, sort_keys=True),
                              recorded_us=shape.recorded_us, **self._common(shape))

    def _op_row(self, session: Session, shape: rp.Shape, key: rp.Key, samples: list[float], iters: int,
                repetition: int) -> dict:
        o = shape.first(key)
        size = max(1, o.bytes)
        itemsize = _itemsize(o.dtype)
        spec = BY_NAME.get(o.op)
        program = self.program(session.world)
        factor = spec.busbw_factor(program.group_size(o.group)) if spec else 1.0
        return session.record(collective=o.op, dtype=o.dtype or "uint8", op="sum" if spec and spec.reduces else None,
                              root=-1 if o.peer is None else o.peer, size_bytes=o.bytes, count=size // itemsize,
                              in_place=False, busbw_factor=factor,
                              m=Measurement(samples, iters, None), repetition=repetition, trace_op=shape.op_index[key],
                              recorded_us=shape.op_recorded_us.get(key), **self._common(shape),
                              **_group_columns(session, program, o.group))

    def _line(self, step: dict, ops: list[dict]) -> str:
        recorded = step.get("recorded_us")
        ratio = f"{step['time_us'] / recorded:6.2f}" if recorded else f"{'-':>6s}"
        top = sorted(ops, key=lambda r: -r["time_us"])[:3]
        largest = ", ".join(f"{r['collective']} {format_size(r['size_bytes'])} {format_us(r['time_us'])}" for r in top)
        return (f"  {step['trace_steps']:>8s}  {step['n_collectives']:4d}  {format_size(step['size_bytes']):>9s}  "
                f"{format_us(step['time_us']):>10s}  {format_us(recorded) if recorded else '-':>10s}  {ratio}  "
                f"{largest}")


def _group_columns(session: Session, program: rp.Program, gid: str) -> dict[str, Any]:
    """The op's trace group; with --layout also the data-parallel group it ran in, named as sweep's
    layout rows name theirs (group_dim, group_index, the group's size and hosts: harness/groups.py)."""
    base, index = rp.split_group(gid)
    if index is None:
        return {"trace_group": gid}
    dp = GroupWork("dp", "replay", tuple(g.ranks for g in program.groups if rp.split_group(g.id)[0] == WORLD))
    return {"trace_group": base, **grouping.group_columns(session, dp, index, True, None)}


def _slowest(everyone: list[dict], iters: int) -> dict[rp.Key, list[float]]:
    """Per op, each iteration's time on the slowest of the ranks that issued it (s)."""
    out: dict[rp.Key, list[float]] = {}
    for own in everyone:
        for key, samples in own.items():
            have = out.get(key)
            out[key] = list(samples) if have is None else [max(a, b) for a, b in zip(have, samples)]
    return {k: v for k, v in out.items() if len(v) == iters}


def _itemsize(dtype: str) -> int:
    try:
        return get_dtype(dtype).itemsize if dtype else 1
    except BadInput:
        return 1


def _torch_dtype(dtype: str) -> torch.dtype:
    """The op's dtype where torch has it; bytes (uint8) where the trace says none or one torch lacks."""
    try:
        return get_dtype(dtype).torch_dtype if dtype else torch.uint8
    except BadInput:
        return torch.uint8


def _bind(ops: tuple[rp.ReplayOp, ...], groups: dict[str, Any], device: torch.device,
          program: rp.Program) -> tuple[Callable[[], None], list[list[float]]]:
    """One step of one rank: every op launched in order on its own buffers; a synchronous op waited
    for at once, an async one at the step's end. Returns the step and, per op, its times (s), one
    per call: an async op's from its launch to the end of its wait."""
    launches = [(_launch(o.op, groups[o.op.group], device, program), o.op.async_op, o.gap_s) for o in ops]
    durations: list[list[float]] = [[] for _ in ops]
    gaps = program.with_gaps
    cuda = device.type == "cuda"

    def step() -> None:
        pending = []
        for i, (launch, is_async, gap) in enumerate(launches):
            if gaps and gap > 0:
                time.sleep(gap)
            start = time.perf_counter()
            work = launch()
            if is_async:
                pending.append((i, start, work))
                continue
            if work is not None:
                work.wait()
            if cuda:  # the op's own time: a GPU op has only been queued when the call returns
                torch.cuda.synchronize(device)
            durations[i].append(time.perf_counter() - start)
        for i, start, work in pending:
            if work is not None:
                work.wait()
            if cuda:
                torch.cuda.synchronize(device)
            durations[i].append(time.perf_counter() - start)

    return step, durations


def _launch(o: Op, group: Any, device: torch.device, program: rp.Program) -> Callable[[], Any]:
    """The op as a call on buffers of its recorded sizes; returns the work (None when synchronous).
    A collective commbench measures is started through its one torch binding (harness/collectives.py);
    the ops it does not measure (point-to-point, barrier, gather, scatter) are bound below."""
    dtype = _torch_dtype(o.dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    n = program.group_size(o.group)

    def make(numel: int) -> torch.Tensor:
        return torch.ones(numel, dtype=dtype, device=device)

    def buf(nbytes: int) -> torch.Tensor:
        return make(max(1, nbytes // itemsize))

    bound = BOUND.get(o.op)
    if bound is not None and bound.start is not None:
        args = CallArgs(o.rank, n, o.peer or 0, "sum", group, async_op=o.async_op)
        return bound.start(_buffers(bound, o, make, itemsize, n), args)
    unbound = _UNBOUND.get(o.op)
    if unbound is None:
        raise BadInput(f"replay cannot issue a {o.op!r} op (rank {o.rank}, op {o.index}): record the job again")
    return unbound(o, group, buf, n)


def _buffers(c: Collective, o: Op, make: Callable[[int], torch.Tensor], itemsize: int, n: int) -> Buffers:
    """The op's buffers: an all-to-all's recorded shares as they are; a collective counted per rank
    (the gather/scatter family, all-to-all) a chunk of the recorded size over the group, rounded up,
    and `n` of them; any other the recorded size whole."""
    if c.uneven and o.in_splits and o.out_splits:
        return Buffers(make(sum(o.in_splits)), make(sum(o.out_splits)), list(o.in_splits), list(o.out_splits))
    if c.per_rank_count:
        chunk = max(1, -(-o.bytes // n) // itemsize)
        return c.buffers(chunk * n, chunk, make)
    whole = max(1, o.bytes // itemsize)
    return c.buffers(whole, whole, make)


Buf = Callable[[int], torch.Tensor]  # a tensor of that many bytes (at least one element)


def _point(o: Op, group: Any, buf: Buf, n: int) -> Callable[[], Any]:
    """A send or a receive, blocking or not as recorded."""
    t = buf(o.bytes)
    call = {("send", False): dist.send, ("send", True): dist.isend,
            ("recv", False): dist.recv, ("recv", True): dist.irecv}[(o.op, o.async_op)]
    return lambda: call(t, o.peer, group=group)


def _barrier(o: Op, group: Any, buf: Buf, n: int) -> Callable[[], Any]:
    return lambda: dist.barrier(group=group, async_op=o.async_op)


def _gather(o: Op, group: Any, buf: Buf, n: int) -> Callable[[], Any]:
    root = o.peer or 0
    t = buf(o.bytes_in or o.bytes)
    parts = [torch.empty_like(t) for _ in range(n)] if o.rank == root else None
    return lambda: dist.gather(t, parts, dst=root, group=group, async_op=o.async_op)


def _scatter(o: Op, group: Any, buf: Buf, n: int) -> Callable[[], Any]:
    root = o.peer or 0
    t = buf(o.bytes_out or o.bytes)
    pieces = [torch.ones_like(t) for _ in range(n)] if o.rank == root else None
    return lambda: dist.scatter(t, pieces, src=root, group=group, async_op=o.async_op)


# The recorded ops that are no collective commbench measures, by the trace's name for them.
_UNBOUND: dict[str, Callable[[Op, Any, Buf, int], Callable[[], Any]]] = {
    "send": _point, "recv": _point, "barrier": _barrier, "gather": _gather, "scatter": _scatter}
