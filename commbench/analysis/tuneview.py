"""`commbench tune` as the user reads it: candidates ranked by predicted communication time, the
measured ones beside their predictions (a miss over MISS_LIMIT flagged, never dropped), and the
winner as the smallest change to the user's ds_config (a JSON merge patch, RFC 7386)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

MISS_LIMIT = 0.25  # a prediction more than 25% off its measurement is flagged (issue #21)


@dataclass
class Row:
    stage: int
    reduce_bucket: int
    allgather_bucket: int
    grad_accum: int
    dtype: str
    predicted_scaled_us: float  # per step, at the measuring scale
    predicted_full_us: float | None = None  # per step, full model (None: the curve does not reach it)
    measured_us: float | None = None  # per step, at the measuring scale

    @property
    def ratio(self) -> float | None:
        """measured / predicted, both at the measuring scale."""
        if self.measured_us is None or not self.predicted_scaled_us:
            return None
        return self.measured_us / self.predicted_scaled_us

    @property
    def flagged(self) -> bool:
        r = self.ratio
        return r is not None and abs(r - 1) > MISS_LIMIT

    def per_micro_batch(self, full: bool) -> float:
        figure = self.predicted_full_us if full and self.predicted_full_us is not None else self.predicted_scaled_us
        return figure / self.grad_accum


def ranked(rows: list[Row]) -> tuple[list[Row], bool]:
    """Shortest predicted communication per micro-batch first (gradient accumulation spreads a
    step's reductions over g micro-batches); at full scale where every row has that figure."""
    full = all(r.predicted_full_us is not None for r in rows)
    return sorted(rows, key=lambda r: (r.per_micro_batch(full), r.stage, r.grad_accum)), full


def winner(rows: list[Row], full: bool) -> Row:
    """Among the measured rows, the shortest measured per micro-batch; none measured: the first."""
    measured = [r for r in rows if r.measured_us is not None]
    if not measured:
        return rows[0]
    return min(measured, key=lambda r: r.measured_us / r.grad_accum)


def _us(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def table(rows: list[Row], full: bool, scale: float) -> list[str]:
    """The ranked table; measured and ratio only where measured, a flag where the miss is > 25%."""
    lines = [f"#  rank  stage  reduce_bucket  allgather_bucket  grad_accum  dtype     "
             f"predicted(us/step @scale {scale:g})  measured(us/step @scale {scale:g})  ratio   "
             "full-scale predicted (us/step)  per micro-batch (us)"]
    for i, r in enumerate(rows, 1):
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        flag = "  MISS>25%" if r.flagged else ""
        lines.append(f"  {i:5d}  {r.stage:5d}  {r.reduce_bucket:13.3g}  {r.allgather_bucket:16.3g}  {r.grad_accum:10d}  "
                     f"{r.dtype:8s}  {_us(r.predicted_scaled_us):>33s}  {_us(r.measured_us):>32s}  {ratio:>5s}   "
                     f"{_us(r.predicted_full_us):>30s}  {_us(r.per_micro_batch(full)):>20s}{flag}")
    return lines


def merge_patch(old: dict, new: dict) -> dict:
    """The RFC 7386 merge patch that turns `old` into `new` (only what differs)."""
    patch: dict = {}
    for key in new:
        if key not in old:
            patch[key] = copy.deepcopy(new[key])
        elif isinstance(old[key], dict) and isinstance(new[key], dict):
            sub = merge_patch(old[key], new[key])
            if sub:
                patch[key] = sub
        elif old[key] != new[key]:
            patch[key] = copy.deepcopy(new[key])
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def apply_setting(document: dict, row: Row, old_grad_accum: int, old_dtype: str) -> dict:
    """A copy of the user's config with the row's settings: the ZeRO stage and bucket sizes,
    gradient_accumulation_steps (train_batch_size scaled with it, so micro batch and world size
    stay what they were), and the precision section."""
    out = copy.deepcopy(document)
    zero = out.setdefault("zero_optimization", {})
    zero["stage"] = row.stage
    zero["reduce_bucket_size"] = row.reduce_bucket
    zero["allgather_bucket_size"] = row.allgather_bucket
    if row.grad_accum != old_grad_accum or "gradient_accumulation_steps" in out:
        out["gradient_accumulation_steps"] = row.grad_accum
        tbs = out.get("train_batch_size")
        if isinstance(tbs, int) and not isinstance(tbs, bool) and tbs * row.grad_accum % old_grad_accum == 0:
            out["train_batch_size"] = tbs * row.grad_accum // old_grad_accum
    if row.dtype != old_dtype:
        for key in ("fp16", "bf16", "bfloat16"):
            if isinstance(out.get(key), dict):
                out[key]["enabled"] = False
        if row.dtype in ("float16", "bfloat16"):
            key = "fp16" if row.dtype == "float16" else ("bfloat16" if "bfloat16" in out and "bf16" not in out else "bf16")
            section = out.get(key) if isinstance(out.get(key), dict) else {}
            out[key] = {**section, "enabled": True}
    return _unchanged_where_equal(document, out)


def _unchanged_where_equal(old: dict, new: dict) -> dict:
    """Keys the setting wrote with the value DeepSpeed already used (its default) are taken back
    out, so the diff holds only real changes."""
    defaults = {"stage": 0, "reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000}
    zero_old = old.get("zero_optimization") if isinstance(old.get("zero_optimization"), dict) else {}
    zero_new = new["zero_optimization"]
    for key, default in defaults.items():
        if key not in zero_old and zero_new.get(key) == default:
            del zero_new[key]
    if not zero_new and "zero_optimization" not in old:
        del new["zero_optimization"]
    return new


def diff_lines(patch: dict) -> list[str]:
    return json.dumps(patch, indent=2, sort_keys=True).splitlines()
