"""A `commbench check` profile (docs/CHECK.md): which steps run, their sizes, the time budget, the
gate bands the sweep is judged by and the link rate every host should have, read from YAML through
the bands file's safe loader (analysis/gate/bandsfile.py); every mistake is one line naming the key and
the keys allowed there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.analysis.gate import bandsfile
from commbench.analysis.gate.bands import Bands, load_bands, parse_bands
from commbench.analysis.points.frames import printable
from commbench.core.errors import BadInput
from commbench.core.inputs import MAX_BANDS_FILE_BYTES, named_file, read_text
from commbench.core.units import format_size, parse_rate, parse_size
from commbench.core.vocab import ORDER, resolve

STEPS = ("doctor", "pairs", "sweep")
TOP_KEYS = ("version", "steps", "time_budget", "link_rate", "pairs", "sweep", "bands")
PAIRS_KEYS = ("size", "iters", "threshold")
SWEEP_KEYS = ("collective", "sizes", "iters")
MAX_BUDGET_S = 24 * 3600.0
# Past any machine's: a health check's message sizes (the largest GPU holds 141 GB; nccl-tests' usual
# top is 8-16 GiB) and a rail's rate (today's fastest NICs carry 800 Gbit/s to 1.6 Tbit/s).
MAX_CHECK_BYTES = 16 << 30
MAX_LINK_RATE_BITS = 100e12
PROFILE_FILE = named_file("check profile", "a check profile", MAX_BANDS_FILE_BYTES,
                          missing="write one (docs/CHECK.md) or leave --profile out",
                          too_big="a profile is a few lines (docs/CHECK.md)")


@dataclass(frozen=True)
class Profile:
    steps: tuple[str, ...] = ("doctor", "pairs")
    time_budget_s: float = 300.0
    link_rate_bits: float | None = None  # what every host's rails should carry; None: not checked
    pairs_size: int = 4 << 20
    pairs_iters: int = 5
    threshold: float = 0.8  # pairs: a host whose best link is below this share of the median host's best
    sweep_collective: str = "all_reduce"
    sweep_sizes: tuple[int, ...] = (1 << 20, 4 << 20)
    sweep_iters: int = 5
    bands: Bands | None = None
    source: str = "the default profile"
    notes: list[str] = field(default_factory=list)


def load(path: str | os.PathLike | None) -> Profile:
    """The profile at `path` (None: the default one: doctor and pairs, 300 s)."""
    if path is None:
        return Profile()
    return parse(read_text(path, PROFILE_FILE), str(path), Path(path).parent)


def _keys(doc: Any, allowed: tuple[str, ...], where: str) -> dict:
    if not isinstance(doc, dict):
        raise BadInput(f"{where} must be a mapping of {', '.join(allowed)} (docs/CHECK.md)")
    unknown = [k for k in doc if k not in allowed]
    if unknown:
        raise BadInput(f"{where}: unknown key {printable(str(unknown[0]))!r}: use {', '.join(allowed)}")
    return doc


def parse(text: str, source: str = "<profile>", base: Path | None = None) -> Profile:
    loaded = bandsfile.load_yaml(text, source)
    if loaded is None:  # an empty file or a bare null: more likely the wrong file than the default's wish
        raise BadInput(f"{source}: the profile is empty: write its keys (at least 'version: 1', docs/CHECK.md), "
                       "or leave out --profile for the default check")
    doc = _keys(loaded, TOP_KEYS, source)
    if doc.get("version", 1) != 1:
        raise BadInput(f"{source}: version {printable(repr(doc.get('version')))} is not one this commbench reads: "
                       "write 'version: 1'")
    steps = _steps(doc.get("steps", list(Profile.steps)), source)
    pairs = _keys(doc.get("pairs") or {}, PAIRS_KEYS, f"{source}: pairs")
    sweep = _keys(doc.get("sweep") or {}, SWEEP_KEYS, f"{source}: sweep")
    bands = _bands(doc.get("bands"), source, base or Path("."))
    if "sweep" in steps and bands is None:
        raise BadInput(f"{source}: the sweep step is judged by gate bands: add 'bands: FILE' (a bands file, "
                       "docs/GATE.md; `commbench gate --suggest` writes one) or drop sweep from steps")
    rate = doc.get("link_rate")
    return Profile(
        steps=steps,
        time_budget_s=_number(doc.get("time_budget", Profile.time_budget_s), f"{source}: time_budget", 1, MAX_BUDGET_S),
        link_rate_bits=None if rate is None else _rate(rate, f"{source}: link_rate"),
        pairs_size=_size(pairs.get("size", "4M"), f"{source}: pairs: size"),
        pairs_iters=_count(pairs.get("iters", 5), f"{source}: pairs: iters", 10000),
        threshold=_number(pairs.get("threshold", 0.8), f"{source}: pairs: threshold", 0.01, 0.99),
        sweep_collective=_collective(sweep.get("collective", "all_reduce"), f"{source}: sweep: collective"),
        sweep_sizes=tuple(_size(s, f"{source}: sweep: sizes") for s in _list(sweep.get("sizes", ["1M", "4M"]),
                                                                               f"{source}: sweep: sizes")),
        sweep_iters=_count(sweep.get("iters", 5), f"{source}: sweep: iters", 10000),
        bands=bands, source=source)


def _steps(value: Any, source: str) -> tuple[str, ...]:
    items = _list(value, f"{source}: steps")
    unknown = [s for s in items if s not in STEPS]
    if unknown:
        raise BadInput(f"{source}: steps: unknown step {printable(str(unknown[0]))!r}: use {', '.join(STEPS)}")
    if not items:
        raise BadInput(f"{source}: steps is empty: name at least one of {', '.join(STEPS)}")
    return tuple(s for s in STEPS if s in items)  # always in this order: setup first, then measurements


def _list(value: Any, where: str) -> list:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or len(value) > 64:
        raise BadInput(f"{where} must be a list, e.g. [doctor, pairs] or [1M, 4M]")
    return value


def _number(value: Any, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise BadInput(f"{where} {printable(repr(value))} must be a number from {low:g} to {high:g}")
    return float(value)


def _count(value: Any, where: str, high: int) -> int:
    """A number of iterations: a whole number (2.5 is refused, never cut to 2)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise BadInput(f"{where} {printable(repr(value))} must be a whole number from 1 to {high}")
    return value


def _size(value: Any, where: str) -> int:
    size = parse_size(str(value), where)
    if size > MAX_CHECK_BYTES:
        raise BadInput(f"{where} {printable(str(value))} is past any machine's: a check's sizes go up to "
                       f"{format_size(MAX_CHECK_BYTES)}")
    return size


def _rate(value: Any, where: str) -> float:
    bits = parse_rate(str(value), where)
    if bits > MAX_LINK_RATE_BITS:
        raise BadInput(f"{where} {printable(str(value))} is past any link's: give a rail's rate "
                       f"(at most {MAX_LINK_RATE_BITS / 1e12:g} Tbit/s), e.g. 400Gbps")
    return bits


def _key(value: Any) -> str:
    return str(value).strip().lower()


def _collective(value: Any, where: str) -> str:
    """One collective by any of its names (core/vocab.py), as the sweep child is given it."""
    try:
        picked = resolve(value) if isinstance(value, str) else []
    except BadInput:  # not a name of commbench's (core/vocab.py)
        picked = []
    if len(picked) != 1 or _key(value) == "all":
        raise BadInput(f"{where} {printable(repr(value))} must name one collective: one of {', '.join(ORDER)}")
    return picked[0].name


def _bands(value: Any, source: str, base: Path) -> Bands | None:
    """`bands: FILE` (relative to the profile) or the bands file's mapping written inline."""
    if value is None:
        return None
    if isinstance(value, dict):
        import yaml

        return parse_bands(yaml.safe_dump(value), f"{source}: bands")
    if not isinstance(value, str):
        raise BadInput(f"{source}: bands must name a bands file (docs/GATE.md) or hold one inline")
    path = Path(value) if Path(value).is_absolute() else base / value
    return load_bands(path)
