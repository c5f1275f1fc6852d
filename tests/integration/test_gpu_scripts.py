"""benchmarks/gpu_check.sh and gpu_prepare.sh on a CPU machine: their argument handling, what the
dry run finds, and the preparation without network. The build and the measuring steps need nvcc
and a GPU: docs/NCCL_TESTS.md says where they ran."""

from __future__ import annotations

import os
import subprocess

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CHECK = os.path.join(ROOT, "benchmarks", "gpu_check.sh")
PREPARE = os.path.join(ROOT, "benchmarks", "gpu_prepare.sh")


def _bash(script, *args, **env):
    full = {**os.environ, **env}
    return subprocess.run(["bash", script, *args], capture_output=True, text=True, timeout=60, env=full)


@pytest.fixture
def source(tmp_path):
    """The shape of an nccl-tests tree the scripts look for (src/Makefile), not a real one."""
    tree = tmp_path / "nccl-tests"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "Makefile").write_text("# stand-in\n")
    (tree / "build").mkdir()  # a build left in the source: the prepared copy drops it
    return tree


@pytest.mark.parametrize("args, env, message", [
    (["--bogus"], {}, "unknown option --bogus: use --dry-run, --build-only, --help or an OUT_DIR"),
    (["a", "b"], {}, "one OUT_DIR only (got a and b)"),
    (["--dry-run"], {"STEP_TIMEOUT": "ten"},
     "STEP_TIMEOUT=ten is not a whole number of seconds: e.g. STEP_TIMEOUT=120"),
    (["--dry-run"], {"BUILD_TIMEOUT": "0"}, "BUILD_TIMEOUT=0 is not a whole number of seconds"),
    (["--dry-run"], {"COLLECTIVES": "all_reduce,alltoall"},
     "COLLECTIVES names alltoall: this check builds all_reduce, all_gather and reduce_scatter only"),
    (["--dry-run"], {"NCCL_TESTS_SRC": "/nonexistent"},
     "NCCL_TESTS_SRC=/nonexistent is not an nccl-tests source tree (no src/Makefile): point it at one"),
    (["--dry-run"], {"CC": "hopper"}, "CC=hopper is not a compute capability: e.g. CC=90 for Hopper"),
])
def test_gpu_check_refuses_a_bad_argument_in_one_line(tmp_path, args, env, message):
    r = _bash(CHECK, *args, **env)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"gpu_check.sh: {message}\n" or (r.stderr.startswith(f"gpu_check.sh: {message}")
                                                         and r.stderr.count("\n") == 1)
    assert not any(tmp_path.iterdir())  # nothing made


def test_gpu_check_dry_run_names_what_it_found_and_writes_nothing(tmp_path, source):
    deps = tmp_path / "deps"
    (deps / "wheels").mkdir(parents=True)
    (deps / "wheels" / "duckdb-2.0.1-cp312-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    r = _bash(CHECK, "--dry-run", str(tmp_path / "out"), NCCL_TESTS_SRC=str(source), GPU_DEPS=str(deps),
              SIZES="-b 1K -e 1M -f 2", COLLECTIVES="all_gather")
    assert r.returncode == 0, r.stderr
    lines = dict(line.strip().split(None, 1) for line in r.stdout.splitlines()[1:] if line.strip())
    assert lines["nccl-tests"] == f"source  {source}"
    assert lines["binaries"].startswith("all_gather_perf (MPI=0")
    assert lines["sizes"] == "-b 1K -e 1M -f 2; collectives all_gather"
    assert "duckdb-2.0.1" in lines["Python"]
    assert not (tmp_path / "out").exists()


def _alone(tmp_path, script):
    """The script in a checkout of its own (no ../shared/vendor beside it), so nothing is found by accident."""
    home = tmp_path / "checkout" / "benchmarks"
    home.mkdir(parents=True)
    copy = home / os.path.basename(script)
    copy.write_text(open(script).read())
    return str(copy)


def test_gpu_check_without_a_source_says_where_to_get_one(tmp_path):
    r = _bash(_alone(tmp_path, CHECK), "--dry-run", NCCL_TESTS_SRC="")
    assert r.returncode == 0
    assert "nccl-tests source  none found (set NCCL_TESTS_SRC, or run benchmarks/gpu_prepare.sh)" in r.stdout


def test_gpu_check_build_without_a_source_fails_with_the_reason(tmp_path):
    r = _bash(_alone(tmp_path, CHECK), "--build-only", str(tmp_path / "out"), NCCL_TESTS_SRC="")
    assert r.returncode == 1
    assert "no nccl-tests source: set NCCL_TESTS_SRC, or run benchmarks/gpu_prepare.sh first" in r.stdout
    logs = list((tmp_path / "out").glob("*/gpu_check.log"))
    assert len(logs) == 1 and "no nccl-tests source" in logs[0].read_text()


@pytest.mark.parametrize("args, message", [
    (["--python"], "--python needs a version, e.g. --python 3.12"),
    (["--python", "twelve"], "--python twelve is not a Python version like 3.12"),
    (["--nvcc", "13"], "--nvcc 13 is not a CUDA version like 13.0"),
    (["--fast"], "unknown argument --fast: use --python X.Y, --nvcc X.Y, --no-wheels or --help"),
])
def test_gpu_prepare_refuses_a_bad_argument_in_one_line(tmp_path, args, message):
    r = _bash(PREPARE, *args, GPU_DEPS=str(tmp_path / "deps"))
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"gpu_prepare.sh: {message}\n")
    assert not (tmp_path / "deps").exists()


def test_gpu_prepare_copies_the_source_without_its_build(tmp_path, source):
    deps = tmp_path / "deps"
    r = _bash(PREPARE, "--no-wheels", GPU_DEPS=str(deps), NCCL_TESTS_SRC=str(source))
    assert r.returncode == 0, r.stderr
    assert (deps / "nccl-tests" / "src" / "Makefile").read_text() == "# stand-in\n"
    assert not (deps / "nccl-tests" / "build").exists() and not (deps / "wheels").exists()
    assert f"nccl-tests source: {source} -> {deps}/nccl-tests" in r.stdout


def test_gpu_prepare_without_a_source_says_how_to_name_one(tmp_path):
    r = _bash(PREPARE, "--no-wheels", GPU_DEPS=str(tmp_path / "deps"), NCCL_TESTS_SRC=str(tmp_path / "nope"))
    assert r.returncode == 2
    assert r.stderr == (f"gpu_prepare.sh: no nccl-tests source at {tmp_path}/nope: set NCCL_TESTS_SRC to a copy "
                        "of NVIDIA/nccl-tests\n")
