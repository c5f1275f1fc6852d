"""`sweep --metrics FILE`: rank 0 writes the run's Prometheus metrics when the run finishes (real gloo
ranks), and a FILE that cannot be written is refused before anything runs."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import cb

pytestmark = pytest.mark.integration


def test_sweep_writes_its_metrics_when_it_finishes(tmp_path):
    prom = tmp_path / "textfile" / "commbench.prom"
    r = cb("sweep", "--collective", "allreduce", "-b", "1K", "-e", "4K", "--time-budget", "0.02", "--precision", "0",
           "--out", str(tmp_path / "results"), "--metrics", str(prom), check=True)
    assert f"# Metrics: {prom}" in r.stdout
    busbw = [s for f in text_string_to_metric_families(prom.read_text()) for s in f.samples
             if s.name == "commbench_busbw_bytes_per_second"]
    assert sorted(s.labels["size"] for s in busbw) == ["1KiB", "2KiB", "4KiB"]
    assert {(s.labels["collective"], s.labels["ranks"], s.labels["workload"]) for s in busbw} == {
        ("all_reduce", "2", "sweep")}
    assert all(s.value > 0 for s in busbw)


def test_sweep_refuses_a_metrics_file_it_cannot_write_before_running(tmp_path):
    (tmp_path / "plain").write_text("")
    r = cb("sweep", "--collective", "allreduce", "--out", str(tmp_path / "results"),
           "--metrics", str(tmp_path / "plain" / "m.prom"))
    assert r.returncode == 2 and "is a file, not a folder: pass another --metrics" in r.stderr
    assert r.stderr.count("\n") == 1 and not (tmp_path / "results").exists()
