"""Capture a job's communication: wrap torch.distributed's collective and point-to-point functions,
record each call (op, bytes, dtype, group, async, times) per rank, write a part per rank, merge.

Two ways in. `commbench capture --out job.trace -- CMD` (cli/capture.py) puts a sitecustomize.py
first on PYTHONPATH with COMMBENCH_CAPTURE_PARTS set: every Python process of the job (the
launcher's too: torchrun, deepspeed, srun's) runs it, and it arms an import hook, so torch is
patched when the job imports torch.distributed and a process that never does pays nothing. The
context manager `capture(path)` patches at once; enter it before
deepspeed.init_distributed, which keeps its own references to all_gather_into_tensor and
reduce_scatter_tensor (deepspeed/comm/torch.py), or those two are refreshed here if DeepSpeed's
backend already exists. The functions are replaced both in torch.distributed and in
distributed_c10d, so a helper that calls another (all_gather_object -> all_gather) is recorded
by what it issues; a wrapped call made inside another wrapped call is not recorded twice.
Steps: the job may mark them (step(n)); otherwise, under DeepSpeed, each op carries the engine's
optimizer step (DeepSpeedEngine.forward and .step are followed for engine.global_steps).

Each op is kept in memory as a tuple and written at exit (the part file, JSON lines as in
core/trace.py); the cost per call is two clock reads and a tuple (benchmarks/capture_cost.py).
Not seen: torch's functional collectives (torch.distributed._functional_collectives, compiled
code), which go straight to C++ ops.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.abc
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

from commbench.core import exithooks
from commbench.core import trace as tr

PARTS_ENV = "COMMBENCH_CAPTURE_PARTS"


def _nbytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size()) if t is not None else 0


def _sum(ts: Any) -> int:
    return sum(_nbytes(t) for t in ts or ())


def _dtype(t: Any) -> str:
    return str(getattr(t, "dtype", "")).removeprefix("torch.")


# What each function moves: function name -> (op, extractor). An extractor takes the call's own
# arguments (same names as torch's signature) and returns (bytes_in, bytes_out, a tensor for the
# dtype, group, async_op, peer, in_splits, out_splits).
def _all_reduce(tensor, op=None, group=None, async_op=False, *a, **k):
    return _nbytes(tensor), _nbytes(tensor), tensor, group, async_op, None, None, None


def _broadcast(tensor, src=None, group=None, async_op=False, *a, **k):
    return _nbytes(tensor), _nbytes(tensor), tensor, group, async_op, src, None, None


def _reduce(tensor, dst=None, op=None, group=None, async_op=False, *a, **k):
    return _nbytes(tensor), _nbytes(tensor), tensor, group, async_op, dst, None, None


def _all_gather(tensor_list, tensor, group=None, async_op=False, *a, **k):
    return _nbytes(tensor), _sum(tensor_list), tensor, group, async_op, None, None, None


def _all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False, *a, **k):
    return _nbytes(input_tensor), _nbytes(output_tensor), input_tensor, group, async_op, None, None, None


def _reduce_scatter(output, input_list, op=None, group=None, async_op=False, *a, **k):
    return _sum(input_list), _nbytes(output), output, group, async_op, None, None, None


def _reduce_scatter_tensor(output, input, op=None, group=None, async_op=False, *a, **k):
    return _nbytes(input), _nbytes(output), input, group, async_op, None, None, None


def _all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False, *a, **k):
    ins, outs = input_tensor_list, output_tensor_list
    return (_sum(ins), _sum(outs), ins[0] if ins else None, group, async_op, None,
            tuple(int(t.numel()) for t in ins), tuple(int(t.numel()) for t in outs))


def _all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                       async_op=False, *a, **k):
    splits = (tuple(int(s) for s in input_split_sizes) if input_split_sizes else None,
              tuple(int(s) for s in output_split_sizes) if output_split_sizes else None)
    return _nbytes(input), _nbytes(output), input, group, async_op, None, *splits


def _gather(tensor, gather_list=None, dst=None, group=None, async_op=False, *a, **k):
    return _nbytes(tensor), _sum(gather_list), tensor, group, async_op, dst, None, None


def _scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, *a, **k):
    return _sum(scatter_list), _nbytes(tensor), tensor, group, async_op, src, None, None


def _send(tensor, dst=None, group=None, tag=0, *a, **k):
    return _nbytes(tensor), 0, tensor, group, False, dst, None, None


def _recv(tensor, src=None, group=None, tag=0, *a, **k):
    return 0, _nbytes(tensor), tensor, group, False, src, None, None


def _isend(tensor, dst=None, group=None, tag=0, *a, **k):
    return _nbytes(tensor), 0, tensor, group, True, dst, None, None


def _irecv(tensor, src=None, group=None, tag=0, *a, **k):
    return 0, _nbytes(tensor), tensor, group, True, src, None, None


def _barrier(group=None, async_op=False, *a, **k):
    return 0, 0, None, group, async_op, None, None, None


def _monitored_barrier(group=None, timeout=None, wait_all_ranks=False, *a, **k):
    return 0, 0, None, group, False, None, None, None


FUNCTIONS: dict[str, tuple[str, Callable[..., tuple]]] = {
    "all_reduce": ("all_reduce", _all_reduce), "broadcast": ("broadcast", _broadcast),
    "reduce": ("reduce", _reduce), "all_gather": ("all_gather", _all_gather),
    "all_gather_into_tensor": ("all_gather", _all_gather_into_tensor),
    "_all_gather_base": ("all_gather", _all_gather_into_tensor),
    "reduce_scatter": ("reduce_scatter", _reduce_scatter),
    "reduce_scatter_tensor": ("reduce_scatter", _reduce_scatter_tensor),
    "_reduce_scatter_base": ("reduce_scatter", _reduce_scatter_tensor),
    "all_to_all": ("all_to_all", _all_to_all), "all_to_all_single": ("all_to_all", _all_to_all_single),
    "gather": ("gather", _gather), "scatter": ("scatter", _scatter),
    "send": ("send", _send), "recv": ("recv", _recv), "isend": ("send", _isend), "irecv": ("recv", _irecv),
    "barrier": ("barrier", _barrier), "monitored_barrier": ("barrier", _monitored_barrier),
}


class Recorder:
    """This process's ops, kept as tuples until written."""

    def __init__(self, parts: Path) -> None:
        self.parts = parts
        self.rows: list[tuple] = []
        self.groups: dict[int, tuple[str, tuple[int, ...], str]] = {}  # id(pg) -> (name, ranks, desc)
        self.step: int | None = None
        self.marked = False  # the job marks its own steps: DeepSpeed's are not used
        self.inside = False
        self.written = False
        self.world: tuple[int, int] | None = None  # (rank, world size), read at the first op

    def add(self, op: str, call: str, facts: tuple, start: int, end: int) -> None:
        if self.world is None:  # while the group exists: a job may destroy it before the part is written
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                self.world = (dist.get_rank(), dist.get_world_size())
        self.rows.append((op, call, facts[0], facts[1], _dtype(facts[2]), self._group(facts[3]), bool(facts[4]),
                          self.step, facts[5], facts[6], facts[7], start, end))

    def _group(self, group: Any) -> str:
        key = id(group)
        known = self.groups.get(key)
        if known is None:
            known = self.groups[key] = _describe(group)
        return known[0]

    def trace(self) -> tr.Trace:
        import torch.distributed as dist

        ready = dist.is_available() and dist.is_initialized()
        if self.world is not None:
            rank, world = self.world
        else:
            rank = dist.get_rank() if ready else int(os.environ.get("RANK", "0"))
            world = dist.get_world_size() if ready else int(os.environ.get("WORLD_SIZE", "1"))
        ops = tuple(tr.Op(rank=rank, index=i, op=r[0], call=r[1], bytes_in=r[2], bytes_out=r[3], dtype=r[4],
                          group=r[5], async_op=r[6], step=r[7], peer=r[8], in_splits=r[9], out_splits=r[10],
                          start_ns=r[11], end_ns=r[12]) for i, r in enumerate(self.rows))
        groups = {g[0]: tr.Group(g[0], g[1], g[2]) for g in self.groups.values()}
        return tr.Trace(world_size=world, source="commbench-capture", groups=groups, ops=ops,
                        meta={"ranks": [rank]})

    def write_part(self) -> Path | None:
        # A launcher that never imported torch (`commbench lab run`) has nothing to write, and
        # importing torch now, at interpreter shutdown, fails ("can't register atexit after shutdown").
        dist = sys.modules.get("torch.distributed")
        if self.written or not (self.rows or (dist is not None and dist.is_available() and dist.is_initialized())):
            return None  # a launcher (torchrun) imports torch.distributed too, and is no rank
        self.written = True
        t = self.trace()
        rank = t.meta["ranks"][0]
        self.parts.mkdir(parents=True, exist_ok=True)
        path = self.parts / f"rank{rank}.{os.getpid()}.jsonl"  # pid: a restarted rank keeps both
        tr.write(t, path)
        return path


def _describe(group: Any) -> tuple[str, tuple[int, ...], str]:
    import torch.distributed as dist

    pg = group if group is not None else dist.group.WORLD
    try:
        ranks = tuple(dist.get_process_group_ranks(pg))
    except Exception:  # noqa: BLE001 - a group this rank is not in: its name is still worth keeping
        ranks = ()
    return str(getattr(pg, "group_name", "")), ranks, str(getattr(pg, "group_desc", ""))


_recorder: Recorder | None = None
_originals: dict[tuple[Any, str], Callable] = {}


def _wrap(name: str, fn: Callable, op: str, extract: Callable[..., tuple]) -> Callable:
    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        rec = _recorder
        if rec is None or rec.inside:
            return fn(*args, **kwargs)
        rec.inside = True
        start = time.time_ns()
        try:
            result = fn(*args, **kwargs)
        finally:
            rec.inside = False
        end = time.time_ns()
        rec.add(op, name, extract(*args, **kwargs), start, end)
        return result

    recorded.__commbench_original__ = fn  # type: ignore[attr-defined]
    return recorded


def install(module: Any = None) -> None:
    """Replace the functions in torch.distributed and distributed_c10d (once)."""
    if _originals:
        return
    if module is None:
        import torch.distributed as module
    targets = [module, sys.modules.get("torch.distributed.distributed_c10d")]
    for target in filter(None, targets):
        for name, (op, extract) in FUNCTIONS.items():
            fn = getattr(target, name, None)
            if fn is not None and not hasattr(fn, "__commbench_original__"):
                _originals[(target, name)] = fn
                setattr(target, name, _wrap(name, fn, op, extract))
    _refresh_deepspeed(module)


def _refresh_deepspeed(module: Any) -> None:
    """DeepSpeed's TorchBackend keeps references taken at init: point them at the wrapped functions."""
    comm = sys.modules.get("deepspeed.comm.comm")
    cdb = getattr(comm, "cdb", None)
    if cdb is None:
        return
    for attr, name in (("all_gather_function", "all_gather_into_tensor"),
                       ("reduce_scatter_function", "reduce_scatter_tensor")):
        if getattr(cdb, attr, None) is not None:
            setattr(cdb, attr, getattr(module, name))


def uninstall() -> None:
    for (target, name), fn in _originals.items():
        setattr(target, name, fn)
    _originals.clear()


def step(number: int | None) -> None:
    """Mark the ops issued from now on as step `number` (None: outside any step). A no-op without capture."""
    if _recorder is not None:
        _recorder.step = number
        _recorder.marked = True


def _write_at_exit() -> None:
    if _recorder is not None:
        _recorder.write_part()


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patch a module right after it is imported, in whatever process imports it."""

    def __init__(self, name: str, patch: Callable[[Any], None]) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run, patch = spec.loader.exec_module, self.patch

        def exec_module(module: Any) -> None:
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def mark_deepspeed_steps(engine_module: Any) -> None:
    """Label ops with DeepSpeed's optimizer step (engine.global_steps, read as each forward starts
    and after each engine.step()) unless the job marks steps itself with step()."""
    cls = getattr(engine_module, "DeepSpeedEngine", None)
    if cls is None or hasattr(cls.forward, "__commbench_original__"):
        return

    def follow(fn: Callable, before: bool) -> Callable:
        @functools.wraps(fn)
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            if before:
                _follow_step(self)
            result = fn(self, *args, **kwargs)
            if not before:
                _follow_step(self)
            return result

        wrapped.__commbench_original__ = fn  # type: ignore[attr-defined]
        return wrapped

    cls.forward, cls.step = follow(cls.forward, True), follow(cls.step, False)


def _follow_step(engine: Any) -> None:
    rec = _recorder
    if rec is not None and not rec.marked:
        rec.step = int(getattr(engine, "global_steps", 0))


def _arm(name: str, patch: Callable[[Any], None]) -> None:
    if name in sys.modules:
        patch(sys.modules[name])
    else:
        sys.meta_path.insert(0, _PatchOnImport(name, patch))


def autostart(parts: str) -> None:
    """Called by the sitecustomize that `commbench capture` puts on PYTHONPATH."""
    global _recorder
    _recorder = Recorder(Path(parts))
    atexit.register(_write_at_exit)
    exithooks.register(_write_at_exit)  # commbench's own ranks end by os._exit, past atexit
    _arm("torch.distributed", install)
    _arm("deepspeed.runtime.engine", mark_deepspeed_steps)


@contextlib.contextmanager
def capture(path: str | os.PathLike[str]) -> Iterator[Recorder]:
    """Record every rank's communication inside the block into one trace file at `path`: each
    rank writes its part; rank 0 merges them after a barrier (when the group still exists)."""
    global _recorder
    out = Path(path)
    parts = out.with_name(out.name + ".parts")
    _recorder = rec = Recorder(parts)
    install()
    _arm("deepspeed.runtime.engine", mark_deepspeed_steps)
    try:
        yield rec
    finally:
        _recorder = None
        uninstall()
        rec.write_part()
        _merge_on_rank0(parts, out)


def _merge_on_rank0(parts: Path, out: Path) -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        if dist.get_rank() != 0:
            return
    merge_parts(parts, out)


def merge_parts(parts: Path, out: Path) -> tr.Trace:
    """The parts directory's rank files as one trace at `out`; the parts removed."""
    files = sorted(parts.glob("rank*.jsonl")) if parts.is_dir() else []
    merged = tr.merge(tr.read(f) for f in files)
    tr.write(merged, out)
    for f in files:
        f.unlink()
    with contextlib.suppress(OSError):
        parts.rmdir()
    return merged
