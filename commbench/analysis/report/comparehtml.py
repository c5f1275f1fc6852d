"""The comparison against a baseline as the report page's section: the verdict badge, the summary,
warnings and differences, the per-point table with the key columns every point shares folded
above it, and the points of one side only.

It reads a commbench.analysis.compare.compare.Comparison by its field names only (getattr), so
a page still renders a stand-in of the same shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from commbench.analysis.points.runs import placement_name
from commbench.analysis.report.htmlparts import esc, table
from commbench.analysis.curves.curvetables import fnum, fp, ratio_text
from commbench.analysis.points.runs import missing
from commbench.core.units import counted, format_size


# --------------------------------------------------------------------------- comparison


def _verdict_class(verdict: Any) -> str:
    v = str(verdict or "").lower()
    if any(w in v for w in ("regress", "worse", "slower", "fail", "down")):
        return "bad"
    if any(w in v for w in ("improv", "better", "faster", "restored")):
        return "good"
    if any(w in v for w in ("inconclusive", "noisy", "unknown", "insufficient", "mixed", "nothing")):
        return "warn"
    return "neutral"


def _key_text(key: Any, name: str) -> str:
    if not isinstance(key, dict):
        return str(key)
    v = key.get(name)
    if name == "size_bytes" and not missing(v):
        return format_size(int(v))  # type: ignore[arg-type]  # missing() ruled out None
    if name == "in_place" and isinstance(v, (bool, int)) and not missing(v):
        return placement_name(v)
    return "–" if missing(v) else str(v)


_KEY_TITLES = {"size_bytes": "size", "in_place": "placement"}


def _key_columns(keys: Iterable[Any]) -> list[str]:
    cols: list[str] = []
    for k in keys:
        if isinstance(k, dict):
            cols += [c for c in k if c not in cols]
    order = ["collective", "dtype", "in_place", "size_bytes"]
    return sorted(cols, key=lambda c: (order.index(c) if c in order else len(order), cols.index(c)))


def _split_key_columns(keys: list) -> tuple[list[str], list[tuple[str, str]]]:
    """Key columns worth a table column (they vary), and (column, value) of those that do not.
    Columns missing in every key (bucket_bytes of a sweep) are dropped; collective and size stay."""
    cols, same = [], []
    for c in _key_columns(keys):
        values = {_key_text(k, c) for k in keys}
        if values == {"–"}:
            continue
        if len(values) == 1 and c not in ("collective", "size_bytes") and len(keys) > 1:
            same.append((c, values.pop()))
        else:
            cols.append(c)
    return cols, same


def _items(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [f"{k}: {v}" for k, v in value.items()]
    if isinstance(value, (str, bytes)):
        return [value]
    try:
        return list(value)
    except TypeError:
        return [value]


def _difference_text(item: Any) -> str:
    if isinstance(item, dict):
        if {"field", "before", "after"} <= set(item):
            return f"{item['field']}: {item['before']} → {item['after']}"
        return ", ".join(f"{k}: {v}" for k, v in item.items())
    if isinstance(item, (tuple, list)) and len(item) == 3:
        return f"{item[0]}: {item[1]} → {item[2]}"
    return str(item)


def comparison_html(c: Any, figure_html: str = "") -> str:
    """A commbench.analysis.compare.compare.Comparison as an HTML section body: the overall verdict badge, the
    numbers behind it, warnings, setup differences, (figure_html, trusted markup, if given), one
    table row per point, one-sided points."""
    def g(name: str, default: Any = None) -> Any:
        return getattr(c, name, default)

    verdict = g("verdict", "")
    parts = [f'<p><span class="badge {_verdict_class(verdict)}">{esc(str(verdict).upper() or "NO VERDICT")}</span>']
    summary = []
    if not missing(g("geomean_ratio")):
        summary.append(f"geometric-mean busbw ratio after/before {ratio_text(g('geomean_ratio'))}")
    if not missing(g("threshold")):
        summary.append(f"threshold {fnum(float(g('threshold')) * 100)}%")
    if not missing(g("alpha")):
        summary.append(f"alpha {fnum(g('alpha'))}")
    points = list(g("points", []) or [])
    counts: dict[str, int] = {}
    for p in points:
        counts[str(getattr(p, "verdict", "?"))] = counts.get(str(getattr(p, "verdict", "?")), 0) + 1
    summary.append(f"{counted(len(points), 'point')} compared" + (
        ": " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1])) if counts else ""))
    parts.append(" &nbsp;" + esc(" · ".join(summary)) + "</p>")
    needed = g("repetitions_needed")
    if not missing(needed) and needed:
        parts.append(f'<p class="muted">Deciding a point needs at least {esc(needed)} repetitions a side '
                     f"(sweep -R {esc(needed)}) at this alpha and number of points.</p>")

    warnings = _items(g("warnings"))
    if warnings:
        parts.append("<h3>Warnings</h3><ul class=\"warnings\">" + "".join(f"<li>{esc(w)}</li>" for w in warnings)
                     + "</ul>")
    differences = _items(g("differences"))
    if differences:
        parts.append("<h3>Setup differences between the sides</h3><ul>"
                     + "".join(f"<li>{esc(_difference_text(d))}</li>" for d in differences) + "</ul>")

    if figure_html:
        parts.append(figure_html)
    if points:
        parts.extend(_points_html(points))
    for name, title in (("only_before", "Only in the baseline (before)"),
                        ("only_after", "Only in the new results (after)")):
        parts.extend(_one_sided_html(_items(g(name)), title))
    return "\n".join(parts)


def _points_html(points: list[Any]) -> list[str]:
    """The "Per point" table of a comparison: the key columns that vary, the numbers, the verdict."""
    parts = []
    cols, same = _split_key_columns([p.key for p in points])
    tests = {"–" if missing(getattr(p, "test", None)) else str(p.test) for p in points}
    one_test = len(tests) == 1 and len(points) > 1
    if one_test:
        same.append(("test", tests.pop()))
    if same:
        parts.append('<p class="muted">Every point: '
                     + esc(", ".join(f"{_KEY_TITLES.get(c, c)} {v}" for c, v in same)) + "</p>")
    headers = [_KEY_TITLES.get(c, c) for c in cols] + [
        "busbw before (GB/s)", "busbw after (GB/s)", "ratio", "p", "Holm p", "BH q"] + (
        [] if one_test else ["test"]) + ["verdict", "note"]
    body: list[list[str]] = []
    classes: list[list[str]] = []
    for p in points:
        def pv(name: str, p: Any = p) -> Any:
            return getattr(p, name, None)
        body.append([_key_text(p.key, col) for col in cols] + [
            fnum(pv("before_busbw")), fnum(pv("after_busbw")), ratio_text(pv("ratio")), fp(pv("p_value")),
            fp(pv("p_holm")), fp(pv("q_bh"))]
            + ([] if one_test else ["–" if missing(pv("test")) else str(pv("test"))]) + [
            "–" if missing(pv("verdict")) else str(pv("verdict")),
            _note(pv("note"), pv("likely_cause"))])
        vc = {"bad": "v-bad", "good": "v-good", "warn": "v-warn"}.get(_verdict_class(pv("verdict")), "")
        classes.append([""] * (len(headers) - 2) + [vc, "note"])
    n = len(cols)
    parts.append("<h3>Per point</h3>")
    parts.append('<div class="scroll compact">' + table(headers, body, num=range(n, n + 6), classes=classes)
                 + "</div>")
    return parts


def _one_sided_html(keys: list[Any], title: str) -> list[str]:
    """The points one side only measured: a table of their key columns (folded when many)."""
    if not keys:
        return []
    cols, _ = _split_key_columns(keys)
    body = (table([_KEY_TITLES.get(c, c) for c in cols], [[_key_text(k, col) for col in cols] for k in keys])
            if cols else "<ul>" + "".join(f"<li>{esc(k)}</li>" for k in keys) + "</ul>")
    if len(keys) > 8:
        body = f"<details><summary>show the {len(keys)} points</summary>{body}</details>"
    return [f"<h3>{esc(title)}: {counted(len(keys), 'point')}, not compared</h3>", body]



def _note(note: Any, cause: Any) -> str:
    """A point's note and, when compare named one, its likely cause (plain text)."""
    parts = ["" if missing(note) else str(note), "" if missing(cause) or not cause else f"likely cause: {cause}"]
    return "; ".join(x for x in parts if x)
