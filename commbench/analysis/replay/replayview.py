"""Replay views (issue #42 part 4, docs/REPLAY.md "Reading a replay"): compare's block of replayed
steps (a line a step: its time before -> after, compare's verdict for it, the collectives that
account for the change) and the report's "Replay" section (per step, its time by collective
replayed and recorded, its largest ops, replay over recorded), as terminal text, Markdown and
HTML. The figures are analysis/replay/replayrows.py's; every text from a file is escaped here for its output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from commbench.analysis.points.section import CompareHooks, Section, SectionFigure
from commbench.analysis.replay import replaymetrics, replayrows
from commbench.analysis.replay.replayrows import LARGEST, Cause, Step, StepChange, steps
from commbench.core.outtext import markdown, terminal
from commbench.core.units import counted, format_size, format_us

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

MAX_CAUSES = 4  # collectives named a step in compare's line; the rest counted
MAX_STEPS = 12  # steps shown in detail in the report; every step is in the overview table
REPLAY_NOTE = ("Each replayed step's communication on this fabric against what the job recorded. A step "
               "stands for the recorded steps that issued the same ops. Replayed: the median over repetitions "
               "of the step's time (max over ranks); a collective's time is the sum of its ops' medians (ops "
               "that overlap make these add up to more than the step). Replay/recorded above 1: slower here.")


def duration(us: float | None) -> str:
    """The one time format (core/units.py), '-' where unknown, as the tables write it."""
    return "-" if us is None else format_us(us)


def signed(us: float) -> str:
    return ("+" if us >= 0 else "-") + duration(abs(us))


def ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# ---- compare ----


def _cause_text(c: Cause, first: bool, clean: Callable[[Any], str]) -> str:
    share = f"{c.share * 100:.0f}%" + (" of the change" if first else "")
    return f"{clean(c.collective)} {share} ({signed(c.change_us)}, {counted(c.calls, 'call')})"


def change_text(c: StepChange, clean: Callable[[Any], str] = str) -> str:
    """'replay step 0 (steps 0-3): 41.2 ms -> 356 ms, regression; all_reduce 88% of the change
    (+277 ms, 4 calls), all_gather 12% (+38 ms, 1 call)'; clean: what makes a file's text inert
    in the output (a collective's name, the steps, a setting)."""
    setting = f" [{clean(c.setting)}]" if c.setting else ""
    line = f"replay {clean(c.title)}{setting}: {duration(c.before_us)} -> {duration(c.after_us)}, {c.verdict}"
    shown = c.causes[:MAX_CAUSES]
    against = _against(c)
    parts = [_cause_text(x, i == 0 and not against, clean) for i, x in enumerate(shown)]
    if len(c.causes) > len(shown):
        parts.append(f"{len(c.causes) - len(shown)} more")
    if against:  # overlapping ops: their sums can move while the step moves the other way
        summed = signed(sum(x.change_us for x in c.causes))
        parts[0] = f"the collectives' summed time moved the other way ({summed}): {parts[0]}"
    return "; ".join([line, ", ".join(parts)]) if parts else line


def _against(c: StepChange) -> bool:
    """Whether the collectives' summed change has the other sign than the step's own."""
    if c.before_us is None or c.after_us is None:
        return False
    return (c.after_us - c.before_us) * sum(x.change_us for x in c.causes) < 0


def compare_lines(changes: Sequence[StepChange]) -> list[str]:
    """compare's table block: a terminal line a step (every text from a file escaped and bounded)."""
    return [change_text(c, terminal) for c in changes]


def compare_html(changes: Sequence[StepChange], esc: Callable[[Any], str]) -> str:
    """The report's comparison: the same lines as a list ('' for no replayed step); esc: report.py's."""
    if not changes:
        return ""
    items = "".join(f"<li>{esc(change_text(c))}</li>" for c in changes)
    return f'<h3>Replayed steps</h3><ul class="replay">{items}</ul>'


def compare_markdown(changes: Sequence[StepChange]) -> list[str]:
    if not changes:
        return []
    return ["", "**Replayed steps:**", ""] + [f"- {change_text(c, markdown)}" for c in changes]


# ---- the report's Replay section ----

Part = tuple[str, str, list[str], list[list[str]], list[int]]  # title, intro, headers, rows, numeric columns


def _runs(all_steps: list[Step]) -> bool:
    return len({s.run for s in all_steps}) > 1


def _name(s: Step, runs: bool) -> str:
    where = [f"run {s.run}"] if runs else []
    where += [s.setting] if s.setting else []
    return s.title() + (f" ({', '.join(where)})" if where else "")


def _overview(all_steps: list[Step], runs: bool) -> Part:
    headers = ["step", "ops", "replayed", "recorded", "replay/recorded"]
    rows = [[_name(s, runs), str(len(s.ops)), duration(s.time_us), duration(s.recorded_us), ratio_text(s.ratio)]
            for s in all_steps]
    return ("Steps", "", headers, rows, [1, 2, 3, 4])


def _by_collective(s: Step) -> list[list[str]]:
    rows = []
    for p in s.parts:
        share = f"{p.time_us / s.time_us * 100:.0f}%" if s.time_us else "-"
        rows.append([p.collective, str(p.calls), format_size(p.size_bytes), duration(p.time_us),
                     duration(p.recorded_us), ratio_text(p.time_us / p.recorded_us if p.recorded_us else None), share])
    return rows


def _largest(s: Step) -> list[list[str]]:
    return [[str(o.trace_op), o.collective, format_size(o.size_bytes or 0), o.dtype or "-", o.group or "-",
             duration(o.time_us), duration(o.recorded_us),
             ratio_text(o.time_us / o.recorded_us if o.time_us is not None and o.recorded_us else None)]
            for o in s.largest()]


def _step_parts(s: Step, runs: bool) -> list[Part]:
    intro = (f"{counted(len(s.ops), 'op')}; replayed {duration(s.time_us)}, recorded {duration(s.recorded_us)}"
             f", replay/recorded {ratio_text(s.ratio)}")
    coll = ["collective", "calls", "bytes", "replayed", "recorded", "replay/recorded", "of the step"]
    ops = ["op", "collective", "size", "dtype", "group", "replayed", "recorded", "replay/recorded"]
    title = _name(s, runs)
    return [(title, intro, coll, _by_collective(s), [1, 2, 3, 4, 5, 6]),
            (f"{title}: {_largest_title(len(s.ops))}", "", ops, _largest(s), [0, 2, 5, 6, 7])]


def _largest_title(n: int) -> str:
    if n > LARGEST:
        return f"the {LARGEST} largest of its {n} ops"
    return "its op" if n == 1 else "its ops, largest first"


def section_parts(df: pd.DataFrame) -> list[Part]:
    """The section's tables: every step's overview, then each step (at most MAX_STEPS) by
    collective and its largest ops; [] for rows without a replay."""
    all_steps = steps(df, per_run=True)
    if not all_steps:
        return []
    runs = _runs(all_steps)
    out = [_overview(all_steps, runs)]
    for s in all_steps[:MAX_STEPS]:
        out += _step_parts(s, runs)
    if len(all_steps) > MAX_STEPS:
        out.append(("", f"{len(all_steps) - MAX_STEPS} more steps: in the Steps table above", [], [], []))
    return out


def section_html(df: pd.DataFrame, table: Callable[..., str], esc: Callable[[Any], str]) -> str:
    """The report's "Replay" section ('' without replay rows); table and esc: report.py's."""
    parts = section_parts(df)
    if not parts:
        return ""
    out = ['<section id="replay"><h2>Replay</h2>', f'<p class="muted">{esc(REPLAY_NOTE)}</p>']
    for title, intro, headers, rows, num in parts:
        out += [f"<h3>{esc(title)}</h3>"] if title else []
        out += [f"<p>{esc(intro)}</p>"] if intro else []
        out += [table(headers, rows, num=num)] if rows else []
    return "\n".join([*out, "</section>"])


def section_markdown(df: pd.DataFrame, table: Callable[..., str], md: Callable[[Any], str]) -> list[str]:
    """The Markdown report's "Replay" section ([] without replay rows); table and md: markdown.py's."""
    parts = section_parts(df)
    if not parts:
        return []
    out = ["## Replay", "", md(REPLAY_NOTE), ""]
    for title, intro, headers, rows, num in parts:
        out += [f"### {md(title)}", ""] if title else []
        out += [md(intro), ""] if intro else []
        out += [table(headers, rows, right=num), ""] if rows else []
    return out


def replay_rows(df: pd.DataFrame) -> pd.DataFrame | None:
    """The rows of replayed jobs (None: none): they have no message-size curve."""
    if "workload" not in df.columns:
        return None
    rows = df[df["workload"] == "replay"]
    return rows if len(rows) else None


def _figure(rows: pd.DataFrame, metric: str, rate: float | None, label: str | None) -> Figure:
    from commbench.analysis.replay import replayplot  # matplotlib: only when a figure is drawn

    return replayplot.build_figure(rows)


def _changes(comparison: Any) -> list[StepChange]:
    """The replayed steps compare found (CompareHooks.compared: replayrows.compared)."""
    return comparison.parts.get("replay", [])


SECTION = Section("replay", "Replay", "zero", lambda inp, kit: section_html(inp.df, kit.table, kit.esc),
                  lambda inp, kit: section_markdown(inp.df, kit.table, kit.md),
                  claims=replay_rows, figure=SectionFigure("-replay", _figure, in_report=False),
                  compare=CompareHooks(compared=replayrows.compared, text=lambda c: compare_lines(_changes(c)),
                                       markdown=lambda c: compare_markdown(_changes(c)),
                                       html=lambda c, esc: compare_html(_changes(c), esc)),
                  metrics=replaymetrics.replay_metrics)
