"""benchmarks/gpu_check.sh's parallel-groups case (issue #38; docs/LAYOUTS.md), as its dry run names
it for a machine of 1, 2 and 8 GPUs (a stand-in nvidia-smi on PATH): tp=2 with the dp groups on 4
GPUs or more, the one dp group on 2-3, skipped with its reason on one."""

from __future__ import annotations

import os
import subprocess

import pytest

CHECK = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "gpu_check.sh")


@pytest.mark.parametrize("gpus, case", [
    (8, "sweep --layout tp=2,dp=auto --group dp --solo on 8 GPUs (4 dp groups at once)"),
    (2, "sweep --layout dp=auto --group dp --solo on 2 GPUs (tp=2 would leave dp groups of 1 rank)"),
    (1, "skipped: 1 GPU(s), and a group needs 2 ranks"),
])
def test_the_dry_run_names_the_layout_case_the_gpus_allow(tmp_path, gpus, case):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    listing = "".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-{i})\\n" for i in range(gpus))
    smi.write_text(f'#!/bin/sh\nif [ "$1" = -L ]; then printf "{listing}"; else echo 9.0; fi\n')
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{smi.parent}:{os.environ['PATH']}"}
    r = subprocess.run(["bash", CHECK, "--dry-run"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert f"  layout             {case}\n" in r.stdout, r.stdout
