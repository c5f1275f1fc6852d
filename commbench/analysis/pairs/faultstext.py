"""The fault verdict as a person reads it (analysis/pairs/linkfaults.py judges): each culprit in
one line with its evidence, the failed links, and the `pairs --from` report, which puts it after
linkrank.py's ranking (report).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.analysis.pairs import linkrank, railrank
from commbench.analysis.pairs.linkfaults import Culprit, FaultVerdict, faults, other_end
from commbench.analysis.pairs.linkrank import endpoint_names, pairs_rows
from commbench.core import linkstatus
from commbench.core.linkstatus import UNOBSERVED

if TYPE_CHECKING:
    import pandas as pd


# --------------------------------------------------------------------------- the pairs --from report


def report(df: pd.DataFrame | None, threshold: float = linkrank.DEFAULT_THRESHOLD) -> tuple[list[str], list[str]]:
    """`commbench pairs --from`: (console lines, verdicts) for every pairs run in `df`. Verdicts
    name the slow endpoints and the failed hosts and links (FaultVerdict.named); a run whose
    faults are undecided adds none (its exit code is in faults_by_run)."""
    from commbench.core.errors import BadInput

    rows = pairs_rows(df)
    if rows is None:
        raise BadInput("the results hold no pairs rows: pass a file written by commbench pairs")
    runs = linkrank.links_by_run(rows)
    lines, verdicts = [], []
    for run_id, run in linkrank.by_run(rows):
        run_lines, run_verdicts = _run_report(str(run_id), run, runs.get(str(run_id), []), threshold)
        lines += run_lines
        verdicts += run_verdicts
    return lines, verdicts


def _run_report(run_id: str, run: pd.DataFrame, links: list[linkrank.Link],
                threshold: float) -> tuple[list[str], list[str]]:
    from commbench.core.units import format_size

    names = endpoint_names(run)
    found = faults(run)
    per_host = all(n == h for (h, _), n in names.items())
    n_failed = sum(1 for f in found.failed if not f["confirm"])
    first = run.iloc[0]
    rails = railrank.by_rail(run, run_id) if railrank.has_rails(run) else None
    count = len(links) if rails is None else sum(len(v) for v in rails.values())
    lines = [f"# run {run_id}: {first.get('collective')} of {format_size(int(first.get('size_bytes')))}, "
             f"{len(names)} {'hosts' if per_host else 'endpoints'}, {count} links"
             + (f" on {len(rails)} rails" if rails else "") + (f", {n_failed} failed" if n_failed else "")]
    verdicts = []
    if rails:
        ranked = railrank.rank_rails(rails, threshold)
        lines += railrank.render(ranked)
        slow = railrank.verdict(ranked)
        if slow:
            verdicts.append(f"run {run_id}: {slow}")
    elif links and rails is None:
        ranking = linkrank.rank_links(links, threshold)
        lines += linkrank.render(ranking)
        slow = linkrank.verdict(ranking)
        if slow:
            verdicts.append(f"run {run_id}: {slow}")
    else:
        lines.append("# No link was measured: every transfer of this run failed.")
    if found.failed or found.culprits:
        lines += render_faults(found)
    for c in found.named:
        text = _headline(c, found)
        verdicts.append(f"run {run_id}: {text[0].lower()}{text[1:]}")
    return lines, verdicts


# --------------------------------------------------------------------------- text


_LABEL = {linkstatus.UNREACHABLE: "Unreachable", linkstatus.TIMEOUT: "Hung", linkstatus.ERROR: "Failing",
          linkstatus.NEVER_JOINED: "Never joined"}


def _headline(c: Culprit, v: FaultVerdict) -> str:
    """The culprit in one line: what it is, why, and what the confirmation round said."""
    what = "endpoint" if "/" in c.name else "host"
    conf = {True: "confirmed", False: "recovered when measured again: not named", None: ""}[c.confirmed]
    if c.kind == "host":
        peers: dict[str, set[str]] = {"main": set(), "confirm": set()}
        for f in v.failed:
            if c.name in (f["src"], f["dst"]) and f.get("rail") == c.rail:
                peer = f["dst"] if f["src"] == c.name else f["src"]
                if what == "host" or peer.rsplit("/r", 1)[0] != c.name.rsplit("/r", 1)[0]:
                    peers["confirm" if f["confirm"] else "main"].add(peer)
        label = f"{'Lossy' if c.lossy else _LABEL.get(c.status, 'Failed')} {what}: {c.label}"
        if c.via:
            other = other_end(tuple(c.via.split(" <-> ")), c.name)
            good = ", ".join(sorted(peers["confirm"] - {other}))
            return (f"{label} (its link {c.via} failed; in the confirmation round it failed against {good}, "
                    f"{c.status}, while {other} worked; {conf})")
        if c.confirmed and peers["confirm"]:
            conf += f" against {', '.join(sorted(peers['confirm']))}"
        n = len(peers["main"])
        if c.worked_before:
            return (f"{label} (every link since its first failure failed: {n} of {n}, {c.status}; "
                    f"it worked before{'; ' + conf if conf else ''})")
        return f"{label} (every link failed: {n} of {n}, {c.status}{'; ' + conf if conf else ''})"
    if c.kind == "link":
        return f"Failed link: {c.label} ({c.status}; both {what}s work with others{'; ' + conf if conf else ''})"
    return f"Cannot tell which end: {c.label} ({c.status}; only two {what}s)"


def render_faults(v: FaultVerdict, shown: int = 24) -> list[str]:
    """The fault verdict as console lines: each culprit with its evidence, the reason there is no
    verdict (if any), and the failed links (the first `shown` of them)."""
    lines = []
    for c in v.culprits:
        lines.append(f"# {_headline(c, v)}")
        lines += [f"#   {e}" for e in c.evidence]
    if v.unobserved:
        lines.append(f"# Not observed ({v.unobserved} link(s), status {UNOBSERVED}): rank 0 was cut off from both "
                     "ends, so their outcome never reached it (not failed, not measured here)")
    if v.undecided:
        lines.append(f"# No verdict{' on the other failed links' if v.named else ''}: {v.undecided}.")
    if v.failed:
        lines.append(f"# Failed links ({len(v.failed)}):")
        for f in v.failed[:shown]:
            link = f"{f['src']} {'<->' if f.get('bidir') else '->'} {f['dst']}" + (
                f" ({f['rail']})" if f.get("rail") else "")
            lines.append(f"#   {link:<40} {f['status']:<11}{' (confirmation)' if f['confirm'] else ''}"
                         f"{'  ' + f['error'] if f['error'] else ''}")
        if len(v.failed) > shown:
            lines.append(f"#   ... and {len(v.failed) - shown} more (the status and error columns hold them all)")
    return lines
