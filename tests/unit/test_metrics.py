"""`commbench export` and analysis/export/metrics.py: the exported text parsed back with prometheus_client's
own parser (values, labels, the latest run winning), the series staying the same across 10 runs,
pairs verdicts naming the slowed or dead host, wire trouble counters, check's verdict gauges, the
Grafana dashboard naming only exported metrics, and the bad input of the command."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from commbench.analysis.export import metrics
from commbench.core import wire

from unit.synthetic import make_rows, write
from unit.test_replay_views import FAST, replay_rows
from unit.test_fault_views import host_down, link_rows

ROOT = Path(__file__).resolve().parents[2]
RATES = {"n1": 0.12, "n2": 0.12, "n3": 0.03, "n4": 0.12}  # n3 slowed to a quarter


def samples(text: bytes | str) -> dict[tuple[str, tuple], float]:
    """(metric name, sorted labels) -> value, parsed by prometheus_client's parser."""
    text = text.decode() if isinstance(text, bytes) else text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def of(found: dict, name: str, **labels) -> list[float]:
    return [v for (n, ls), v in found.items() if n == name and all(dict(ls).get(k) == x for k, x in labels.items())]


def night(i: int, speed: float = 400.0, **kw) -> list[dict]:
    rows = make_rows(run_id=f"20250101-00000{i % 10}-n{i:05d}", speed_gbps=speed, repetitions=1, **kw)
    return [{**r, "started_at": dt.datetime(2025, 1, 1 + i, tzinfo=dt.timezone.utc)} for r in rows]


def pairs_night(i: int, rate=None, **kw) -> list[dict]:
    rows = link_rows(rate=rate, run_id=f"20250101-00000{i % 10}-p{i:05d}", **kw)
    return [{**r, "started_at": dt.datetime(2025, 1, 1 + i, tzinfo=dt.timezone.utc)} for r in rows]


def test_busbw_of_the_latest_run_per_series(tmp_path):
    write(tmp_path / "old.parquet", night(1, speed=100.0))
    write(tmp_path / "new.parquet", night(2, speed=400.0))
    found = samples(metrics.collect([tmp_path]).text())
    new = samples(metrics.collect([tmp_path / "new.parquet"]).text())
    big = dict(collective="all_reduce", size="16MiB", placement="in_place", workload="sweep", ranks="16", rail="eth0")
    assert of(found, "commbench_busbw_bytes_per_second", **big) == of(new, "commbench_busbw_bytes_per_second", **big)
    [value] = of(found, "commbench_busbw_bytes_per_second", **big)
    assert 5e10 < value < 8e10  # 400 Gbit/s = 50 GB/s algbw, x1.5 for all_reduce, less the latency
    assert len(of(found, "commbench_busbw_bytes_per_second")) == 2 * 5 * 2  # collectives x sizes x placements
    assert of(found, "commbench_last_run_timestamp_seconds", workload="sweep") == [
        dt.datetime(2025, 1, 3, tzinfo=dt.timezone.utc).timestamp()]
    [info] = [ls for (n, ls), _ in found.items() if n == "commbench_run_info"]
    assert "run_id" not in dict(info) and dict(info)["nccl_version"] == "2.21.5"


def test_sizes_fall_in_power_of_two_buckets():
    assert [metrics.size_bucket(s) for s in (8, 1000, 1024, 3 << 20, 1 << 34)] == ["8B", "512B", "1KiB", "2MiB",
                                                                                  "16GiB"]


def test_ten_runs_make_the_same_series(tmp_path):
    counts = []
    for i in range(10):
        write(tmp_path / f"s{i}.parquet", night(i, speed=400.0 - i))
        write(tmp_path / f"p{i}.parquet", pairs_night(i, rate=RATES))
        if i in (0, 1, 9):  # one run, the first older run, ten runs (each export reads every file so far)
            counts.append(len(samples(metrics.collect([tmp_path]).text())))
    assert len(set(counts)) == 1 and counts[0] > 40


def test_pairs_names_the_slow_host(tmp_path):
    write(tmp_path / "p.parquet", pairs_night(1, rate=RATES))
    found = samples(metrics.collect([tmp_path]).text())
    verdicts = {dict(ls)["host"]: v for (n, ls), v in found.items() if n == "commbench_pairs_host_verdict"}
    assert verdicts == {"n1": 0, "n2": 0, "n3": 1, "n4": 0}
    best = {dict(ls)["host"]: v for (n, ls), v in found.items()
            if n == "commbench_pairs_host_best_link_bytes_per_second"}
    assert min(best, key=best.get) == "n3" and best["n3"] == pytest.approx(0.03e9, rel=0.02)
    assert len(of(found, "commbench_pairs_link_busbw_bytes_per_second")) == 12  # 4 x 3 directed links
    assert of(found, "commbench_pairs_link_busbw_bytes_per_second", src_host="n3", dst_host="n1") == [
        pytest.approx(0.03e9, rel=0.02)]


def test_pairs_names_a_dead_host_failed(tmp_path):
    write(tmp_path / "p.parquet", pairs_night(1, down=host_down("n2")))
    found = samples(metrics.collect([tmp_path]).text())
    verdicts = {dict(ls)["host"]: v for (n, ls), v in found.items() if n == "commbench_pairs_host_verdict"}
    assert verdicts == {"n1": 0, "n2": 2, "n3": 0, "n4": 0}
    assert of(found, "commbench_pairs_failed_links") == [6.0]  # n2 to and from each of 3 peers


def test_only_the_latest_pairs_run_is_judged(tmp_path):
    write(tmp_path / "a.parquet", pairs_night(1, rate=RATES))
    write(tmp_path / "b.parquet", pairs_night(2))
    found = samples(metrics.collect([tmp_path]).text())
    assert set(of(found, "commbench_pairs_host_verdict")) == {0.0}


def trouble_rows(i: int, delta: int | None) -> list[dict]:
    entry = {"ranks": 1, "out_bytes": 1, "in_bytes": 1, "counters": {},
             "trouble": [["eth0", "rx_dropped", delta, "drop"]] if delta else []}
    cols = wire.columns({"node01": entry, "node02": dict(entry, trouble=[])}, 1.0)
    return [{**r, **cols} for r in night(i, sizes=(1 << 20,))]


def test_wire_trouble_of_the_latest_run(tmp_path):
    write(tmp_path / "a.parquet", trouble_rows(1, 7))
    found = samples(metrics.collect([tmp_path]).text())
    # 2 collectives x 2 placements, 7 drops each
    assert of(found, "commbench_wire_trouble", host="node01", counter="rx_dropped", kind="drop") == [28.0]
    write(tmp_path / "b.parquet", trouble_rows(2, None))  # a later clean run: the counter reads 0, still there
    found = samples(metrics.collect([tmp_path]).text())
    assert of(found, "commbench_wire_trouble", host="node01", counter="rx_dropped") == [0.0]


def test_write_metrics_for_check_verdicts(tmp_path):
    rows = night(1)
    path = metrics.write_metrics(rows, tmp_path / "run.prom", check={"n1": "PASS", "n3": "FAIL", "n2": "WARN"})
    found = samples(path.read_text())
    assert {dict(ls)["host"]: v for (n, ls), v in found.items() if n == "commbench_check_host_verdict"} == {
        "n1": 0, "n2": 1, "n3": 2}
    assert of(found, "commbench_busbw_bytes_per_second", size="1MiB", collective="all_gather", placement="in_place")
    alone = samples(metrics.write_metrics(None, tmp_path / "alone.prom", check={"n3": "FAIL"}).read_text())
    assert list(alone.values()) == [2.0]
    write_again = metrics.write_metrics(None, tmp_path / "alone.prom", check={"n3": "PASS"})  # replaced
    assert list(samples(write_again.read_text()).values()) == [0.0]


def test_label_values_stay_one_line(tmp_path):
    rows = [{**r, "iface": "eth0\nevil"} for r in night(1)]
    found = samples(metrics.collect(rows).text())
    assert {dict(ls)["rail"] for (n, ls), _ in found.items() if n == "commbench_busbw_bytes_per_second"} == {
        "eth0 evil"}


def test_export_cli_writes_a_textfile(cli, tmp_path):
    write(tmp_path / "p.parquet", pairs_night(1, rate=RATES))
    out = tmp_path / "tf" / "commbench.prom"
    out.parent.mkdir()
    r = cli("export", str(tmp_path / "p.parquet"), "--openmetrics", str(out))
    assert r.returncode == 0, r.stderr
    assert "written to" in r.stdout
    assert of(samples(out.read_text()), "commbench_pairs_host_verdict", host="n3") == [1.0]
    assert cli("export", str(tmp_path / "p.parquet"), "--openmetrics", str(out)).returncode == 0  # replaced
    assert [p.name for p in out.parent.iterdir()] == ["commbench.prom"]  # no temporary left


@pytest.mark.parametrize("args, words", [
    ((), "one of --openmetrics FILE or --push URL"),
    (("--openmetrics", "X", "--push", "http://127.0.0.1:9"), "one of --openmetrics FILE or --push URL"),
    (("--push", "ftp://example.com"), "not an http(s) URL"),
    (("--push", "http://127.0.0.1:9", "--job", "a/b"), "not a job name"),
])
def test_export_bad_input(cli, tmp_path, args, words):
    write(tmp_path / "a.parquet", night(1))
    args = tuple(str(tmp_path / a) if a == "X" else a for a in args)
    r = cli("export", str(tmp_path / "a.parquet"), *args)
    assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_export_refuses_empty_results_and_an_unwritable_file(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    r = cli("export", str(tmp_path / "empty"), "--openmetrics", str(tmp_path / "m.prom"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    write(tmp_path / "none.parquet", [])
    r = cli("export", str(tmp_path / "none.parquet"), "--openmetrics", str(tmp_path / "m.prom"))
    assert r.returncode == 2 and "hold no rows" in r.stderr
    write(tmp_path / "a.parquet", night(1))
    (tmp_path / "file").write_text("")
    r = cli("export", str(tmp_path / "a.parquet"), "--openmetrics", str(tmp_path / "file" / "m.prom"))
    assert r.returncode == 2 and "is a file, not a folder" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "m.prom").exists()


def test_push_to_a_gateway_that_does_not_answer(cli, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    write(tmp_path / "a.parquet", night(1))
    t0 = time.monotonic()
    r = cli("export", str(tmp_path / "a.parquet"), "--push", f"http://127.0.0.1:{port}")
    assert r.returncode == 3 and time.monotonic() - t0 < 10
    assert "did not answer" in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_dashboard_queries_name_exported_metrics(tmp_path):
    write(tmp_path / "s.parquet", trouble_rows(1, 7))
    write(tmp_path / "p.parquet", pairs_night(2, down=host_down("n2")))
    write(tmp_path / "r.parquet", replay_rows({0: FAST}, spans={0: "0-3"}))
    m = metrics.collect([tmp_path])
    metrics.check_gauges(m, {"n1": "PASS"})
    exported = set(m.names())
    board = json.loads((ROOT / "grafana" / "commbench.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 5
    import re

    for expr in exprs:
        named = set(re.findall(r"\bcommbench_[a-z_]+", expr))
        assert named and named <= exported, (expr, named - exported)
