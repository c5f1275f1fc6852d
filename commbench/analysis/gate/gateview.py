"""A gate report as a person reads it: a fixed-width table for a terminal, or Markdown for a ticket.

One row an entry (its band, what was measured, the verdict and why), then the summary; text from
the bands file is one escaped terminal line, or inert Markdown (core/outtext.py).
"""

from __future__ import annotations

from commbench.core.outtext import LINE_LIMIT, SUMMARY_LIMIT, markdown, terminal
from commbench.analysis.gate.gate import EntryResult, GateReport


def _bw(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _band_text(r: EntryResult) -> str:
    if r.entry.expect == "fail":
        return "expect fail"
    if r.band is None:
        low, high = r.entry.band()
    else:
        low, high = r.band
    band = f">= {_bw(low)}" if high is None else f"{_bw(low)}..{_bw(high)}"
    basis = r.entry.basis.split(":")[0].split(" from ", 1)[-1] if r.entry.basis else None
    return f"{band} (-{r.entry.lower:.1%}{f', {basis}' if basis else ''})"


HEADERS = ["#", "entry", "expected GB/s", "measured GB/s", "rows", "ratio", "band GB/s", "verdict", "reason"]


def _table_rows(report: GateReport) -> list[list[str]]:
    out = []
    for r in report.results:
        out.append([str(r.entry.index), r.entry.describe(), _bw(r.entry.busbw_GBps), _bw(r.measured_GBps),
                    str(r.n_rows), "-" if r.ratio is None else f"{r.ratio:.3f}", _band_text(r), r.verdict,
                    r.reason])
    return out


def render_table(report: GateReport) -> str:
    rows = [[terminal(c, LINE_LIMIT) for c in row] for row in _table_rows(report)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    system = f" (system {terminal(report.system)})" if report.system else ""
    lines = [f"bands: {terminal(report.source, LINE_LIMIT)}{system}", "",
             fmt(HEADERS), fmt(["-" * w for w in widths]), *map(fmt, rows), "",
             terminal(report.summary(), SUMMARY_LIMIT)]
    return "\n".join(lines) + "\n"


def render_markdown(report: GateReport) -> str:
    verdict = "FAIL" if report.exit_code() else "PASS"
    system = f" (system {markdown(report.system)})" if report.system else ""
    lines = [f"### commbench gate: **{verdict}**", "", f"- bands: {markdown(report.source, LINE_LIMIT)}{system}",
             f"- {markdown(report.summary(), SUMMARY_LIMIT)}", "",
             "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(markdown(c, LINE_LIMIT) for c in row) + " |" for row in _table_rows(report)]
    return "\n".join(lines) + "\n"
