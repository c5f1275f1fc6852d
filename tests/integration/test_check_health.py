"""`commbench check --mode healthcheck` with its real doctor (a `commbench doctor --json` subprocess):
the verdict written as a metric. (The profile, the verdicts and the refusals are in
tests/unit/test_check.py.)"""

from __future__ import annotations


def test_healthcheck_writes_its_verdict_as_a_metric(cli, tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    res = cli("check", "--mode", "healthcheck", "--out", str(tmp_path), "--metrics", str(tmp_path / "m.prom"))
    assert res.returncode in (0, 1) and res.stdout.startswith("commbench healthcheck: "), res.stdout + res.stderr
    verdict = res.stdout.split()[2]
    value = {"PASS": "0.0", "WARN": "1.0", "FAIL": "2.0"}[verdict]
    assert f'commbench_check_host_verdict{{host="{res.stdout.split()[3].rstrip(":")}"}} {value}' in \
        (tmp_path / "m.prom").read_text()
