"""The memory check under a real limit (issue #39, class 7, memory half): `sweep` run under RLIMIT_AS
(ulimit -v, set in the child before exec, no shell) is refused before it allocates, in one line that
names the address-space limit as the bound, instead of being sized from the host's free memory and
failing inside torch. The cgroup reader's cases: tests/unit/test_memory_limits.py. About 5 s."""

from __future__ import annotations

import resource
import subprocess

import pytest

import helpers  # tests/helpers.py

pytestmark = pytest.mark.integration

LIMIT = 6 << 30  # enough for the interpreter and torch (about 1 GiB mapped), not for a 2 GiB all_reduce point


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


@pytest.mark.failure(
    row="memory-rlimit",
    section="Memory limits",
    failure="`sweep` under `ulimit -v` (RLIMIT_AS) smaller than its largest point, on a host with more free memory",
    does="each rank's room is its soft RLIMIT_AS less what it maps already: `the largest point needs about 16 GiB "
         "(1 rank(s)) but only 4.9 GiB is left under the address-space limit (ulimit -v, RLIMIT_AS) 6 GiB less "
         "1.1 GiB this rank maps already: lower --max-bytes or --no-check`, exit 2, nothing written",
)
def test_sweep_under_an_address_space_limit_is_refused_naming_it(tmp_path):
    proc = subprocess.run([*helpers.COMMBENCH, "sweep", "--nproc", "1", "--backend", "gloo", "--collective",
                           "all_reduce", "-b", "2G", "-e", "2G", "--out", str(tmp_path / "r.parquet")],
                          env=helpers.clean_env(), capture_output=True, text=True, timeout=120, preexec_fn=_limited)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "address-space limit (ulimit -v, RLIMIT_AS) 6 GiB" in lines[0] and "lower --max-bytes" in lines[0]
    assert not (tmp_path / "r.parquet").exists()
