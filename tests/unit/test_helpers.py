"""tests/helpers.py holds for every tier: LAUNCHER_VARS is defined there alone and removes every
variable core/launch.py reads, so a test that starts its own ranks never inherits a launcher's."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import LAUNCHER_VARS, clean_env

ROOT = Path(__file__).resolve().parents[2]


def test_launcher_vars_is_defined_once():
    defined = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("*.py"))
               if re.search(r"^\s*LAUNCHER_VARS\s*=", p.read_text(), re.M)]
    assert defined == ["tests/helpers.py"]


def test_every_variable_the_launch_code_reads_is_a_launcher_variable():
    source = (ROOT / "commbench" / "core" / "launch.py").read_text()
    names = set(re.findall(r"[\"']([A-Z][A-Z0-9]*_[A-Z0-9_]*|RANK)[\"']", source))
    assert {"RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"} <= names
    assert sorted(n for n in names if not LAUNCHER_VARS.match(n + ("X" if n.endswith("_") else ""))) == []


def test_clean_env_drops_them_and_puts_what_is_asked_on_top(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    env = clean_env({"MASTER_PORT": "29500"}, COMMBENCH_LAB_PREFIX="cx")
    assert "RANK" not in env and "SLURM_JOB_ID" not in env and "NCCL_SOCKET_IFNAME" not in env
    assert env["NCCL_DEBUG"] == "INFO" and env["MASTER_PORT"] == "29500" and env["COMMBENCH_LAB_PREFIX"] == "cx"
