"""A pairs run's gauges in `commbench export` (docs/METRICS.md): the latest pairs run's verdict per
host and rail, each host's best link and its ratio to the median host's, each link's busbw (up to
MAX_LINK_SERIES links), and the links that could not be measured. The verdicts are linkrank's,
railrank's and linkfaults' own; nothing is judged twice here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.analysis.pairs import linkfaults, linkrank, railrank
from commbench.analysis.points.pointtable import quote
from commbench.analysis.points.section import MAX_SERIES

if TYPE_CHECKING:
    from commbench.analysis.points.pointtable import Query
    from commbench.analysis.points.section import Gauges

# pairs links written one series each up to the most a family holds (4096: 64 hosts), over every rail;
# above, hosts only (a part of the links would read as the whole), the links counted as dropped
MAX_LINK_SERIES = MAX_SERIES
LINKS = "pairs_link_busbw_bytes_per_second"
PAIRS_VERDICTS = {"ok": 0, "slow": 1, "failed": 2}  # a pairs host: linkrank's slow, linkfaults' failed host


def pairs_metrics(q: Query, m: Gauges) -> None:
    """The latest pairs run: each host's verdict and best link, the links, the failed links."""
    has = q.source.columns
    if not {"workload", "src_host", "dst_host"} <= set(has):
        return
    last = q.run("SELECT CAST(run_id AS VARCHAR) AS run_id FROM rows WHERE workload = 'pairs' "
                 "ORDER BY started_at DESC, gi LIMIT 1").column("run_id").to_pylist()
    if not last:
        return
    drop = [c for c in ("samples_us", "rank_time_us", "rank_skew_us", "env", "net", "plan") if c in has]
    run = q.run(f"SELECT * EXCLUDE (gi, v, failed_row, excluded{''.join(', ' + quote(c) for c in drop)}) "
                "FROM rows WHERE workload = 'pairs' AND CAST(run_id AS VARCHAR) = ? ORDER BY gi",
                last).to_pandas()
    rows = linkrank.pairs_rows(run)
    if rows is None:
        return
    verdicts = {name: "ok" for name in linkrank.endpoint_names(rows).values()}
    rails = railrank.by_rail(rows, last[0]) if railrank.has_rails(rows) else None
    by_rail = rails if rails else {"": next(iter(linkrank.links_by_run(rows).values()), [])}
    cells: dict[tuple[str, str], str] = {}
    n_links = sum(len(links) for links in by_rail.values())
    for rail, links in by_rail.items():
        if links:
            _ranked(m, rail, linkrank.rank_links(links), cells, n_links <= MAX_LINK_SERIES)
    if n_links > MAX_LINK_SERIES:
        m.dropped(LINKS, n_links)
    found = linkfaults.faults(rows)
    for c in found.named:
        if c.kind == "host":
            cells[(c.name, c.rail or "")] = "failed"
    for (host, rail) in sorted({(h, r) for h in verdicts for r in by_rail} | set(cells)):
        m.set("pairs_host_verdict", "The latest pairs run's verdict per host and rail: 0 ok, 1 slow "
              "(linkrank: its best link below the threshold), 2 failed (linkfaults: every link failed).",
              {"host": host, "rail": rail}, PAIRS_VERDICTS[cells.get((host, rail), "ok")])
    for rail in sorted(by_rail):
        failed = sum(1 for f in found.failed if not f["confirm"] and (f.get("rail") or "") == rail)
        m.set("pairs_failed_links", "Links of the latest pairs run that could not be measured (main rounds).",
              {"rail": rail}, failed)


def _ranked(m: Gauges, rail: str, r: linkrank.Ranking, cells: dict, with_links: bool) -> None:
    for e in r.endpoints:
        best = [b for b in (e.send_best, e.recv_best) if b is not None]
        ratios = [x for x in (e.send_ratio, e.recv_ratio) if x is not None]
        if best:
            m.set("pairs_host_best_link_bytes_per_second", "A host's best link in its slower direction "
                  "(what the host itself can do; linkrank), latest pairs run.",
                  {"host": e.name, "rail": rail}, min(best) * 1e9)
        if ratios:
            m.set("pairs_host_best_link_ratio", "A host's best link over the median host's best link "
                  "(below the threshold: slow), latest pairs run.", {"host": e.name, "rail": rail}, min(ratios))
        if e.slow:
            cells[(e.name, rail)] = "slow"
    if with_links:
        for ln in r.links:
            m.set(LINKS, "Median bandwidth of a link in the latest pairs run.",
                  {"src_host": ln.src, "dst_host": ln.dst, "rail": rail}, ln.gbps * 1e9)
