"""Results as Prometheus metrics (`commbench export`, `sweep --metrics`; docs/METRICS.md): each
series' latest busbw per collective and size bucket, the latest pairs run's host verdicts and links,
the wire trouble counters of each workload's latest run, and the runs' times and facts.

Labels stay bounded: no run id, no time, no free text; a series is named by what it measures
(collective, size bucket, host, rail, counter), so ten runs of one shape make the same series, each
holding the latest value. The text is prometheus_client's (the text format node_exporter's
textfile collector reads), written atomically through core/outputs.py or pushed to a Pushgateway.
Pairs verdicts are linkrank's, railrank's and linkfaults' own; nothing is judged twice here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from commbench.core import workloadspec
from commbench.analysis.pairs import linkfaults, linkrank, railrank
from commbench.analysis.points.pointtable import Query, Source, frame_source, open_source, quote
from commbench.analysis.replay import replayrows
from commbench.core import wire
from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.units import format_size

PREFIX = "commbench"
BUSBW_WORKLOADS = workloadspec.names(drawn_as=workloadspec.CURVE)  # one collective at one size: a busbw gauge
MAX_LINK_SERIES = 4096  # pairs links written one series each up to this many (64 hosts); above, hosts only
VERDICTS = {"PASS": 0, "WARN": 1, "FAIL": 2}  # check's per-host verdict as a gauge value
PAIRS_VERDICTS = {"ok": 0, "slow": 1, "failed": 2}  # a pairs host: linkrank's slow, linkfaults' failed host
PUSH_TIMEOUT_S = 5.0


class Metrics:
    """The gauges of one export, registered on a registry of their own (never the global one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._gauges: dict[str, Gauge] = {}

    def set(self, name: str, help_text: str, labels: Mapping[str, Any], value: float) -> None:
        gauge = self._gauges.get(name)
        if gauge is None:
            gauge = Gauge(f"{PREFIX}_{name}", help_text, list(labels), registry=self.registry)
            self._gauges[name] = gauge
        gauge.labels(**{k: _label(v) for k, v in labels.items()}).set(value)

    def text(self) -> bytes:
        return generate_latest(self.registry)

    def names(self) -> list[str]:
        return sorted(f"{PREFIX}_{n}" for n in self._gauges)


def _label(value: Any) -> str:
    """A label value: '' for a missing one; never a line break (a label is one line of the text format)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return " ".join(str(value).split())[:128]


def size_bucket(size_bytes: int) -> str:
    """The power-of-two bucket a size falls in, as a label: 16 MiB -> '16MiB', 1000 -> '512B'."""
    low = 1 << (max(1, int(size_bytes)).bit_length() - 1)
    return format_size(low).replace(" ", "")


def source_of(rows_or_paths: pd.DataFrame | Sequence[Mapping] | Iterable[str | os.PathLike]) -> Source:
    """Files or folders, a results frame, or rows as a run holds them (ResultWriter.rows)."""
    if isinstance(rows_or_paths, pd.DataFrame):
        return frame_source(rows_or_paths, "exported", require=())
    items = list(rows_or_paths)
    if items and isinstance(items[0], Mapping):
        return frame_source(pd.DataFrame(items), "exported", require=())
    return open_source(items)


def collect(rows_or_paths: Any, check: Mapping[str, str] | None = None) -> Metrics:
    """Every metric of the results (and, from `check`, host -> PASS/WARN/FAIL, the check verdicts).
    BadInput in one line when the results hold no measured row."""
    source = source_of(rows_or_paths)
    if not source.rows:
        raise BadInput("the results hold no rows: pass the results of a run that measured something")
    q = Query(source, "exported")
    for name in ("run_id", "started_at"):
        if name not in source.columns:
            raise BadInput(f"the results have no column {name}: pass files written by commbench")
    m = Metrics()
    _runs(q, m)
    _busbw(q, m)
    _pairs(q, m)
    _wire(q, m)
    _replay(q, m)
    if check:
        check_gauges(m, check)
    return m


def check_gauges(m: Metrics, verdicts: Mapping[str, str]) -> None:
    """commbench check's verdict per host (PASS 0, WARN 1, FAIL 2): for cli/check.py to add to an
    export, or to write alone (write_metrics with no rows)."""
    for host, verdict in verdicts.items():
        if verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {verdict!r}: one of {', '.join(VERDICTS)}")
        m.set("check_host_verdict", "commbench check's verdict per host: 0 PASS, 1 WARN, 2 FAIL.",
              {"host": host}, VERDICTS[verdict])


def _col(q: Query, name: str, default: str = "NULL") -> str:
    return f"CAST({quote(name)} AS VARCHAR)" if name in q.source.columns else default


def _workload(q: Query) -> str:
    return f"coalesce({_col(q, 'workload')}, 'sweep')"


def _runs(q: Query, m: Metrics) -> None:
    """Per workload: its latest run's start and facts (labels that change only with the software)."""
    facts = ("backend", "world_size", "nnodes", "commbench_version", "nccl_version")
    exprs = ", ".join(f"{_col(q, f)} AS {f}" for f in facts)
    got = q.run(f"SELECT {_workload(q)} AS workload, epoch(started_at) AS t, {exprs} FROM rows "
                f"QUALIFY row_number() OVER (PARTITION BY {_workload(q)} ORDER BY started_at DESC, gi) = 1 "
                "ORDER BY workload").to_pylist()
    for r in got:
        m.set("last_run_timestamp_seconds", "When the latest run of a workload started (Unix time).",
              {"workload": r["workload"]}, float(r["t"]))
        labels = {"workload": r["workload"], "backend": r["backend"], "ranks": r["world_size"],
                  "nodes": r["nnodes"], "commbench_version": r["commbench_version"],
                  "nccl_version": r["nccl_version"]}
        m.set("run_info", "The latest run of a workload: its backend, ranks, nodes and versions (always 1).",
              labels, 1)


def _busbw(q: Query, m: Metrics) -> None:
    """The latest run's median busbw of each series (collective, size bucket, placement, ...)."""
    has = q.source.columns
    if "collective" not in has or "size_bytes" not in has:
        return
    alone = "group_dim IS NULL" if "group_dim" in has else "true"  # a layout run's groups: not yet exported
    wl = _workload(q)
    kept = " OR ".join(f"{wl} = '{w}'" for w in BUSBW_WORKLOADS)
    placement = ("CASE WHEN CAST(in_place AS BOOLEAN) THEN 'in_place' ELSE 'out_of_place' END"
                 if "in_place" in has else "''")
    dtype, ranks, rail, setting = (_col(q, c, "''") for c in ("dtype", "world_size", "iface", "settings"))
    got = q.run(
        f"SELECT {wl} AS workload, CAST(collective AS VARCHAR) AS collective, {dtype} AS dtype, "
        f"{placement} AS placement, {ranks} AS ranks, {rail} AS rail, {setting} AS setting, "
        "CAST(pow(2, floor(log2(TRY_CAST(size_bytes AS BIGINT)))) AS BIGINT) AS bucket, "
        "run_id, max(started_at) AS t, median(v) AS v FROM rows "
        f"WHERE NOT excluded AND ({kept}) AND {alone} AND coalesce(isfinite(v) AND v > 0 AND size_bytes > 0, false) "
        "GROUP BY ALL").to_pandas()
    if got.empty:
        return
    labels = ["workload", "collective", "dtype", "placement", "ranks", "rail", "setting", "bucket"]
    latest = got.fillna({c: "" for c in labels}).sort_values("t", kind="stable").groupby(labels).tail(1)
    for r in latest.sort_values(labels).itertuples(index=False):
        m.set("busbw_bytes_per_second",
              "Median bus bandwidth of the latest run holding the series, per collective and size bucket.",
              {"workload": r.workload, "collective": r.collective, "dtype": r.dtype, "placement": r.placement,
               "size": size_bucket(int(r.bucket)), "ranks": r.ranks, "rail": r.rail, "setting": r.setting},
              float(r.v) * 1e9)


def _pairs(q: Query, m: Metrics) -> None:
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
    for rail, links in by_rail.items():
        if links:
            _ranked(m, rail, linkrank.rank_links(links), cells, len(links) <= MAX_LINK_SERIES)
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


def _ranked(m: Metrics, rail: str, r: linkrank.Ranking, cells: dict, with_links: bool) -> None:
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
            m.set("pairs_link_busbw_bytes_per_second", "Median bandwidth of a link in the latest pairs run.",
                  {"src_host": ln.src, "dst_host": ln.dst, "rail": rail}, ln.gbps * 1e9)


def _replay(q: Query, m: Metrics) -> None:
    """Per replayed trace, its latest run: each step's communication time, replayed and as the job
    recorded it, and each collective's part of the step (analysis/replay/replayrows.py's one aggregation)."""
    rows = replayrows.rows_in(q)
    if rows.empty:
        return
    rows = rows.assign(_trace=rows["trace_file"].fillna("").astype(str))
    for trace, of_trace in rows.groupby("_trace", sort=True):
        latest = of_trace[of_trace["run_id"] == of_trace.sort_values("started_at")["run_id"].iloc[-1]]
        for s in replayrows.steps(latest):
            base = {"trace": trace, "step": "outside" if s.trace_step == replayrows.OUTSIDE else s.trace_step,
                    "setting": s.setting}
            if s.time_us is not None:
                m.set("replay_step_seconds", "A replayed step's communication time (median over repetitions, max "
                      "over ranks), the latest run of the trace.", base, s.time_us / 1e6)
            if s.recorded_us is not None:
                m.set("replay_step_recorded_seconds", "The same step's communication time as the job recorded it.",
                      base, s.recorded_us / 1e6)
            for part in s.parts:
                m.set("replay_collective_seconds", "A collective's time within a replayed step: the sum of its ops' "
                      "medians.", {**base, "collective": part.collective}, part.time_us / 1e6)


def _wire(q: Query, m: Metrics) -> None:
    """Per workload: the trouble counters that moved in its latest run that read counters, summed
    over its points; a counter that moved in an earlier run (of the inputs) and not in it reads 0."""
    has = q.source.columns
    if "wire" not in has:
        return
    flag = "wire_trouble IS NOT NULL" if "wire_trouble" in has else "wire IS NOT NULL"
    trouble = "coalesce(CAST(wire_trouble AS BOOLEAN), false)" if "wire_trouble" in has else "wire IS NOT NULL"
    latest = dict(q.run(f"SELECT {_workload(q)} AS w, arg_max(CAST(run_id AS VARCHAR), started_at) AS r "
                        f"FROM rows WHERE {flag} GROUP BY ALL").to_pandas().itertuples(index=False))
    if not latest:
        return
    sums: dict[tuple[str, str, str, str, str], int] = {}
    sql = (f"SELECT {_workload(q)} AS w, CAST(run_id AS VARCHAR) AS r, wire FROM rows WHERE NOT excluded "
           f"AND {trouble} ORDER BY gi")
    for batch in q.batches(sql):
        for w, r, value in zip(*(batch.column(n).to_pylist() for n in ("w", "r", "wire"))):
            for t in wire.troubles(value):
                key = (w, t.host, t.where, t.counter, t.kind)
                sums[key] = sums.get(key, 0) + (t.delta if latest.get(w) == r else 0)
    for (w, host, where, counter, kind), total in sorted(sums.items()):
        m.set("wire_trouble", "Trouble counters (drops, errors, retransmissions, ...) that moved during the "
              "latest run of a workload, summed over its points.",
              {"workload": w, "host": host, "where": where, "counter": counter, "kind": kind}, total)


# --------------------------------------------------------------------------- out


def write_textfile(m: Metrics, path: str | os.PathLike, command: str = "export", flag: str = "--openmetrics",
                   inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """The text, atomically (a temporary beside it, then renamed over the last export: the textfile
    collector never reads half a file)."""
    from commbench.core.outputs import write_file

    return write_file(path, m.text(), command, flag, inputs=inputs, force=True)


def check_push_url(url: str) -> None:
    """BadInput in one line for a --push value that is not an http(s) address (checked before reading)."""
    from urllib.parse import urlparse

    parsed = urlparse(url if "://" in url else f"http://{url}")
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise BadInput(f"--push {url}: not an http(s) URL: pass the Pushgateway's address, e.g. http://host:9091")


def push(m: Metrics, url: str, job: str = "commbench", timeout: float = PUSH_TIMEOUT_S) -> None:
    """PUT the metrics to a Pushgateway as job `job` (replacing that job's last push). A gateway
    that does not answer, or refuses, is a runtime failure in one line."""
    from urllib.error import HTTPError, URLError

    from prometheus_client import push_to_gateway

    check_push_url(url)
    try:
        push_to_gateway(url, job=job, registry=m.registry, timeout=timeout)
    except HTTPError as exc:
        raise RuntimeFailure(f"the Pushgateway at {url} refused the metrics (HTTP {exc.code} {exc.reason}): "
                             "check the URL and the gateway's log") from None
    except (URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise RuntimeFailure(f"the Pushgateway at {url} did not answer within {timeout:g} s ({reason}): "
                             "check the URL and that the gateway runs") from None


def write_metrics(rows_or_paths: Any, path: str | os.PathLike, check: Mapping[str, str] | None = None,
                  command: str = "sweep", flag: str = "--metrics") -> Path:
    """The textfile of `rows_or_paths` (files or folders, a frame, or a run's rows) written to
    `path`, for a command that writes metrics as it finishes (sweep --metrics, check --metrics);
    `check` adds check's verdicts (host -> PASS/WARN/FAIL). With no rows, only the verdicts."""
    if rows_or_paths is None or (isinstance(rows_or_paths, (list, tuple)) and not rows_or_paths):
        m = Metrics()
        check_gauges(m, check or {})
    else:
        m = collect(rows_or_paths, check)
    return write_textfile(m, path, command, flag)
