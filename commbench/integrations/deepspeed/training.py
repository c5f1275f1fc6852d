"""The real DeepSpeed engine on a synthetic transformer, with DeepSpeed's comms logger as ground truth.

`run_engine()` is called by every rank inside an already initialised torch.distributed process
group (commbench's harness calls init_process_group("gloo"|"nccl", "tcp://...")). DeepSpeed
accepts that group: deepspeed.comm.init_distributed() wraps it in a TorchBackend when
torch.distributed is initialised and cdb is None (deepspeed/comm/comm.py init_distributed), and
deepspeed.initialize() only needs LOCAL_RANK in the environment (runtime/engine.py
_do_args_sanity_check), which is set here from the group when the launcher did not set it.

What comes back (`EngineResult`) is this rank's view: step times (max over ranks), parameter
count, and the comms logger's records read from deepspeed.comm.comms_logger.comms_dict
({record_name: {msg_size: [count, [latency_ms], [algbw_Gbps], [busbw_Gbps]]}}, see
deepspeed/utils/comms_logging.py CommsLogger.append). No printed text is parsed and
log_summary() (which prints, and barriers) is not needed.

Message sizes: DeepSpeed logs the size of the op's `tensor` argument (comm/utils.py
get_msg_size_from_args). For all_gather_into_tensor that is the per-rank input shard, for
reduce_scatter_tensor the whole input. `CommRecord.size_bytes` restates every record in
commbench's (nccl-tests') S definition, and `volume_bytes` in the ZeRO paper's units (an
all-reduce of S counts 2S: reduce-scatter + all-gather), so stage volumes compare with 2P / 3P.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.vocab import COLLECTIVES, volume_multiplier
from commbench.integrations.deepspeed import config as dsconfig
from commbench.integrations.deepspeed import adapt as dsadapt

# DeepSpeed record name -> commbench collective name.
_COLLECTIVE = {op: c.name for c in COLLECTIVES for op in c.deepspeed_ops} | {
    "barrier": "barrier", "log_summary_barrier": "barrier", "monitored_barrier": "barrier",
}

SHM_OP_NAME = "deepspeed_shm_comm"


@dataclass(frozen=True)
class CommRecord:
    """One (op, message size) row of DeepSpeed's comms logger, on one rank."""

    op: str                    # DeepSpeed's record name, e.g. all_reduce, all_gather_into_tensor
    collective: str            # commbench's name: all_reduce | all_gather | reduce_scatter | ...
    msg_bytes: int             # the size DeepSpeed logged (the op's `tensor` argument)
    size_bytes: int            # S as in docs/RESULTS.md / nccl-tests (all_gather: n x msg_bytes)
    count: int
    total_latency_ms: float
    avg_latency_ms: float
    ds_algbw_Gbps: float       # DeepSpeed's own figures (Gbit/s, calc_bw_log), trimmed mean
    ds_busbw_Gbps: float
    latencies_ms: tuple[float, ...] = ()

    @property
    def algbw_GBps(self) -> float:
        """S / mean latency in 1e9 bytes/s (docs/RESULTS.md). Meaningless for ops DeepSpeed issues with
        async_op=True (ZeRO-3's parameter all-gathers): their latency is the launch only."""
        return self.size_bytes / (self.avg_latency_ms / 1e3) / 1e9 if self.avg_latency_ms > 0 else 0.0

    @property
    def volume_bytes(self) -> float:
        """Bytes in the ZeRO paper's units for all `count` calls."""
        return self.count * self.size_bytes * volume_multiplier(self.collective)

    @property
    def total_bytes(self) -> int:
        return self.count * self.size_bytes


@dataclass(frozen=True)
class EngineResult:
    stage: int
    world_size: int
    rank: int
    device: str
    steps: int                          # timed optimizer steps (after warm-up)
    micro_batches_per_step: int         # gradient_accumulation_steps
    step_times_s: tuple[float, ...]     # per optimizer step, max over ranks
    warmup_time_s: float
    init_time_s: float                  # deepspeed.initialize
    backend_init_s: float               # deepspeed.init_distributed here (JIT build on first use); 0 if done before
    shm_op_cached_before: bool | None   # was the shm comm op already built in the torch extensions cache
    param_count: int                    # P in elements
    param_bytes: int                    # P in bytes of the training dtype
    dtype: str
    comm: tuple[CommRecord, ...]        # comms logger, timed steps only, this rank
    warmup_comm: tuple[CommRecord, ...]
    config: Mapping[str, Any] = field(repr=False)
    notes: tuple[str, ...] = ()
    deepspeed_version: str = ""

    def by_collective(self, records: tuple[CommRecord, ...] | None = None) -> dict[str, dict[str, float]]:
        """collective -> {count, bytes (sum of S), volume_bytes} per optimizer step."""
        out: dict[str, dict[str, float]] = {}
        for rec in self.comm if records is None else records:
            row = out.setdefault(rec.collective, {"count": 0.0, "bytes": 0.0, "volume_bytes": 0.0})
            row["count"] += rec.count / self.steps
            row["bytes"] += rec.total_bytes / self.steps
            row["volume_bytes"] += rec.volume_bytes / self.steps
        return out

    @property
    def volume_bytes_per_step(self) -> float:
        return sum(r.volume_bytes for r in self.comm) / self.steps

    @property
    def volume_ratio(self) -> float:
        """Bytes per optimizer step in the ZeRO paper's units, over P (bytes)."""
        return self.volume_bytes_per_step / self.param_bytes

    @property
    def volume_ratio_per_micro_batch(self) -> float:
        return self.volume_ratio / self.micro_batches_per_step


# ----------------------------------------------------------------------------- model

def build_model(layers: int, hidden: int, vocab: int, seq: int):
    """A transformer-shaped model: Embedding, N x (LayerNorm, Linear qkv, Linear proj,
    Linear mlp up, Linear mlp down), Linear head. forward(tokens, targets) returns the
    cross-entropy loss; workloads/zeroschedule.py's param_count gives its size without building it."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.up = nn.Linear(hidden, 4 * hidden)
            self.down = nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            y = self.ln(x)
            q, k, v = self.qkv(y).chunk(3, dim=-1)
            att = torch.softmax((q @ k.transpose(-2, -1)) / math.sqrt(hidden), dim=-1)
            x = x + self.proj(att @ v)
            return x + self.down(F.gelu(self.up(y)))

    class SyntheticTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, tokens, targets):
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            logits = self.head(x)
            return F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))

    return SyntheticTransformer()


def _check_shape(model_shape: Mapping[str, Any]) -> tuple[int, int, int, int]:
    if not isinstance(model_shape, Mapping):
        raise BadInput(f"model shape {model_shape!r} is not a mapping: pass dict(layers=, hidden=, vocab=, seq=)")
    values = []
    for key in ("layers", "hidden", "vocab", "seq"):
        v = model_shape.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BadInput(f"model shape {key}={v!r} is not a positive whole number: "
                           "pass dict(layers=2, hidden=64, vocab=256, seq=32) or similar")
        values.append(v)
    unknown = set(model_shape) - {"layers", "hidden", "vocab", "seq"}
    if unknown:
        raise BadInput(f"model shape has unknown keys {sorted(unknown)}: use layers, hidden, vocab, seq")
    return tuple(values)  # type: ignore[return-value]


# ----------------------------------------------------------------------------- environment

def shm_op_build_dir() -> Path:
    """Where torch.utils.cpp_extension builds (and caches) DeepSpeed's shm comm op, by torch's
    rule (cpp_extension._get_build_directory, without creating it): $TORCH_EXTENSIONS_DIR/NAME,
    else ~/.cache/torch_extensions/py<major><minor><abiflags>_<cpu|cuXY|rocmXY>/NAME."""
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        if torch.version.hip is not None:
            acc = "rocm" + torch.version.hip.replace(".", "")
        elif torch.version.cuda is not None:
            acc = "cu" + torch.version.cuda.replace(".", "")
        else:
            acc = "cpu"
        py = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
        root = os.path.join(get_default_build_root(), f"{py}_{acc}")
    return Path(root) / SHM_OP_NAME


def _local_rank(dist) -> int:
    """LOCAL_RANK from the launcher, or this rank's index among the ranks on this host."""
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    hosts: list = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    me = dist.get_rank()
    return sum(1 for h in hosts[:me] if h == hosts[me])


@contextlib.contextmanager
def _launcher_env(values: dict[str, str]):
    """Set the launcher variables DeepSpeed reads where they are missing; restore afterwards."""
    added = [k for k in values if k not in os.environ]
    for k in added:
        os.environ[k] = values[k]
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _records(comms_dict: Mapping, world_size: int) -> tuple[CommRecord, ...]:
    from deepspeed.utils.timer import trim_mean

    out = []
    for name, sizes in comms_dict.items():
        base = name.split(" | ")[0]  # debug mode appends the caller
        collective = _COLLECTIVE.get(base, base)
        for msg, vals in sorted(sizes.items()):
            count, lats, algbw, busbw = vals[0], list(vals[1]), list(vals[2]), list(vals[3])
            size = msg * world_size if collective == "all_gather" else msg
            out.append(CommRecord(
                op=base, collective=collective, msg_bytes=int(msg), size_bytes=int(size), count=int(count),
                total_latency_ms=float(sum(lats)),
                avg_latency_ms=float(sum(lats) / len(lats)) if lats else 0.0,
                ds_algbw_Gbps=float(trim_mean(algbw, 0.1)) if algbw else 0.0,
                ds_busbw_Gbps=float(trim_mean(busbw, 0.1)) if busbw else 0.0,
                latencies_ms=tuple(float(x) for x in lats)))
    return tuple(out)


def _per_call_latencies(dscomm):
    """Make the comms logger record each call's own latency; returns a function that undoes it.

    DeepSpeed 0.19.8's timed_op (comm/comm.py) logs timers(log_name).elapsed(reset=False): the
    sum of every call made under that log name since the process started (utils/timer.py
    Timer.elapsed only clears its records when reset=True), so the k-th all_reduce is logged
    with the time of all k. The timer's last record is the call's own time; log that instead,
    and with it DeepSpeed computes its algbw/busbw from the right latency. Timers are cleared
    first and afterwards so their record lists do not grow without bound.
    """
    logger = dscomm.comms_logger
    timers = dscomm.timers  # the SynchronizedWallClockTimer timed_op uses (comm/comm.py)
    original = logger.append

    def append(raw_name, record_name, latency, msg_size):
        timer = getattr(timers, "timers", {}).get(record_name)
        records = getattr(timer, "elapsed_records", None)
        if records:
            latency = float(records[-1])
        if timer is not None and not getattr(timer, "started_", False):
            timer.reset()
        return original(raw_name, record_name, latency, msg_size)

    def clear_timers():
        for timer in list(getattr(timers, "timers", {}).values()):
            if not getattr(timer, "started_", False):
                timer.reset()

    clear_timers()
    logger.append = append  # an instance attribute shadows CommsLogger.append

    def restore():
        logger.__dict__.pop("append", None)
        clear_timers()

    return restore


# ----------------------------------------------------------------------------- the run

# A ds_config as run_engine takes it: parsed, a document, or a file's path.
ConfigSource = dsconfig.DsConfig | Mapping[str, Any] | str | os.PathLike[str]


def run_engine(ds_config: ConfigSource, stage: int, model_shape: Mapping[str, int], steps: int,
               device: Any = "cpu", *, warmup_steps: int = 1, zero_overrides: Mapping[str, Any] | None = None,
               seed: int = 0, gradient_accumulation_steps: int | None = None) -> EngineResult:
    """Train the synthetic model with DeepSpeed for `warmup_steps` + `steps` optimizer steps.

    Every rank of the initialised default process group calls this with the same arguments.
    `ds_config` is the user's config (a dict, or a commbench.integrations.deepspeed.config.DsConfig); it is adapted to
    this world size and device (commbench.integrations.deepspeed.config.adapt_for), its ZeRO stage set to `stage`,
    `zero_overrides` merged into "zero_optimization", and the comms logger switched on. A step is
    one optimizer step: gradient_accumulation_steps micro-batches of forward + backward, then
    engine.step(). The comms logger is reset after the warm-up, so `comm` holds the steady state.
    `gradient_accumulation_steps`, when given, replaces the config's (train_batch_size follows).
    """
    import torch
    import torch.distributed as tdist

    layers, hidden, vocab, seq = _check_run(tdist, stage, steps, warmup_steps, model_shape)
    deepspeed, dscomm = _import_deepspeed()
    world, rank = tdist.get_world_size(), tdist.get_rank()
    dev = torch.device(device)
    adapted, notes = _engine_config(_read_config(ds_config), stage, zero_overrides, world, dev.type,
                                    gradient_accumulation_steps)
    final = dsconfig.parse(adapted)
    batch = _Batch(micro=final.train_micro_batch_size_per_gpu or 1, gas=final.gradient_accumulation_steps or 1,
                   seq=seq, vocab=vocab)
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(final.dtype_name, torch.float32)

    local_rank = _local_rank(tdist) if dev.type == "cpu" or dev.index is None else dev.index
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local_rank)}

    logger = dscomm.comms_logger
    was_enabled = logger.enabled
    restore_append = _per_call_latencies(dscomm)
    engine = None
    with _launcher_env(env):
        try:
            backend_init_s, cached_before = _init_backend(deepspeed, dscomm, tdist)
            torch.manual_seed(seed)
            model = build_model(layers, hidden, vocab, seq)
            param_count = sum(p.numel() for p in model.parameters())
            if dev.type != "cpu":
                model = model.to(dev)
            t0 = time.perf_counter()
            engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                   config=adapted)
            init_time_s = time.perf_counter() - t0
            gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
            warm, times, warmup_comm, comm = _measure(tdist, logger, engine, batch, gen, dev,
                                                      warmup_steps, steps, world)
            all_times = _max_over_ranks(tdist, warm + times, dev)
        except BadInput:
            raise
        except Exception as exc:  # DeepSpeed asserts, raises ValueError, ZeRORuntimeException, ...
            raise _failure(exc, stage, rank) from exc
        finally:
            _teardown(logger, was_enabled, restore_append, engine)
            engine = None  # the last reference, so that gc.collect() frees ZeRO's buffers now
            gc.collect()

    return EngineResult(
        stage=stage, world_size=world, rank=rank, device=str(dev), steps=steps, micro_batches_per_step=batch.gas,
        step_times_s=tuple(all_times[warmup_steps:]), warmup_time_s=float(sum(all_times[:warmup_steps])),
        init_time_s=init_time_s, backend_init_s=backend_init_s, shm_op_cached_before=cached_before,
        param_count=param_count, param_bytes=param_count * torch.empty((), dtype=dtype).element_size(),
        dtype=final.dtype_name, comm=comm, warmup_comm=warmup_comm, config=adapted, notes=tuple(notes),
        deepspeed_version=getattr(deepspeed, "__version__", ""))


# ----------------------------------------------------------------------------- the run's steps

@dataclass(frozen=True)
class _Batch:
    """What one optimizer step feeds the model: `gas` micro-batches of `micro` x `seq` tokens."""

    micro: int
    gas: int
    seq: int
    vocab: int


def _check_run(tdist, stage: Any, steps: Any, warmup_steps: Any, model_shape: Any) -> tuple[int, int, int, int]:
    """Refuse a call that cannot run, before DeepSpeed is imported; the model shape checked."""
    if not tdist.is_available() or not tdist.is_initialized():
        raise BadInput("run_engine needs an initialised torch.distributed process group: "
                       "call torch.distributed.init_process_group first (commbench's harness does)")
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise BadInput(f"ZeRO stage {stage!r} is not 0, 1, 2 or 3: pick one of them")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise BadInput(f"steps={steps!r} is not a positive whole number: pass steps >= 1")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise BadInput(f"warmup_steps={warmup_steps!r} is not a whole number >= 0")
    return _check_shape(model_shape)


def _import_deepspeed():
    """deepspeed and deepspeed.comm, or a BadInput that says how to install it."""
    try:
        import deepspeed
        import deepspeed.comm as dscomm
    except ImportError as exc:
        raise BadInput(f"DeepSpeed is not importable ({exc}): pip install deepspeed") from None
    return deepspeed, dscomm


def _read_config(ds_config: ConfigSource) -> dsconfig.DsConfig:
    """The user's config as a DsConfig, from a DsConfig, a path or a dict."""
    if isinstance(ds_config, dsconfig.DsConfig):
        return ds_config
    if isinstance(ds_config, (str, os.PathLike)):
        return dsconfig.load(ds_config)
    if isinstance(ds_config, Mapping):
        return dsconfig.parse(dict(ds_config))
    raise BadInput(f"ds_config {type(ds_config).__name__} is not a config: pass a dict, a path or a DsConfig")


def _engine_config(base: dsconfig.DsConfig, stage: int, zero_overrides: Mapping[str, Any] | None,
                   world: int, device_type: str, gas: int | None = None) -> tuple[dict, list[str]]:
    """The config deepspeed.initialize gets: the stage asked for, the overrides, adapt_for's
    changes, the comms logger on; and one line per change, in that order."""
    requested = base.to_dict()
    notes: list[str] = []
    zero = requested.setdefault("zero_optimization", {})
    if not isinstance(zero, dict):
        zero = requested["zero_optimization"] = {}
    zero["stage"] = stage
    if gas is not None:
        if isinstance(gas, bool) or not isinstance(gas, int) or gas < 1:
            raise BadInput(f"gradient_accumulation_steps={gas!r} is not a positive whole number: pass 1, 4, 8, ...")
        requested["gradient_accumulation_steps"] = gas
    notes += dsadapt.asked_changes(base, stages=[stage], grad_accums=[gas])
    for key, value in (zero_overrides or {}).items():
        notes.append(f"zero_optimization.{key} = {value!r} (override)")
        zero[key] = value
    adapted, adapt_notes = dsadapt.adapt_for(dsconfig.parse(requested, source=base.source), world, device_type)
    notes += adapt_notes
    adapted["comms_logger"] = {"enabled": True, "verbose": False, "prof_all": True, "debug": False}
    adapted.setdefault("steps_per_print", 1 << 30)  # keep DeepSpeed's periodic prints out of the output
    return adapted, notes


def _init_backend(deepspeed, dscomm, tdist) -> tuple[float, bool | None]:
    """Let DeepSpeed wrap commbench's process group, unless it already has. Returns the time it
    took (the first call JIT-builds the shm comm op) and whether that op was cached before."""
    backend_init_s, cached_before = 0.0, None
    # is_initialized() reads comm.comm's global cdb; deepspeed.comm.cdb is a copy made at
    # import time (`from .comm import *`) and stays None
    if not dscomm.is_initialized():
        try:
            cached_before = any(shm_op_build_dir().glob(f"{SHM_OP_NAME}*.so"))
        except Exception:  # noqa: BLE001 - only a note in the output: unknown rather than a failed run
            cached_before = None
        t0 = time.perf_counter()
        # wraps the existing group (comm.py: cdb None and torch.distributed initialised);
        # the first call JIT-builds the shm comm op (comm/torch.py build_shm_op)
        deepspeed.init_distributed(dist_backend=tdist.get_backend())
        backend_init_s = time.perf_counter() - t0
    return backend_init_s, cached_before


def _one_step(engine, batch: _Batch, gen, dev) -> None:
    """One optimizer step: `gas` micro-batches of forward + backward + engine.step() (DeepSpeed
    steps the optimizer at the accumulation boundary); waits for the GPU so the time is whole."""
    import torch

    for _ in range(batch.gas):
        tokens = torch.randint(batch.vocab, (batch.micro, batch.seq), generator=gen).to(engine.device)
        targets = torch.randint(batch.vocab, (batch.micro, batch.seq), generator=gen).to(engine.device)
        loss = engine(tokens, targets)
        engine.backward(loss)
        engine.step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed_steps(tdist, engine, batch: _Batch, gen, dev, n: int) -> list[float]:
    """This rank's time of each of `n` steps, every step started together after a barrier."""
    times = []
    for _ in range(n):
        tdist.barrier()  # torch.distributed directly: not in the comms logger
        t = time.perf_counter()
        _one_step(engine, batch, gen, dev)
        times.append(time.perf_counter() - t)
    return times


def _measure(tdist, logger, engine, batch: _Batch, gen, dev, warmup_steps: int, steps: int, world: int):
    """Warm-up steps, then timed steps, each with the comms logger's records of its own: the
    logger is reset before, between and after, so `comm` holds only the steady state."""
    logger.reset_data()
    warm = _timed_steps(tdist, engine, batch, gen, dev, warmup_steps)
    warmup_comm = _records(logger.get_raw_data(), world)
    logger.reset_data()
    times = _timed_steps(tdist, engine, batch, gen, dev, steps)
    comm = _records(logger.get_raw_data(), world)
    logger.reset_data()
    return warm, times, warmup_comm, comm


def _max_over_ranks(tdist, values: list[float], dev) -> list[float]:
    """Each step's time, max over ranks (the slowest rank bounds a step), in one all_reduce."""
    import torch

    t = torch.tensor(values, dtype=torch.float64, device=dev if dev.type != "cpu" else "cpu")
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return t.tolist()


def _failure(exc: Exception, stage: int, rank: int) -> RuntimeFailure:
    """DeepSpeed's error as one line that names the stage and the rank."""
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return RuntimeFailure(f"DeepSpeed ZeRO stage {stage} failed on rank {rank}: "
                          f"{type(exc).__name__}: {first}".rstrip(": "))


def _teardown(logger, was_enabled: bool, restore_append, engine) -> None:
    """Leave DeepSpeed's comms logger as it was found and destroy the engine, whatever happened."""
    logger.reset_data()
    logger.enabled = was_enabled
    restore_append()
    if engine is not None:
        with contextlib.suppress(Exception):
            engine.destroy()
