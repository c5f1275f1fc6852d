"""A user's DeepSpeed config (ds_config.json) read into typed settings (adapt.py adapts it to run here).

`load(path)` / `parse(document)` give a `DsConfig` with the settings that shape communication
(ZeRO stage, bucket sizes in elements, overlap_comm, reduce_scatter, precision, offload, batch
sizes). Every problem is a `BadInput` with one line that names the setting and the fix; nothing
else escapes. Values follow DeepSpeed 0.19's own rules (runtime/zero/config.py,
runtime/config.py): "auto" means DeepSpeed's default, integral floats such as 5e8 are whole
numbers, bucket sizes count elements, not bytes.

This module does not import DeepSpeed, so it is cheap to use in the CLI and in unit tests.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
import os
from typing import Any, NoReturn, overload
from collections.abc import Mapping

from commbench.core.errors import BadInput
from commbench.core.inputs import MAX_DS_CONFIG_BYTES, named_file, read_text

# DeepSpeed 0.19.8 defaults (runtime/zero/config.py DeepSpeedZeroConfig).
DEFAULT_REDUCE_BUCKET_SIZE = 500_000_000        # reduce_bucket_size: Field(pp_int(5e8), gt=0)
DEFAULT_ALLGATHER_BUCKET_SIZE = 500_000_000     # allgather_bucket_size: Field(pp_int(5e8), ge=0)
DEFAULT_PREFETCH_BUCKET_SIZE = 50_000_000       # prefetch_bucket_size: Field(pp_int(5e7), ge=0)
DEFAULT_PARAM_PERSISTENCE_THRESHOLD = 100_000   # stage3_param_persistence_threshold
DEFAULT_MAX_REUSE_DISTANCE = 1_000_000_000      # stage3_max_reuse_distance
_INT64_MAX = (1 << 63) - 1
# A step's samples (micro batch x accumulation a rank, and train_batch_size): a trillion is past any
# training, and a rank's times 8M ranks (adapt_for's train_batch_size) still fits an int64.
MAX_SAMPLES_PER_RANK_STEP = 1 << 40
OFFLOAD_DEVICES = ("none", "cpu", "nvme")

@dataclass(frozen=True)
class DsConfig:
    """The communication-relevant settings of one ds_config, with DeepSpeed's defaults applied.

    Bucket sizes are element counts (DeepSpeed compares them with numel()); multiply by the
    element size of the communication dtype for bytes (`bucket_bytes`).
    """

    zero_stage: int = 0
    reduce_bucket_size: int = DEFAULT_REDUCE_BUCKET_SIZE
    allgather_bucket_size: int = DEFAULT_ALLGATHER_BUCKET_SIZE
    stage3_prefetch_bucket_size: int = DEFAULT_PREFETCH_BUCKET_SIZE
    overlap_comm: bool = False              # DeepSpeed: unset -> True for stage 3, else False
    reduce_scatter: bool = True
    contiguous_gradients: bool = True
    use_multi_rank_bucket_allreduce: bool = True
    allgather_partitions: bool = True
    fp16: bool = False
    bf16: bool = False
    offload_optimizer: str = "none"         # none | cpu | nvme
    offload_param: str = "none"             # none | cpu | nvme (DeepSpeed uses it in stage 3 only)
    train_batch_size: int | None = None     # None: absent or "auto"
    train_micro_batch_size_per_gpu: int | None = None
    gradient_accumulation_steps: int | None = None
    optimizer_type: str | None = None
    auto_fields: tuple[str, ...] = ()       # settings given as "auto" (DeepSpeed uses its default)
    source: str = "<dict>"                  # file name, for messages
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def dtype_name(self) -> str:
        return "float16" if self.fp16 else "bfloat16" if self.bf16 else "float32"

    @property
    def dtype_bytes(self) -> int:
        return 2 if (self.fp16 or self.bf16) else 4

    def bucket_bytes(self, name: str = "reduce_bucket_size", dtype_bytes: int | None = None) -> int:
        """A bucket size in bytes: elements x element size (the training dtype unless given)."""
        return int(getattr(self, name)) * (dtype_bytes or self.dtype_bytes)

    def to_dict(self) -> dict:
        """A copy of the document this config was read from."""
        return copy.deepcopy(dict(self.raw))


# ----------------------------------------------------------------------------- reading

_CONFIG_FILE = named_file(
    "DeepSpeed config", "a ds_config", MAX_DS_CONFIG_BYTES, missing="give the path of your ds_config.json",
    too_big="give the path of your ds_config.json", fix="give the path of a ds_config.json file",
    on_disk="give the path of a ds_config.json file", folder="a directory",
    unreadable="DeepSpeed config {name} cannot be read ({error}): check the path and its permissions",
    not_text="DeepSpeed config {name} is not UTF-8 text (byte {byte}): save it as UTF-8 JSON")


def load(path: str | os.PathLike[str]) -> DsConfig:
    """Read a ds_config file (JSON, or hjson as DeepSpeed accepts) into a DsConfig."""
    text = read_text(path, _CONFIG_FILE, name=repr(str(path)), encoding="utf-8-sig")
    return loads(text, source=str(path))


def loads(text: str, source: str = "<string>") -> DsConfig:
    """Parse ds_config text (JSON, or hjson as DeepSpeed reads files) into a DsConfig."""
    document, json_error = _decode(text, source)
    try:
        return parse(document, source=source)
    except BadInput:
        if json_error is None:
            raise
        # Not JSON, and hjson's reading of it is not a valid config either: the JSON error is
        # what the user needs to see.
        raise json_error from None


def _reject_duplicates(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        seen, dup = set(), None
        for key, _ in pairs:
            if key in seen:
                dup = key
                break
            seen.add(key)
        raise _Duplicate(dup)
    return d


class _Duplicate(ValueError):
    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _decode(text: str, source: str) -> tuple[Any, BadInput | None]:
    """JSON first; DeepSpeed also reads hjson files (runtime/config.py hjson.load), so try hjson
    before refusing. Returns the document and, when it was read as hjson, the JSON error."""
    if not text.strip():
        raise BadInput(f"DeepSpeed config {source!r} is empty: write a JSON object such as "
                       '{"zero_optimization": {"stage": 2}}')
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates), None
    except _Duplicate as dup:
        # DeepSpeed refuses duplicate keys too (config_utils.dict_raise_error_on_duplicate_keys).
        raise BadInput(f"DeepSpeed config {source!r} has the key {dup.key!r} twice: keep one") from None
    except RecursionError:
        raise BadInput(f"DeepSpeed config {source!r} is nested too deeply to be a ds_config: "
                       "fix the file") from None
    except json.JSONDecodeError as err:
        json_err = err
    except ValueError as err:  # e.g. an integer literal with too many digits
        raise BadInput(f"DeepSpeed config {source!r} is not valid JSON ({err}): fix the file") from None
    try:
        import hjson  # installed with deepspeed, which reads configs with hjson.load
    except ImportError:
        hjson = None
    error = BadInput(f"DeepSpeed config {source!r} is not valid JSON: {json_err.msg} at line {json_err.lineno} "
                     f"column {json_err.colno}: fix the file there")
    if hjson is not None:
        try:
            return hjson.loads(text, object_pairs_hook=_reject_duplicates), error
        except _Duplicate as dup:
            raise BadInput(f"DeepSpeed config {source!r} has the key {dup.key!r} twice: keep one") from None
        except Exception:  # noqa: BLE001 - hjson raises several types; the JSON message is the useful one
            pass
    raise error


# ----------------------------------------------------------------------------- typed values

class _Reader:
    def __init__(self, source: str):
        self.source = source
        self.auto: list[str] = []

    def fail(self, key: str, problem: str, fix: str) -> NoReturn:
        raise BadInput(f"DeepSpeed config {self.source!r}: {key} {problem}: {fix}")

    def section(self, doc: Mapping, key: str, path: str | None = None) -> Mapping:
        path = path or key
        value = doc.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"is {_show(value)}, not an object", f'write it as "{key}": {{...}}')
        return value

    # A default that is a number gives a number; only a None default can come back None.
    @overload
    def whole(self, doc: Mapping, key: str, path: str, default: int, *, minimum: int, unit: str = "") -> int: ...

    @overload
    def whole(self, doc: Mapping, key: str, path: str, default: None, *, minimum: int,
              unit: str = "") -> int | None: ...

    def whole(self, doc: Mapping, key: str, path: str, default: int | None, *, minimum: int,
              unit: str = "") -> int | None:
        """A whole number >= minimum; 5e8 and 32.0 count; "auto" or absent -> default."""
        if key not in doc or doc[key] is None:
            return default
        value = doc[key]
        if isinstance(value, str) and value.strip().lower() == "auto":
            self.auto.append(path)
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, f"is {_show(value)}, not a number", f"give a whole number{unit} such as 500000000 or 5e8")
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                self.fail(path, f"is {_show(value)}, not a whole number",
                          f"give a whole number{unit} such as 500000000 or 5e8")
            value = int(value)
        if value < minimum:
            what = "negative" if value < 0 else "zero"
            self.fail(path, f"is {what} ({value})", f"give a whole number >= {minimum}{unit}")
        if value > _INT64_MAX:
            self.fail(path, f"is too large ({value})", f"give a whole number up to {_INT64_MAX}")
        return value

    @overload
    def flag(self, doc: Mapping, key: str, path: str, default: bool) -> bool: ...

    @overload
    def flag(self, doc: Mapping, key: str, path: str, default: None) -> bool | None: ...

    def flag(self, doc: Mapping, key: str, path: str, default: bool | None) -> bool | None:
        if key not in doc or doc[key] is None:
            return default
        value = doc[key]
        if isinstance(value, str) and value.strip().lower() == "auto":
            self.auto.append(path)
            return default
        if not isinstance(value, bool):
            self.fail(path, f"is {_show(value)}, not true or false", "write true or false")
        return value

    def offload(self, zero: Mapping, key: str, path: str) -> str:
        value = zero.get(key)
        if value is None:
            return "none"
        if isinstance(value, str) and value.strip().lower() == "auto":
            self.auto.append(path)
            return "none"
        if not isinstance(value, dict):
            self.fail(path, f"is {_show(value)}, not an object", f'write it as "{key}": {{"device": "cpu"}}')
        device = value.get("device", "none")
        if device is None:
            return "none"
        if not isinstance(device, str) or device.strip().lower() not in OFFLOAD_DEVICES + ("auto",):
            self.fail(f"{path}.device", f"is {_show(device)}", 'use "none", "cpu" or "nvme"')
        device = device.strip().lower()
        if device == "auto":
            self.auto.append(f"{path}.device")
            return "none"
        return device


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, bool, int, float, type(None))) else type(value).__name__
    if isinstance(value, (list, dict)):
        text = "a list" if isinstance(value, list) else "an object"
    return text if len(text) <= 40 else text[:37] + "..."


def parse(document: Any, source: str = "<dict>") -> DsConfig:
    """Check a decoded ds_config document and return its typed settings.

    The settings are read in a fixed order (ZeRO section, precision, batch sizes, optimizer), so
    the first problem reported, and the order of `auto_fields`, do not depend on the helpers.
    """
    r = _Reader(source)
    if not isinstance(document, dict):
        raise BadInput(f"DeepSpeed config {source!r} is {_show(document)}, not a JSON object: "
                       'a ds_config is an object such as {"zero_optimization": {"stage": 2}}')
    zero = r.section(document, "zero_optimization")
    stage = _read_stage(r, zero)
    reduce_bucket, allgather_bucket, prefetch = _read_buckets(r, zero)
    flags = _read_zero_flags(r, zero, stage)
    offload_optimizer, offload_param = _read_offload(r, zero)
    fp16, bf16 = _read_precision(r, document)
    batch = {key: r.whole(document, key, key, None, minimum=1)
             for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")}
    _check_rank_batch(source, batch)
    opt_type = _read_optimizer_type(r, document)

    return DsConfig(
        zero_stage=stage,
        reduce_bucket_size=reduce_bucket,
        allgather_bucket_size=allgather_bucket,
        stage3_prefetch_bucket_size=prefetch,
        **flags,
        fp16=fp16,
        bf16=bf16,
        offload_optimizer=offload_optimizer,
        offload_param=offload_param,
        train_batch_size=batch["train_batch_size"],
        train_micro_batch_size_per_gpu=batch["train_micro_batch_size_per_gpu"],
        gradient_accumulation_steps=batch["gradient_accumulation_steps"],
        optimizer_type=opt_type,
        auto_fields=tuple(r.auto),
        source=source,
        raw=copy.deepcopy(document),
    )


def _read_stage(r: _Reader, zero: Mapping) -> int:
    """zero_optimization.stage: 0-3; absent, null or "auto" is 0 (DeepSpeed's default), 2.0 is 2."""
    stage_value = zero.get("stage", 0)
    if isinstance(stage_value, str) and stage_value.strip().lower() == "auto":
        r.auto.append("zero_optimization.stage")
        return 0
    if isinstance(stage_value, float) and stage_value.is_integer():
        stage_value = int(stage_value)
    if stage_value is None:
        stage_value = 0
    if isinstance(stage_value, bool) or not isinstance(stage_value, int) or not 0 <= stage_value <= 3:
        r.fail("zero_optimization.stage", f"is {_show(stage_value)}", "use 0, 1, 2 or 3")
    return stage_value


def _read_buckets(r: _Reader, zero: Mapping) -> tuple[int, int, int]:
    """The reduce, all-gather and stage-3 prefetch bucket sizes in elements, as DeepSpeed checks them."""
    reduce_bucket = r.whole(zero, "reduce_bucket_size", "zero_optimization.reduce_bucket_size",
                            DEFAULT_REDUCE_BUCKET_SIZE, minimum=1, unit=" of elements")
    allgather_bucket = r.whole(zero, "allgather_bucket_size", "zero_optimization.allgather_bucket_size",
                               DEFAULT_ALLGATHER_BUCKET_SIZE, minimum=0, unit=" of elements")
    if allgather_bucket % 2:
        # stage_1_and_2.py asserts allgather_bucket_size % nccl_start_alignment_factor (2) == 0
        r.fail("zero_optimization.allgather_bucket_size", f"is odd ({allgather_bucket})",
               "DeepSpeed needs an even number of elements, e.g. 500000000")
    prefetch_key = "stage3_prefetch_bucket_size" if "stage3_prefetch_bucket_size" in zero else "prefetch_bucket_size"
    prefetch = r.whole(zero, prefetch_key, f"zero_optimization.{prefetch_key}", DEFAULT_PREFETCH_BUCKET_SIZE,
                       minimum=0, unit=" of elements")
    return reduce_bucket, allgather_bucket, prefetch


def _read_zero_flags(r: _Reader, zero: Mapping, stage: int) -> dict[str, bool]:
    """The ZeRO switches that change which collectives run, keyed by their DsConfig field."""
    overlap = r.flag(zero, "overlap_comm", "zero_optimization.overlap_comm", None)
    if overlap is None:
        overlap = stage == 3  # DeepSpeedZeroConfig.overlap_comm_valid
    return {
        "overlap_comm": overlap,
        "reduce_scatter": r.flag(zero, "reduce_scatter", "zero_optimization.reduce_scatter", True),
        "contiguous_gradients": r.flag(zero, "contiguous_gradients", "zero_optimization.contiguous_gradients",
                                       True),
        "use_multi_rank_bucket_allreduce": r.flag(zero, "use_multi_rank_bucket_allreduce",
                                                  "zero_optimization.use_multi_rank_bucket_allreduce", True),
        "allgather_partitions": r.flag(zero, "allgather_partitions", "zero_optimization.allgather_partitions",
                                       True),
    }


def _read_offload(r: _Reader, zero: Mapping) -> tuple[str, str]:
    """Optimizer and parameter offload devices, honouring the deprecated cpu_offload spellings."""
    offload_optimizer = r.offload(zero, "offload_optimizer", "zero_optimization.offload_optimizer")
    if offload_optimizer == "none" and r.flag(zero, "cpu_offload", "zero_optimization.cpu_offload", False):
        offload_optimizer = "cpu"  # deprecated spelling, still honoured by DeepSpeed
    offload_param = r.offload(zero, "offload_param", "zero_optimization.offload_param")
    if offload_param == "none" and r.flag(zero, "cpu_offload_param", "zero_optimization.cpu_offload_param", False):
        offload_param = "cpu"
    return offload_optimizer, offload_param


def _read_precision(r: _Reader, document: Mapping) -> tuple[bool, bool]:
    """fp16 and bf16 (or its old name bfloat16) enabled; both at once is refused, as DeepSpeed does."""
    fp16_section = r.section(document, "fp16")
    bf16_key = "bf16" if "bf16" in document else "bfloat16"
    bf16_section = r.section(document, bf16_key)
    fp16 = bool(r.flag(fp16_section, "enabled", "fp16.enabled", False))
    bf16 = bool(r.flag(bf16_section, "enabled", f"{bf16_key}.enabled", False))
    if fp16 and bf16:
        r.fail("fp16.enabled and bf16.enabled", "are both true", "enable one of them")
    return fp16, bf16


def _check_rank_batch(source: str, batch: dict[str, int | None]) -> None:
    """A rank's samples a step (micro batch x accumulation; where one is missing, adapt_for derives it
    from train_batch_size: at one rank the whole of it) within MAX_SAMPLES_PER_RANK_STEP, so that
    adapt_for's train_batch_size (times the ranks) stays an int64 and its output parses again."""
    micro, gas, tbs = (batch["train_micro_batch_size_per_gpu"], batch["gradient_accumulation_steps"],
                       batch["train_batch_size"])
    per_rank = (micro or 1) * (gas or 1)
    if (micro is None or gas is None) and tbs is not None:
        per_rank = max(per_rank, tbs)
    if per_rank > MAX_SAMPLES_PER_RANK_STEP:
        raise BadInput(f"DeepSpeed config {source!r}: a rank's batch (train_micro_batch_size_per_gpu x "
                       f"gradient_accumulation_steps, or train_batch_size where one is missing) is {per_rank} "
                       f"samples a step, more than any training runs (at most {MAX_SAMPLES_PER_RANK_STEP}): "
                       "fix the batch sizes")


def _read_optimizer_type(r: _Reader, document: Mapping) -> str | None:
    """optimizer.type (a name or absent); optimizer.params, when given, must be an object."""
    optimizer = r.section(document, "optimizer")
    opt_type = optimizer.get("type")
    if opt_type is not None and not isinstance(opt_type, str):
        r.fail("optimizer.type", f"is {_show(opt_type)}, not a name", 'write e.g. "AdamW"')
    opt_params = optimizer.get("params")
    if opt_params is not None and not isinstance(opt_params, dict):
        r.fail("optimizer.params", f"is {_show(opt_params)}, not an object", 'write e.g. {"lr": 1e-4}')
    return opt_type
