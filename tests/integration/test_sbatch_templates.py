"""COMMBENCH_ARGS replaces the template's defaults, and the job's output says so (issue #40): the
Slurm templates run here under bash with stand-ins for srun, scontrol and commbench that record
argv. (What the templates say is read in tests/unit/test_slurm_templates.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from unit.test_slurm_templates import SLURM, default_args


FAKE_COMMBENCH = '#!/bin/sh\nprintf "%s\\n" "$*" >> "$ARGV_LOG"\n'


def run_template(tmp_path: Path, name: str, commbench_args: str | None) -> tuple[str, list[str]]:
    """(the job's stdout, the argument lines commbench was started with) for one template."""
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in {"srun": '#!/bin/sh\nshift\nexec "$@"\n', "scontrol": "#!/bin/sh\necho node1\n",
                       "commbench": FAKE_COMMBENCH}.items():
        (bin_dir / tool).write_text(body)
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGV_LOG": str(tmp_path / "argv"), "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "node1", "SLURM_NTASKS": "1", "RESULTS_DIR": str(tmp_path / "results")}
    if commbench_args is not None:
        env["COMMBENCH_ARGS"] = commbench_args
    res = subprocess.run(["bash", str(SLURM / name)], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout, (tmp_path / "argv").read_text().splitlines()


@pytest.mark.parametrize("name", ["commbench.sbatch", "network-change.sbatch"])
def test_commbench_args_replaces_the_defaults_and_the_job_says_so(tmp_path, name):
    defaults = " ".join(default_args((SLURM / name).read_text()))
    (tmp_path / "default").mkdir()
    out, argv = run_template(tmp_path / "default", name, None)
    sweeps = [a for a in argv if a.startswith("sweep ")]
    assert sweeps and all(a.startswith(f"sweep {defaults} --label ") for a in sweeps), argv
    assert f"commbench: sweep options: {defaults} (the template's defaults)" in out.splitlines()

    (tmp_path / "given").mkdir()
    out, argv = run_template(tmp_path / "given", name, "--sizes 1M")
    sweeps = [a for a in argv if a.startswith("sweep ")]
    assert sweeps and all(a.startswith("sweep --sizes 1M --label ") for a in sweeps), argv  # no --collective
    assert (f"commbench: sweep options: --sizes 1M (COMMBENCH_ARGS, in place of the template's defaults: "
            f"{defaults})") in out.splitlines()
