"""The report's "Wire" section: trouble counters that moved during the run, wire bytes per payload
byte, or the sentence that nothing moved or that no counters were read (wire/wireview.py's rows), as
HTML and Markdown. Every report has it."""

from __future__ import annotations

from commbench.analysis.points.runs import runs_named
from typing import Any

from commbench.analysis.points.section import CompareHooks, CompareKit, HtmlKit, Inputs, MarkdownKit, Section
from commbench.analysis.wire import wiremetrics, wirequery, wireview


def wire_html(inp: Inputs, kit: HtmlKit) -> str:
    """The section; the curves' tables, where the page has them, bring the wire ratios already read
    (large inputs: from the files, not the rows)."""
    esc, table = kit.esc, kit.table
    w = wireview.section(inp.df, runs_named(inp.df), inp.tables.ratios if inp.tables is not None else None)
    out = ['<section id="wire"><h2>Wire</h2>']
    if w.read_line:
        out.append(f'<p class="muted">{esc(wireview.WIRE_NOTE)} {esc(w.read_line)}</p>')
    if w.sentence:
        out.append(f"<p>{esc(w.sentence)}</p>")
    if w.troubles:
        out.append("<h3>Trouble counters that moved</h3>")
        out.append(table(wireview.TROUBLE_HEADERS, w.troubles, num=[4],
                         classes=[["", "", "", "", "bad", ""]] * len(w.troubles)))
    if w.payload:
        out.append("<h3>Wire bytes per payload byte</h3>")
        out.append(table(wireview.PAYLOAD_HEADERS, w.payload, num=[2, 3, 4, 5]))
    out.append("</section>")
    return "\n".join(out)


def wire_markdown(inp: Inputs, kit: MarkdownKit) -> list[str]:
    md, md_table = kit.md, kit.table
    w = wireview.section(inp.df, runs_named(inp.df))
    out = ["## Wire", ""]
    if w.read_line:
        out += [f"{wireview.WIRE_NOTE} {md(w.read_line)}", ""]
    if w.sentence:
        out += [md(w.sentence), ""]
    if w.troubles:
        out += ["### Trouble counters that moved", "", md_table(wireview.TROUBLE_HEADERS, w.troubles, right=[4]), ""]
    if w.payload:
        out += ["### Wire bytes per payload byte", "", md_table(wireview.PAYLOAD_HEADERS, w.payload,
                                                                right=[2, 3, 4, 5]), ""]
    return out


def compare_summary(c: Any, kit: CompareKit) -> list[str]:
    """compare's line when trouble counters name the likely cause of some points (their notes say which)."""
    caused = sum(1 for p in c.points if p.likely_cause)
    if not caused:
        return []
    return [f"wire: trouble counters moved at {caused} point{'s' if caused != 1 else ''} where they were 0 "
            f"(or {wireview.GROWTH}x smaller) before: the likely cause is in the note"]


SECTION = Section("wire", "Wire", "", wire_html, wire_markdown,
                  compare=CompareHooks(causes=wirequery.likely_causes, summary=compare_summary),
                  metrics=wiremetrics.wire_metrics)
