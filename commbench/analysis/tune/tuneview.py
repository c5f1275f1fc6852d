"""`commbench tune` as the user reads it: candidates ranked by predicted communication time, the
measured ones beside their predictions (a miss over MISS_LIMIT flagged, never dropped), and the
winner as the smallest change to the user's ds_config (a JSON merge patch, RFC 7386)."""

from __future__ import annotations

import copy
import json
import textwrap
from dataclasses import dataclass
from typing import Protocol

from commbench.core.units import format_us

MISS_LIMIT = 0.25  # a prediction more than 25% off its measurement is flagged (issue #21)
# A further change to the user's config must buy at least this much (tune --min-gain): above the
# run-to-run noise of one measurement per candidate (3-6% between runs of a 100mbit lab step).
MIN_GAIN = 0.10
WIDTH = 120  # the columns tune's report fits (--wide only widens the table)
SETTINGS = ("stage", "reduce_bucket", "allgather_bucket", "grad_accum", "dtype")  # what a candidate sets


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
    yours: bool = False  # the user's own config, measured as the baseline

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

    @property
    def measured_per_micro_batch(self) -> float | None:
        return None if self.measured_us is None else self.measured_us / self.grad_accum

    def setting(self) -> tuple:
        return tuple(getattr(self, name) for name in SETTINGS)

    def changes(self, user: Row) -> int:
        """How many of the config's settings this candidate changes."""
        return sum(a != b for a, b in zip(self.setting(), user.setting()))


def _measured(row: Row) -> float:
    """measured_per_micro_batch of a row known to be measured."""
    value = row.measured_per_micro_batch
    assert value is not None
    return value


def ranked(rows: list[Row]) -> tuple[list[Row], bool]:
    """Shortest predicted communication per micro-batch first (gradient accumulation spreads a
    step's reductions over g micro-batches); at full scale where every row has that figure."""
    full = all(r.predicted_full_us is not None for r in rows)
    return sorted(rows, key=lambda r: (r.per_micro_batch(full), r.stage, r.grad_accum)), full


def fastest(rows: list[Row]) -> Row | None:
    """The measured row with the shortest measured communication per micro-batch."""
    measured = [r for r in rows if r.measured_us is not None]
    return min(measured, key=_measured) if measured else None


def winner(rows: list[Row], user: Row, min_gain: float = MIN_GAIN) -> Row:
    """The smallest change to the user's config that is within `min_gain` of the fastest measured
    row (fewest settings changed, then the faster): a change of precision, batch or memory layout
    is not worth a difference the measurement cannot tell from noise (two candidates with the same
    schedule, fp16 and bf16, differ by chance). None measured: the best predicted."""
    best = fastest(rows)
    if best is None:
        return rows[0]
    # r is "near" when the fastest is less than min_gain faster than it: 1 - best / r < min_gain
    near = [r for r in rows if r.measured_us is not None
            and _measured(r) * (1 - min_gain) <= _measured(best)]
    return min(near, key=lambda r: (r.changes(user), _measured(r)))


def verdict_lines(rows: list[Row], best: Row, user: Row, min_gain: float) -> list[str]:
    """Why the winner won: its measured change against the user's config, and the faster candidate
    it was preferred to (one that changes more of the config for less than min_gain)."""
    lines = []
    yours = next((r for r in rows if r.yours and r.measured_us is not None), None)
    if best.yours:
        lines.append(f"# no measured candidate beats your config by --min-gain {min_gain:.0%} or more: keep it")
    elif yours is not None and best.measured_us is not None:
        new, old = _measured(best), _measured(yours)
        lines.append(f"# measured: {abs(1 - new / old):.0%} {'less' if new <= old else 'more'} communication per "
                     f"micro-batch than your config ({format_us(new)} vs {format_us(old)})")
    top = fastest(rows)
    if top is not None and top is not best:
        gap = 1 - _measured(top) / _measured(best)
        lines.append(f"# the fastest measured (rank {_rank(rows, top)}) is {gap:.1%} faster but changes "
                     f"{top.changes(user)} of your settings, the winner {best.changes(user)}: "
                     f"under --min-gain {min_gain:.0%}, the smaller change wins")
    return lines


def recommendation(rows: list[Row], best: Row, user: Row, min_gain: float, documents: tuple[dict, dict],
                   ds_config: str, unmeasured: str | None = None, memory: str | None = None) -> list[str]:
    """What tune says first: a change to training (batch, accumulation, precision) on the first
    line, why the user's config was not measured, the winner and its measured comparison with the
    user's config, what a lower stage costs in memory (`memory`), then the change as a JSON merge
    patch (RFC 7386) of `documents` (old, new)."""
    old, new = documents
    lines = [line for line in (training_change(old, new), unmeasured and f"# {unmeasured}") if line]
    lines.append(f"# winner: ZeRO-{best.stage}, reduce_bucket_size {best.reduce_bucket:.3g}, "
                 f"gradient_accumulation_steps {best.grad_accum}, {best.dtype} "
                 f"(rank {_rank(rows, best)} of {len(rows)})")
    lines += verdict_lines(rows, best, user, min_gain) + ([f"# {memory}"] if memory else [])
    patch = merge_patch(old, new)
    lines.append(f"# change to {ds_config} (JSON merge patch, RFC 7386):")
    return lines + (diff_lines(patch) if patch else ["{}  (your config is already the winner)"])


class Plan(Protocol):
    """What record reads of tune's plan (workloads/tune.py TunePlan)."""

    @property
    def model(self) -> str: ...
    @property
    def params(self) -> int: ...
    @property
    def world(self) -> int: ...
    @property
    def backend(self) -> str: ...
    @property
    def launcher(self) -> str: ...
    @property
    def scale(self) -> float: ...
    @property
    def run_id(self) -> str: ...


def record(plan: Plan, rows: list[Row], full: bool, best: Row, patch: dict, notes: list[str], min_gain: float) -> dict:
    """tune's result for a program (a CI job, a benchmark): the plan, every candidate in rank order
    with its figures, the winner and the merge patch."""
    def row(r: Row, rank: int) -> dict:
        return {"rank": rank, **{name: getattr(r, name) for name in SETTINGS},
                "predicted_us": r.predicted_scaled_us, "measured_us": r.measured_us, "ratio": r.ratio,
                "predicted_full_us": r.predicted_full_us, "flagged": r.flagged, "yours": r.yours}

    return {"model": plan.model, "params": plan.params, "world": plan.world, "backend": plan.backend,
            "launcher": plan.launcher, "scale": plan.scale, "run_id": plan.run_id, "ranked_at_full_scale": full,
            "min_gain": min_gain, "miss_limit": MISS_LIMIT,
            "candidates": [row(r, i) for i, r in enumerate(rows, 1)],
            "winner": row(best, _rank(rows, best)), "patch": patch, "notes": notes}


def _rank(rows: list[Row], row: Row) -> int:
    return next(i for i, r in enumerate(rows, 1) if r is row)


def table(rows: list[Row], full: bool, scale: float, wide: bool = False) -> list[str]:
    """The ranked table in 120 columns; measured and ratio only where measured, a flag where the
    miss is > 25%. `wide` (--wide) adds allgather_bucket_size and the full-scale prediction."""
    extra = f"  {'allgather_bucket':>16s}  {'full-scale pred.':>16s}" if wide else ""
    lines = [f"#  rank  stage  reduce_bucket  accum  dtype     {'predicted':>10s}  {'measured':>10s}  ratio  "
             f"{'/micro-batch':>12s}{extra}"]
    for i, r in enumerate(rows, 1):
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        flag = ("  MISS>25%" if r.flagged else "") + ("  (yours)" if r.yours else "")
        more = f"  {r.allgather_bucket:16.3g}  {format_us(r.predicted_full_us):>16s}" if wide else ""
        lines.append(f"  {i:5d}  {r.stage:5d}  {r.reduce_bucket:13.3g}  {r.grad_accum:5d}  {r.dtype:8s}  "
                     f"{format_us(r.predicted_scaled_us):>10s}  {format_us(r.measured_us):>10s}  {ratio:>5s}  "
                     f"{format_us(r.per_micro_batch(full)):>12s}{more}{flag}")
    return lines


def wrapped(lines: list[str]) -> list[str]:
    """Comment lines cut to WIDTH columns, each continuation indented under its text (a note's
    under the note); other lines (the patch, a path longer than the width) as they are."""
    out = []
    for text in lines:
        if not text.startswith("#") or len(text) <= WIDTH:
            out.append(text)
            continue
        indent = "#" + " " * (len("# note: ") - 1 if text.startswith("# note: ") else 3)
        out += textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)
    return out


def training_change(old: dict, new: dict) -> str | None:
    """The one line that says the recommendation changes training itself (global batch,
    accumulation, precision), or None: it comes first, never inside the patch alone."""
    changed = []
    for key in ("gradient_accumulation_steps", "train_batch_size"):
        if old.get(key) != new.get(key):
            changed.append(f"{key} {old.get(key)} -> {new.get(key)}")
    before, after = _precision(old), _precision(new)
    if before != after:
        changed.append(f"precision {before} -> {after}")
    if not changed:
        return None
    why = [w for w, hit in (("retune the learning rate", len(changed) > (before != after)),
                            ("check convergence", before != after)) if hit]
    return "# CHANGES TRAINING: " + ", ".join(changed) + f" ({'; '.join(why)})"


def _precision(doc: dict) -> str:
    on = [k for k in ("fp16", "bf16", "bfloat16") if isinstance(doc.get(k), dict) and doc[k].get("enabled") is True]
    return {"fp16": "fp16", "bf16": "bf16", "bfloat16": "bf16"}[on[0]] if on else "fp32"


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
            bf16 = "bfloat16" if "bfloat16" in out and "bf16" not in out else "bf16"
            key = "fp16" if row.dtype == "float16" else bf16
            got = out.get(key)
            section = got if isinstance(got, dict) else {}
            out[key] = {**section, "enabled": True}
    return _unchanged_where_equal(document, out)


def _unchanged_where_equal(old: dict, new: dict) -> dict:
    """Keys the setting wrote with the value DeepSpeed already used (its default) are taken back
    out, so the diff holds only real changes."""
    defaults = {"stage": 0, "reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000}
    got = old.get("zero_optimization")
    zero_old = got if isinstance(got, dict) else {}
    zero_new = new["zero_optimization"]
    for key, default in defaults.items():
        if key not in zero_old and zero_new.get(key) == default:
            del zero_new[key]
    if not zero_new and "zero_optimization" not in old:
        del new["zero_optimization"]
    return new


def diff_lines(patch: dict) -> list[str]:
    return json.dumps(patch, indent=2, sort_keys=True).splitlines()
