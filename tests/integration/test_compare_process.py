"""compare as a process: the real entry point's exit codes on real files, and a reader that leaves
stdout before the report (`compare a b | true` in a CI job). The files are tests/unit/test_compare.py's."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from unit.test_compare import files  # noqa: F401 - the module's fixture: the same real files

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "commbench", "compare", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_cli_exit_codes_on_real_files(files):  # noqa: F811 - the imported fixture
    """The real entry point in a subprocess: 0 unchanged, 1 regression, 3 inconclusive."""
    d = files["dir"]
    b = str(files["before"])
    cases = {
        "unchanged": [b, str(files["same"])],
        "regression": [b, str(files["worse"])],
        "inconclusive": [str(files["few_b"]), str(files["few_a"])],
    }
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        procs = dict(zip(cases, pool.map(lambda args: run_cli(*args, cwd=d), cases.values())))
    ok = procs["unchanged"]
    assert ok.returncode == 0, ok.stderr
    assert "verdict: unchanged (exit 0)" in ok.stdout and ok.stderr == ""
    reg = procs["regression"]
    assert reg.returncode == 1 and "verdict: regression (exit 1)" in reg.stdout and "REGRESSION" in reg.stdout
    assert _one_line(reg) == "commbench: warning: torch_version differs: before 2.13.0, after 2.14.0"
    inc = procs["inconclusive"]
    assert inc.returncode == 3 and "-R 5" in inc.stdout, inc.stderr



def test_a_closed_stdout_keeps_the_verdicts_exit_code(files):  # noqa: F811 - the imported fixture
    """`commbench compare a b | true` in a CI job: the reader is gone before the report is written.
    Before, click turned the BrokenPipeError into exit 1, which reads as "a regression"."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    b = str(files["before"])
    for after, code, verdict in ((files["same"], 0, "unchanged"), (files["few_a"], 3, "inconclusive")):
        before = str(files["few_b"]) if code == 3 else b
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader left before the first line
        try:
            proc = subprocess.run([sys.executable, "-m", "commbench", "compare", before, str(after)], stdout=write_end,
                                  stderr=subprocess.PIPE, text=True, cwd=files["dir"], env=env, timeout=120)
        finally:
            os.close(write_end)
        assert proc.returncode == code, proc.stderr
        assert proc.stderr == (f"commbench: compare: verdict: {verdict} (exit {code}); stdout was closed before the "
                               "report was read\n"), proc.stderr
