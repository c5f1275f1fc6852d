"""A user's DeepSpeed config adapted to run here: `adapt_for(config, world_size, device_type)`
returns a config dict DeepSpeed accepts on this machine and one line per change
(docs/DEEPSPEED.md explains each rule); `asked_changes` says in the same words which settings a
run uses other than the config's. No DeepSpeed import, as config.py."""

from __future__ import annotations

import json
from typing import Any
from collections.abc import Mapping, Sequence

from commbench.core.errors import BadInput
from commbench.integrations.deepspeed.config import (DEFAULT_ALLGATHER_BUCKET_SIZE, DEFAULT_PREFETCH_BUCKET_SIZE,
                                                     DEFAULT_REDUCE_BUCKET_SIZE, DsConfig, parse)

# Adam-family optimizers that DeepSpeed builds itself (engine._configure_basic_optimizer).
_ADAM_NAMES = {"adam", "adamw"}


def asked_changes(cfg: DsConfig, *, stages: list[int] | None = None, grad_accums: Sequence[int | None] = (),
                  reduce_buckets: list[int] | None = None, dtype: str | None = None,
                  overlap: bool | None = None) -> list[str]:
    """One line per setting a run uses other than the config's (the flags asked for it): the zero
    schedule's and the engine's runs both say what they changed, in these words."""
    def show(v: Any) -> str:
        if isinstance(v, bool):
            return json.dumps(v)
        return f"{v:.3g}" if isinstance(v, int) and v >= 100_000 else str(v)

    def line(path: str, old: Any, new: list, what: str) -> str | None:
        new = [v for v in new if v is not None]
        if not new or new == [old]:
            return None
        return f"{path} {show(old)} -> {', '.join(map(show, new))} ({what})"

    gas = cfg.gradient_accumulation_steps
    lines = [line("zero_optimization.stage", cfg.zero_stage, stages or [], "the stage asked for"),
             line("gradient_accumulation_steps", gas, list(grad_accums), "the value asked for"),
             line("zero_optimization.reduce_bucket_size", cfg.reduce_bucket_size, reduce_buckets or [],
                  "--bucket-size"),
             line("precision", cfg.dtype_name, [dtype], "-d; the same bytes on the wire when both are 2-byte"),
             line("zero_optimization.overlap_comm", cfg.overlap_comm, [overlap], "--overlap")]
    return [x for x in lines if x]


def adapt_for(config: DsConfig | Mapping[str, Any], world_size: int, device_type: str) -> tuple[dict, list[str]]:
    """A copy of `config` that DeepSpeed runs with `world_size` ranks on `device_type`, and one
    line per change. The input is not modified.

    Rules (checked against DeepSpeed 0.19.8 with two gloo ranks on a CPU-only machine; the
    evidence is in docs/DEEPSPEED.md):
    - batch sizes: train_batch_size becomes micro x accumulation x world_size (DeepSpeed asserts
      that equality, runtime/config.py _batch_assertion); missing or "auto" ones are derived as
      DeepSpeed derives them (_set_batch_related_parameters).
    - fp16 on CPU becomes bf16. DeepSpeed's CPU accelerator supports bf16 on every CPU but fp16
      only where oneDNN has fp16 kernels (cpu_accelerator.is_fp16_supported; AVX512-FP16/AMX
      CPUs), and fp16 loss scaling skips overflowed steps, which skips ZeRO's parameter
      all-gather (stage_1_and_2.py step() returns before all_gather_dp_groups): with
      initial_scale_power 32 every step of a short run is skipped. bf16 moves the same bytes.
    - CPU offload is kept: it runs on CPU with gloo and issues the same collectives (it needs
      DeepSpeedCPUAdam, which DeepSpeed JIT-builds once per machine). NVMe offload is dropped on
      CPU (DeepSpeed's async_io op needs libaio and an nvme_path).
    - offload_param below stage 3 is dropped: DeepSpeed uses it in stage 3 only.
    - no optimizer: AdamW (lr 1e-4) is added; ZeRO stages need one.
    - Adam/AdamW on CPU without optimizer offload get "torch_adam": true, so DeepSpeed uses
      torch.optim.AdamW instead of JIT-building its FusedAdam CPU op; collectives are unchanged.
    - "auto" values are replaced by DeepSpeed's defaults.
    """
    cfg = config if isinstance(config, DsConfig) else parse(config)
    device_type = _check_target(world_size, device_type)
    on_cpu = device_type == "cpu"
    out = cfg.to_dict()
    zero = out.get("zero_optimization")
    if not isinstance(zero, dict):
        zero = {}
        if "zero_optimization" in out:
            out["zero_optimization"] = zero
    # Each step edits `out` (and `zero`, the same object as out["zero_optimization"] when that
    # is an object) in place and returns its lines; the order of the lines is the order here.
    notes = _concrete_autos(cfg, out)
    notes += _consistent_batch_sizes(cfg, out, world_size)
    notes += _runnable_precision(cfg, out, on_cpu)
    offload_optimizer, offload_notes = _runnable_offload(cfg, zero, on_cpu)
    notes += offload_notes
    notes += _usable_optimizer(out, cheap_adam=on_cpu and offload_optimizer == "none")
    return out, notes


def _check_target(world_size: Any, device_type: Any) -> str:
    """Refuse a world size or device name that cannot be a target; the device's type ('cuda:1' -> 'cuda')."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise BadInput(f"world size {world_size!r} is not a positive whole number: pass the number of ranks")
    if not isinstance(device_type, str) or not device_type:
        raise BadInput(f"device type {device_type!r} is not a device name: use 'cpu' or 'cuda'")
    return device_type.split(":")[0].lower()


def _concrete_autos(cfg: DsConfig, out: dict) -> list[str]:
    """Write DeepSpeed's default in place of each "auto", so the adapted dict is concrete.

    Batch sizes given as "auto" are left to _consistent_batch_sizes, which derives them.
    """
    defaults = {
        "zero_optimization.stage": cfg.zero_stage,
        "zero_optimization.reduce_bucket_size": DEFAULT_REDUCE_BUCKET_SIZE,
        "zero_optimization.allgather_bucket_size": DEFAULT_ALLGATHER_BUCKET_SIZE,
        "zero_optimization.stage3_prefetch_bucket_size": DEFAULT_PREFETCH_BUCKET_SIZE,
        "zero_optimization.prefetch_bucket_size": DEFAULT_PREFETCH_BUCKET_SIZE,
        "zero_optimization.overlap_comm": cfg.zero_stage == 3,
        "zero_optimization.reduce_scatter": True,
        "zero_optimization.contiguous_gradients": True,
        "zero_optimization.use_multi_rank_bucket_allreduce": True,
        "zero_optimization.allgather_partitions": True,
        "fp16.enabled": False, "bf16.enabled": False, "bfloat16.enabled": False,
    }
    notes = []
    for path in cfg.auto_fields:
        if path in defaults:
            _set(out, path, defaults[path])
            notes.append(f'{path} is "auto": set to DeepSpeed\'s default {json.dumps(defaults[path])}')
        elif path.endswith(".device"):
            _set(out, path, "none")
            notes.append(f'{path} is "auto": set to "none" (no offload)')
    return notes


def _consistent_batch_sizes(cfg: DsConfig, out: dict, world_size: int) -> list[str]:
    """train_batch_size == micro x accumulation x world size, which DeepSpeed asserts
    (runtime/config.py _batch_assertion); missing ones derived as DeepSpeed derives them."""
    micro, gas, tbs = (cfg.train_micro_batch_size_per_gpu, cfg.gradient_accumulation_steps,
                       cfg.train_batch_size)
    notes, derived = [], []
    if micro is None:
        if tbs is not None:
            micro = max(1, tbs // ((gas or 1) * world_size))
        else:
            micro = 1
        derived.append(f"train_micro_batch_size_per_gpu={micro}")
    if gas is None:
        gas = max(1, tbs // (micro * world_size)) if tbs is not None else 1
        derived.append(f"gradient_accumulation_steps={gas}")
    new_tbs = micro * gas * world_size
    if derived:
        notes.append("batch sizes " + ", ".join(derived) + " derived as DeepSpeed does (absent or \"auto\")")
    if tbs is not None and tbs != new_tbs:
        notes.append(f"train_batch_size {tbs} != {micro} (micro) x {gas} (accumulation) x {world_size} "
                     f"(ranks): set to {new_tbs}, keeping micro batch {micro} and accumulation {gas}")
    elif tbs is None and not derived:
        notes.append(f"train_batch_size absent: set to {new_tbs} = {micro} x {gas} x {world_size} ranks")
    out["train_batch_size"] = new_tbs
    out["train_micro_batch_size_per_gpu"] = micro
    out["gradient_accumulation_steps"] = gas
    return notes


def _runnable_precision(cfg: DsConfig, out: dict, on_cpu: bool) -> list[str]:
    """fp16 on CPU -> bf16: same bytes on the wire, and no skipped steps (adapt_for says why)."""
    if not (cfg.fp16 and on_cpu):
        return []
    fp16_section = out.get("fp16")
    fp16: dict = fp16_section if isinstance(fp16_section, dict) else {}
    out["fp16"] = {**fp16, "enabled": False}
    out.pop("bfloat16", None)
    out["bf16"] = {"enabled": True}
    return ["fp16 on a CPU-only machine: switched to bf16 (same 2-byte traffic; DeepSpeed's CPU "
            "accelerator has bf16 on every CPU, fp16 only with AVX512-FP16, and fp16 overflow "
            "steps skip the parameter all-gather)"]


def _runnable_offload(cfg: DsConfig, zero: dict, on_cpu: bool) -> tuple[str, list[str]]:
    """Drop the offloads DeepSpeed cannot run here (offload_param below stage 3, NVMe on CPU) and
    write bucket sizes as ints. Returns the optimizer offload that is left, and the lines."""
    offload_optimizer = cfg.offload_optimizer
    notes: list[str] = []
    if not zero:
        return offload_optimizer, notes
    stage = cfg.zero_stage
    for key, value in (("offload_optimizer", cfg.offload_optimizer), ("offload_param", cfg.offload_param)):
        if value == "none":
            continue
        reason = None
        if key == "offload_param" and stage != 3:
            reason = f"offload_param with ZeRO stage {stage}: dropped (DeepSpeed uses it in stage 3 only)"
        elif value == "nvme" and on_cpu:
            reason = (f"{key} to nvme on a CPU-only machine: dropped (DeepSpeed's async_io op needs "
                      "libaio and an nvme_path)")
        if reason:
            zero.pop(key, None)
            if key == "offload_optimizer":
                offload_optimizer = "none"
            notes.append(reason)
    if offload_optimizer == "none" and cfg.offload_optimizer != "none":
        # the deprecated spelling beside the offload dropped above: never read (offload_optimizer
        # took precedence), so whatever it holds would be read, and refused, on the next parse
        zero.pop("cpu_offload", None)
    if cfg.offload_param == "none" or (stage != 3 or (on_cpu and cfg.offload_param == "nvme")):
        zero.pop("cpu_offload_param", None)
    # whole numbers as ints (5e8 -> 500000000), as DeepSpeed reads them
    for key in ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                "prefetch_bucket_size"):
        if isinstance(zero.get(key), float):
            zero[key] = int(zero[key])
    return offload_optimizer, notes


def _usable_optimizer(out: dict, cheap_adam: bool) -> list[str]:
    """Add AdamW when there is no optimizer (ZeRO needs one); with `cheap_adam` (CPU, no optimizer
    offload) Adam/AdamW get torch_adam, so DeepSpeed does not JIT-build its FusedAdam CPU op."""
    optimizer = out.get("optimizer")
    if not isinstance(optimizer, dict) or not optimizer.get("type"):
        params: dict = {"lr": 1e-4}
        if cheap_adam:
            params["torch_adam"] = True
        out["optimizer"] = {"type": "AdamW", "params": params}
        return ["no optimizer in the config: added AdamW (lr 1e-4); the engine needs one for ZeRO"]
    if cheap_adam and str(optimizer.get("type")).lower() in _ADAM_NAMES:
        given = optimizer.get("params")
        params = given if isinstance(given, dict) else {}
        if not params.get("torch_adam"):
            optimizer["params"] = {**params, "torch_adam": True}
            return [f"optimizer {optimizer['type']} on CPU: torch_adam set (torch.optim.AdamW instead of "
                    "JIT-building DeepSpeed's FusedAdam CPU op; the collectives are the same)"]
    return []


def _set(doc: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = doc
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value
