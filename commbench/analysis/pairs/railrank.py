"""Which rail of which host is slow? The analysis behind `commbench pairs --per-rail`.

Input: pairs rows that carry a `rail` (one measurement per link and rail). Each rail is ranked on
its own with linkrank's rule (a host's best link on that rail against the median host's best on
the same rail), so a (host, rail) is compared only with the same rail on the other hosts: a slow
eth1 on one host leaves its eth0 and every other host's eth1 unsuspected, and a rail that is
slower everywhere (a slower fabric) names nobody. The verdict names each slow (host, rail) with
its best link and the same rail's reference: "host n3 rail eth1: 0.0240 GB/s, the same rail
elsewhere 0.1190 GB/s".
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.analysis.pairs import linkrank

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class SlowRail:
    """An endpoint whose links on one rail are slow next to the same rail on the other hosts."""

    name: str  # the endpoint: a host, or host/rRANK
    host: str
    rail: str
    gbps: float  # its best link on the rail, in the slow direction(s)
    reference: float  # the median endpoint's best on the same rail
    ratio: float
    per_host: bool = True

    def text(self) -> str:
        what = f"host {self.name}" if self.per_host else f"endpoint {self.name} (host {self.host})"
        return (f"{what} rail {self.rail}: {self.gbps:.4f} GB/s, the same rail elsewhere {self.reference:.4f} "
                f"GB/s ({self.ratio:.0%})")


@dataclass
class RailRanking:
    rails: dict[str, linkrank.Ranking]  # rail -> that rail's ranking, in measurement order
    slow: list[SlowRail]
    threshold: float


def has_rails(rows: pd.DataFrame | None) -> bool:
    """Whether pairs rows carry rails (pairs --per-rail)."""
    return rows is not None and "rail" in rows.columns and bool(rows["rail"].notna().any())


def rank_rails(by_rail: dict[str, list[linkrank.Link]], threshold: float = linkrank.DEFAULT_THRESHOLD) -> RailRanking:
    """Each rail's links ranked on their own; the (endpoint, rail)s singled out on their rail."""
    if not by_rail:
        raise ValueError("no rail has a measured link")
    rankings = {rail: linkrank.rank_links(links, threshold) for rail, links in by_rail.items()}
    slow = [s for rail, r in rankings.items() for s in _slow_on(rail, r)]
    return RailRanking(rankings, slow, threshold)


def _slow_on(rail: str, r: linkrank.Ranking) -> list[SlowRail]:
    out = []
    for e in r.singled_out:
        # the slow direction's best link; both slow (or bidir): the better of the two, what the host can do
        sides = [(b, ref) for b, ref, slow in ((e.send_best, r.send_reference, e.slow_send),
                                               (e.recv_best, r.recv_reference, e.slow_recv))
                 if slow and b is not None and ref]
        gbps, reference = max(sides)
        out.append(SlowRail(e.name, e.host, rail, gbps, reference, gbps / reference, r.per_host))
    return out


def by_rail(df: pd.DataFrame, run_id: str) -> dict[str, list[linkrank.Link]]:
    """One run's measured links per rail (linkrank.links_by_run's "RUN rail R" keys), rail order kept."""
    rows = linkrank.pairs_rows(df)
    if rows is None:
        return {}
    run = rows[rows["run_id"].astype(str) == str(run_id)]
    every = linkrank.links_by_run(run)
    rails = [r for r in dict.fromkeys(linkrank.column(run, "rail")) if r is not None]
    return {rail: every[linkrank.run_key(run_id, rail)] for rail in rails if linkrank.run_key(run_id, rail) in every}


# --------------------------------------------------------------------------- text


def render(rr: RailRanking) -> list[str]:
    """Per rail: its slowest links and the hosts in them; then the rails side by side and the
    verdict: the slow (host, rail)s, or that no rail of any host stands out."""
    lines = []
    for rail, r in rr.rails.items():
        lines.append(f"# Rail {rail}: {len(r.links)} links, the median link {r.median_gbps:.4f} GB/s"
                     f"{' per direction' if r.bidir else ''}")
        lines += linkrank.render_links(r)
    medians = ", ".join(f"{rail} {_ref(r):.4f}" for rail, r in rr.rails.items())
    lines.append(f"# Rails side by side (the median host's best link, GB/s): {medians}")
    for s in rr.slow:
        others = [rail for rail in rr.rails if rail != s.rail and not any(
            o.name == s.name and o.rail == rail for o in rr.slow)]
        tail = f"; its other rails ({', '.join(others)}) are normal" if others else ""
        lines.append(f"# Slow rail: {s.text()}{tail}")
    if not rr.slow:
        notes = {r.note for r in rr.rails.values() if r.note}
        if notes:
            lines.append(f"# No rail singled out: {notes.pop()}.")
        else:
            lines.append(f"# No rail of any host stands out: on every rail each host's best link is at least "
                         f"{rr.threshold:.0%} of the same rail's median host's best link.")
    spread = _rail_spread(rr)
    if spread:
        lines.append(spread)
    return lines


def _rail_spread(rr: RailRanking) -> str | None:
    """A rail slower on every host is a slower fabric, not a host's fault: said, never blamed."""
    medians = {rail: _ref(r) for rail, r in rr.rails.items()}
    if len(medians) < 2:
        return None
    middle = statistics.median(medians.values())
    low = [rail for rail, m in medians.items() if middle > 0 and m < rr.threshold * middle]
    if not low:
        return None
    return (f"# Note: rail{'s' if len(low) > 1 else ''} {', '.join(low)} {'are' if len(low) > 1 else 'is'} "
            f"slower on every host (median below {rr.threshold:.0%} of the rails' median): a slower fabric, "
            "not one host's rail")


def _ref(r: linkrank.Ranking) -> float:
    """A rail's own level: the median endpoint's best link (one slow host does not move it)."""
    refs = [v for v in (r.send_reference, r.recv_reference) if v is not None]
    return statistics.median(refs) if refs else r.median_gbps


def verdict(rr: RailRanking) -> str | None:
    """One line naming the slow (host, rail)s, or None."""
    if not rr.slow:
        return None
    return (f"slow rail{'s' if len(rr.slow) > 1 else ''}: " + "; ".join(s.text() for s in rr.slow)
            + f" (best link on the rail below {rr.threshold:.0%} of the same rail's median host's best link)")
