"""Results as Prometheus metrics (`commbench export`, `sweep --metrics`; docs/METRICS.md): the runs'
times and facts and each series' latest busbw per collective and size bucket here, then each
section's own gauges (analysis/catalog/sections.py: the latest pairs run's host verdicts and links,
the replayed steps, the wire trouble counters of each workload's latest run).

Labels stay bounded: no run id, no time, no free text; a series is named by what it measures
(collective, size bucket, host, rail, counter), so ten runs of one shape make the same series, each
holding the latest value. A hostile file cannot poison the text: every label value is made one
printable line (`_label`) and a family holds at most MAX_SERIES series, the rest counted in
commbench_series_dropped and said once (docs/METRICS.md). The text is prometheus_client's (the
text format node_exporter's textfile collector reads), written atomically through core/outputs.py
or pushed to a Pushgateway (analysis/export/pushgateway.py).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from commbench.analysis.catalog import sections
from commbench.analysis.export.pushgateway import push_registry
from commbench.analysis.points.pointtable import Query, Source, frame_source, open_source
from commbench.analysis.points.section import MAX_SERIES
from commbench.core import workloadspec
from commbench.core.errors import BadInput
from commbench.core.safetext import printable
from commbench.core.units import format_size

PREFIX = "commbench"
BUSBW_WORKLOADS = workloadspec.names(drawn_as=workloadspec.CURVE)  # one collective at one size: a busbw gauge
VERDICTS = {"PASS": 0, "WARN": 1, "FAIL": 2}  # check's per-host verdict as a gauge value
LABEL_LIMIT = 128  # characters of a label value
DROPPED = "series_dropped"  # the family counting, per family, the series an export left out


class Metrics:
    """The gauges of one export, registered on a registry of their own (never the global one); at
    most MAX_SERIES series a family, the series left out counted per family (commbench_series_dropped)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._gauges: dict[str, Gauge] = {}
        self._series: dict[str, set[tuple[str, ...]]] = {}
        self._dropped: dict[str, int] = {}

    def set(self, name: str, help_text: str, labels: Mapping[str, Any], value: float) -> None:
        gauge = self._gauges.get(name)
        if gauge is None:
            gauge = Gauge(f"{PREFIX}_{name}", help_text, list(labels), registry=self.registry)
            self._gauges[name] = gauge
            self._series[name] = set()
        values = {k: _label(v) for k, v in labels.items()}
        key = tuple(values.values())
        seen = self._series[name]
        if key not in seen:
            if len(seen) >= MAX_SERIES:
                self.dropped(name, 1)
                return
            seen.add(key)
        gauge.labels(**values).set(_value(value))

    def dropped(self, name: str, count: int) -> None:
        """`count` series of family `name` not written (over MAX_SERIES, or left out by a section)."""
        if count > 0:
            self._dropped[name] = self._dropped.get(name, 0) + count

    def warnings(self) -> list[str]:
        """One line per family that lost series, for the command to say once."""
        return [f"metrics: {n:,} series of {PREFIX}_{name} not written (a family holds at most {MAX_SERIES:,}; "
                f"counted in {PREFIX}_{DROPPED}): export fewer hosts, traces or runs at once"
                for name, n in sorted(self._dropped.items())]

    def text(self) -> bytes:
        return generate_latest(self.ready())

    def names(self) -> list[str]:
        self.ready()
        return sorted(f"{PREFIX}_{n}" for n in self._gauges)

    def ready(self) -> CollectorRegistry:
        """The registry to write or push, the dropped series counted in it (commbench_series_dropped)."""
        if not self._dropped:
            return self.registry
        gauge = self._gauges.get(DROPPED)
        if gauge is None:
            gauge = Gauge(f"{PREFIX}_{DROPPED}", "Series of a metric family this export left out (over the "
                          "most a family holds).", ["family"], registry=self.registry)
            self._gauges[DROPPED] = gauge
        for name, n in self._dropped.items():
            gauge.labels(family=f"{PREFIX}_{name}").set(n)
        return self.registry


def _label(value: Any) -> str:
    """A label value: '' for a missing one; one line (whitespace runs, line breaks among them, as
    one space) of at most LABEL_LIMIT characters, every other character that is not printable
    (control, bidi, format: core/safetext.py `printable`) as '?'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return printable(" ".join(str(value).split())[:LABEL_LIMIT])


def _value(value: Any) -> float:
    """A gauge's value as a float; one past a float's range (a huge integer sum) reads +-inf, never raises."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


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
    for section in sections.SECTIONS:  # the pairs run's hosts and links, the replayed steps, the wire
        if section.metrics is not None:
            section.metrics(q, m)
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


def _runs(q: Query, m: Metrics) -> None:
    """Per workload: its latest run's start and facts (labels that change only with the software)."""
    facts = ("backend", "world_size", "nnodes", "commbench_version", "nccl_version")
    exprs = ", ".join(f"{q.text_column(f)} AS {f}" for f in facts)
    got = q.run(f"SELECT {q.workload_sql()} AS workload, epoch(started_at) AS t, {exprs} FROM rows "
                f"QUALIFY row_number() OVER (PARTITION BY {q.workload_sql()} ORDER BY started_at DESC, gi) = 1 "
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
    wl = q.workload_sql()
    kept = " OR ".join(f"{wl} = '{w}'" for w in BUSBW_WORKLOADS)
    placement = ("CASE WHEN CAST(in_place AS BOOLEAN) THEN 'in_place' ELSE 'out_of_place' END"
                 if "in_place" in has else "''")
    dtype, ranks, rail, setting = (q.text_column(c, "''") for c in ("dtype", "world_size", "iface", "settings"))
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


# --------------------------------------------------------------------------- out


def write_textfile(m: Metrics, path: str | os.PathLike, command: str = "export", flag: str = "--openmetrics",
                   inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """The text, atomically (a temporary beside it, then renamed over the last export: the textfile
    collector never reads half a file)."""
    from commbench.core.outputs import write_file

    return write_file(path, m.text(), command, flag, inputs=inputs, force=True)


def push(m: Metrics, url: str, job: str = "commbench", timeout: float | None = None) -> None:
    """PUT the metrics to a Pushgateway as job `job` (analysis/export/pushgateway.py: the URL's
    credentials as basic auth, the whole push within `timeout` s, PUSH_TIMEOUT_S by default, each
    failure one line)."""
    push_registry(m.ready(), url, job, timeout)


def write_metrics(rows_or_paths: Any, path: str | os.PathLike, check: Mapping[str, str] | None = None,
                  command: str = "sweep", flag: str = "--metrics",
                  warn: Callable[[str], None] = lambda line: print(f"commbench: warning: {line}", file=sys.stderr,
                                                                   flush=True)) -> Path:
    """The textfile of `rows_or_paths` (files or folders, a frame, or a run's rows) written to
    `path`, for a command that writes metrics as it finishes (sweep --metrics, check --metrics);
    `check` adds check's verdicts (host -> PASS/WARN/FAIL). With no rows, only the verdicts. A
    family that lost series is said once through `warn`."""
    if rows_or_paths is None or (isinstance(rows_or_paths, (list, tuple)) and not rows_or_paths):
        m = Metrics()
        check_gauges(m, check or {})
    else:
        m = collect(rows_or_paths, check)
    written = write_textfile(m, path, command, flag)
    for line in m.warnings():
        warn(line)
    return written
