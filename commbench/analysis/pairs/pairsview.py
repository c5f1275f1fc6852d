"""The report's two sections of `commbench pairs` rows: "Faults" (the links that could not be measured,
what their pattern blames, every failed link; only when a link failed) and "Links between hosts"
(the heat map of bandwidth between hosts and the ranking `commbench pairs --from` prints), as HTML and
Markdown. Every value from a file is escaped by the report's kit for its output; fault_runs is plain
text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from commbench.analysis.pairs import pairsplot
from commbench.analysis.points.frames import is_true
from commbench.analysis.points.runs import missing, runs_named
from commbench.analysis.points.section import HtmlKit, MarkdownKit, Section, SectionFigure
from commbench.core.outtext import LINE_LIMIT, terminal

if TYPE_CHECKING:
    import pandas as pd


PAIRS_NOTE = ("Point-to-point bandwidth of every pair of hosts (`commbench pairs`), median over repetitions: "
              "senders on rows, receivers on columns; the slowest links are boxed and hosts singled out as "
              "slow are named in red. Below, the ranking `commbench pairs --from` prints.")


FAULTS_NOTE = ("Links of `commbench pairs` that could not be measured (unreachable: the peer's host did not "
               "answer; timeout: its process did not answer in time; error: the transfer failed), what their "
               "pattern blames, and every failed link. A confirmation round re-measures a suspect against hosts "
               "that passed. In the heat map a failed link is a hatched grey cell.")
CULPRIT_HEADERS = ["culprit", "kind", "status", "confirmation round", "evidence"]
FAULT_HEADERS = ["src", "dst", "status", "error", "confirmation round"]
_CONFIRMED = {True: "failed again: confirmed", False: "recovered: not named", None: "–"}


def fault_runs(pairs_df: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Per pairs run with failed rows (status in linkrank.FAILED), from linkfaults.faults: its name, a
    line counting the failures, the culprits as CULPRIT_HEADERS cells (and per culprit whether it
    is named: not refuted by the confirmation round, not undecided), why there is no verdict (or
    None), and the failed links as FAULT_HEADERS cells; plain text. [] when nothing failed."""
    if pairs_df is None or len(pairs_df) == 0 or "status" not in pairs_df.columns or pairs_df["status"].isna().all():
        return []
    from commbench.analysis.pairs import linkfaults, linkrank

    names = runs_named(pairs_df)
    out = []
    for run_id, run in pairs_df.groupby("run_id", sort=False):
        failed = run["status"].isin(linkrank.FAILED)
        if not failed.any():
            continue
        verdict = linkfaults.faults(run)
        confirm = is_true(run, "confirm") & failed.to_numpy()
        counts = run.loc[failed, "status"].value_counts()
        line = (f"{int(failed.sum())} of {len(run)} measurements failed: "
                + ", ".join(f"{n} {s}" for s, n in counts.items())
                + (f" ({int(confirm.sum())} in the confirmation round)" if confirm.any() else ""))
        culprits = [[c.name, c.kind, c.status, _CONFIRMED.get(c.confirmed, str(c.confirmed)), " · ".join(c.evidence)]
                    for c in verdict.culprits]
        rows = [["–" if missing(f.get(k)) else str(f.get(k)) for k in ("src", "dst", "status", "error")]
                + ["yes" if not missing(f.get("confirm")) and bool(f.get("confirm")) else "–"]
                for f in verdict.failed]
        out.append({"run": names.get(str(run_id), str(run_id)), "run_id": str(run_id), "summary": line,
                    "culprits": culprits, "named": [c in verdict.named for c in verdict.culprits],
                    "undecided": verdict.undecided, "rows": rows})
    return out


def faults_html(pairs_df: pd.DataFrame | None, kit: HtmlKit) -> str:
    """The "Faults" section: links of a pairs run that could not be measured ("" when none failed)."""
    runs = fault_runs(pairs_df)
    if not runs:
        return ""
    esc, table = kit.esc, kit.table
    out = ['<section id="faults"><h2>Faults</h2>', f'<p class="muted">{esc(FAULTS_NOTE)}</p>']
    for run in runs:
        if len(runs) > 1:
            out.append(f"<h3>Run {esc(run['run'])}</h3>")
        out.append(f'<p><span class="badge bad">{esc(run["summary"])}</span></p>')
        if run["culprits"]:
            named = [["v-bad" if n else "", "", "", "", "wrap"] for n in run["named"]]
            out.append(table(CULPRIT_HEADERS, run["culprits"], classes=named))
        if run["undecided"]:
            out.append(f'<p class="v-warn">No verdict: {esc(run["undecided"])}.</p>')
        out.append('<div class="scroll">' + table(FAULT_HEADERS, run["rows"], classes=[
            ["", "", "bad", "wrap", ""]] * len(run["rows"])) + "</div>")
    out.append("</section>")
    return "\n".join(out)


def faults_markdown(pairs_df: pd.DataFrame | None, kit: MarkdownKit) -> list[str]:
    """The "Faults" section: links of a pairs run that could not be measured ([] when none failed)."""
    runs = fault_runs(pairs_df)
    if not runs:
        return []
    md, md_table = kit.md, kit.table
    out = ["## Faults", "", FAULTS_NOTE, ""]
    for run in runs:
        if len(runs) > 1:
            out += [f"### Run {md(run['run'])}", ""]
        out += [f"**{md(run['summary'])}**", ""]
        if run["culprits"]:
            out += [md_table(CULPRIT_HEADERS, run["culprits"]), ""]
        if run["undecided"]:
            out += [f"No verdict: {md(run['undecided'])}.", ""]
        out += [md_table(FAULT_HEADERS, run["rows"]), ""]
    return out


def pairs_html(pairs_df: pd.DataFrame | None, kit: HtmlKit) -> str:
    """The "Links between hosts" section ("" without pairs rows)."""
    from commbench.analysis.pairs import faultstext

    if pairs_df is None:
        return ""
    lines, _ = faultstext.report(pairs_df)
    return "\n".join(['<section id="pairs"><h2>Links between hosts</h2>',
                      kit.figure(pairsplot.build_figure(pairs_df), "heat map of bandwidth between hosts", PAIRS_NOTE),
                      f"<pre>{kit.esc(chr(10).join(lines))}</pre>", "</section>"])


def _code_block(lines: list[str]) -> list[str]:
    """Lines from a file shown verbatim: no backtick can close the fence."""
    return ["```", *(terminal(line, LINE_LIMIT).replace("`", "'") for line in lines), "```"]


def pairs_markdown(pairs_df: pd.DataFrame | None, figure_name: str | None) -> list[str]:
    """The "Links between hosts" section ([] without pairs rows); figure_name: the heat map's file."""
    from commbench.analysis.pairs import faultstext

    if pairs_df is None:
        return []
    lines, _ = faultstext.report(pairs_df)
    out = ["## Links between hosts", "", PAIRS_NOTE, ""]
    if figure_name:
        out += [f"![bandwidth between hosts]({quote(figure_name)})", ""]
    return out + [*_code_block(lines), ""]


def _time_refused(metric: str) -> str | None:
    return "the pairs heat map shows bandwidth: use --metric busbw (or algbw, the same for pairs)" \
        if metric == "time" else None


def _metrics(q: Any, m: Any) -> None:
    from commbench.analysis.pairs import pairsmetrics  # linkrank and linkfaults: only when exporting

    pairsmetrics.pairs_metrics(q, m)


FAULTS_SECTION = Section("faults", "Faults", "", lambda inp, kit: faults_html(inp.claimed("pairs"), kit),
                         lambda inp, kit: faults_markdown(inp.claimed("pairs"), kit))
PAIRS_SECTION = Section(
    "pairs", "Links between hosts", "", lambda inp, kit: pairs_html(inp.claimed("pairs"), kit),
    lambda inp, kit: pairs_markdown(inp.claimed("pairs"), inp.figures.get("pairs")), claims=pairsplot.pairs_rows,
    figure=SectionFigure("-pairs", lambda rows, metric, rate, label: pairsplot.build_figure(rows),
                         refuse=_time_refused), metrics=lambda q, m: _metrics(q, m))
