"""The analysis side never loads torch: `compare`, `gate`, `plot`, `report` and `nccl-tests import`
run on a laptop without a GPU stack and start in a fraction of torch's import time. Checked in a
fresh interpreter, since this test process has torch loaded already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unit import synthetic  # tests/ is on sys.path (tests/conftest.py)

pytestmark = pytest.mark.integration  # a fresh interpreter runs the CLI (README, Development: the tiers)

ROOT = Path(__file__).resolve().parents[2]
NCCL_LOG = ROOT / "tests" / "data" / "nccl-tests"

SCRIPT = r"""
import importlib, json, pkgutil, sys
import commbench.analysis
for info in pkgutil.walk_packages(commbench.analysis.__path__, "commbench.analysis."):
    importlib.import_module(info.name)
import commbench.core
for info in pkgutil.walk_packages(commbench.core.__path__, "commbench.core."):
    importlib.import_module(info.name)
after_imports = sorted(m for m in ("torch", "deepspeed") if m in sys.modules)
from commbench.cli.app import main
codes = []
for argv in json.loads(sys.argv[1]):
    try:
        main(argv)
    except SystemExit as exc:
        codes.append(exc.code)
print(json.dumps({"after_imports": after_imports, "codes": codes,
                  "loaded": sorted(m for m in ("torch", "deepspeed") if m in sys.modules)}))
"""


def _run(argvs: list[list[str]], cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(argvs)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_analysis_commands_leave_torch_unloaded(tmp_path):
    before = synthetic.write(tmp_path / "before.parquet", synthetic.make_rows(label="before"))
    after = synthetic.write(tmp_path / "after.parquet", synthetic.make_rows(label="after", seed=3))
    logs = sorted(p for p in NCCL_LOG.rglob("*.txt"))[:1]
    if not logs:
        pytest.skip("no recorded nccl-tests log in tests/data/nccl-tests")
    out = _run([["compare", str(before), str(after)],
                ["plot", str(before), "--out", str(tmp_path / "curves.png")],
                ["report", str(before), "--baseline", str(after), "--out", str(tmp_path / "report.html")],
                ["gate", str(after), "--suggest", "--allow-wide", "--out", str(tmp_path / "bands.yaml")],
                ["nccl-tests", "import", str(logs[0]), "--out", str(tmp_path / "imported.parquet")]], tmp_path)
    assert out["after_imports"] == []
    assert out["codes"][0] in (0, 1, 3)  # a verdict, whatever it is
    assert out["codes"][1:] == [0, 0, 0, 0]
    assert out["loaded"] == []
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert (tmp_path / "imported.parquet").stat().st_size > 0


def test_measuring_commands_refuse_bad_flags_before_loading_torch(tmp_path):
    """A typo costs a fraction of a second, not torch's import: zero and tune check their flags
    with the torch-free schedule arithmetic (workloads/zeroschedule.py) before any workload loads."""
    ds = str(ROOT / "tests" / "data" / "ds_config" / "zero2_bucket5e8_fp16.json")
    out = _run([["zero", "--model", "gpt9"],
                ["zero", "--grad-accum", "0"],
                ["zero", "--scale", "2"],
                ["tune", "--ds-config", ds, "--model", "7x"],
                ["tune", "--ds-config", ds, "--grad-accum", "0"],
                ["sweep", "--collective", "nope"],
                ["buckets", "--op", "all_gather"]], tmp_path)
    assert out["codes"] == [2] * 7
    assert out["loaded"] == []
