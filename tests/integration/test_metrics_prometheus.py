"""`commbench export` read by a real Prometheus (the Debian package) on 127.0.0.1: it scrapes the
textfile export serves (as node_exporter's textfile collector would) and a real Pushgateway that
`export --push` pushed to; PromQL names the planted slow host, and the series count stays the same
across 10 exports of a growing set of nightly runs. Everything started here is stopped here."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from unit.synthetic import make_rows, write
from unit.test_fault_views import link_rows

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="no prometheus binary (apt-get install prometheus prometheus-pushgateway)"),
]

RATES = {"n1": 0.12, "n2": 0.12, "n3": 0.03, "n4": 0.12}  # host 3 slowed to a quarter
SCRAPE = "200ms"
LAST_RUN = 'commbench_last_run_timestamp_seconds{job="textfile"}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nightly(folder: Path, i: int) -> None:
    """Night i: a sweep and a pairs run with host n3 slow, each with its own run id and start."""
    at = {"started_at": dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=i)}
    sweep = make_rows(run_id=f"20250101-000000-s{i:05d}", repetitions=1, speed_gbps=400.0 - i)
    pairs = link_rows(rate=RATES, run_id=f"20250101-000000-p{i:05d}")
    write(folder / f"sweep{i}.parquet", [{**r, **at} for r in sweep])
    write(folder / f"pairs{i}.parquet", [{**r, **at} for r in pairs])


class TextfileServer:
    """What node_exporter's textfile collector does for one file: serve it on /metrics as it now is."""

    def __init__(self, path: Path):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server API
                body = path.read_bytes() if path.exists() else b""
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def start(argv: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(what, timeout: float = 15.0, procs=(), logs=()):
    """what() until it returns something true; a started daemon that died fails the test with its log."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for p, log in zip(procs, logs):
            if p.poll() is not None:
                pytest.fail(f"{p.args[0]} exited {p.returncode}: {log.read_text()[-2000:]}")
        try:
            got = what()
            if got:
                return got
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s; logs: " + " | ".join(log.read_text()[-1000:] for log in logs))


def test_prometheus_scrapes_the_export_and_names_the_slow_host(tmp_path, cli):
    results, textdir = tmp_path / "results", tmp_path / "textfile"
    results.mkdir()
    textdir.mkdir()
    prom_file = textdir / "commbench.prom"
    served = TextfileServer(prom_file)
    gateway_port, prom_port = free_port(), free_port()
    procs, logs = [], [tmp_path / "pushgateway.log", tmp_path / "prometheus.log"]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global: {{scrape_interval: {SCRAPE}, evaluation_interval: 1s}}\n"
        "scrape_configs:\n"
        f"  - job_name: textfile\n    static_configs: [{{targets: ['127.0.0.1:{served.port}']}}]\n"
        f"  - job_name: pushgateway\n    honor_labels: true\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{gateway_port}']}}]\n")
    try:
        if shutil.which("prometheus-pushgateway"):
            procs.append(start(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{gateway_port}"], logs[0]))
        procs.append(start(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                            f"--web.listen-address=127.0.0.1:{prom_port}"], logs[1]))
        alive = [logs[0]] * (len(procs) == 2) + [logs[1]]
        counts = []
        for i in range(10):
            nightly(results, i)
            r = cli("export", str(results), "--openmetrics", str(prom_file))
            assert r.returncode == 0, r.stderr
            newest = (dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=i)).timestamp()
            # this export scraped: the newest run's time is what Prometheus holds now
            wait_for(lambda t=newest: [s for s in query(prom_port, LAST_RUN) if float(s["value"][1]) == t],
                     procs=procs, logs=alive)
            [count] = query(prom_port, 'count({__name__=~"commbench_.*", job="textfile"})')
            counts.append(int(count["value"][1]))
        assert len(set(counts)) == 1 and counts[0] > 40, counts

        slow = query(prom_port, 'commbench_pairs_host_verdict{job="textfile"} == 1')
        assert [s["metric"]["host"] for s in slow] == ["n3"]
        [lowest] = query(prom_port, 'bottomk(1, min by (host) '
                                    '(commbench_pairs_host_best_link_bytes_per_second{job="textfile"}))')
        assert lowest["metric"]["host"] == "n3"

        if len(procs) == 2:  # the same through a Pushgateway
            r = cli("export", str(results), "--push", f"http://127.0.0.1:{gateway_port}", "--job", "nightly")
            assert r.returncode == 0, r.stderr
            pushed = wait_for(lambda: query(prom_port, 'commbench_pairs_host_verdict{job="nightly"} == 1'),
                              procs=procs, logs=alive)
            assert [s["metric"]["host"] for s in pushed] == ["n3"]
    finally:
        for p in procs:
            stop(p)
        served.close()
