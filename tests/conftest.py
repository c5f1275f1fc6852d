"""Shared by every tier. Its presence puts tests/ on sys.path (pytest's rootdir-relative imports),
so any test file can `from helpers import cb, clean_env, LAUNCHER_VARS` and `from unit.synthetic
import make_rows`.

The tiers (README, Development): tests/unit is fast and starts no rank and no subprocess of the
CLI; tests/integration starts real ranks and the CLI in subprocesses, and the lab as root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

pytest_plugins = ["pytester"]  # tests/unit/test_in_process.py runs an inner session with the unit tier's hooks

# The property tests explore new random inputs on a developer's machine, where a find is a bug to
# fix; in CI (.ci/run sets HYPOTHESIS_PROFILE=ci) they run the same inputs each time, so a merge is
# never turned red by a random draw that has nothing to do with it.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def cli(capsys):
    """The CLI in this process (commbench.cli.app.main, what `python -m commbench` runs): cli(*args)
    gives a CompletedProcess (returncode, stdout, stderr) like helpers.cb's, without a subprocess."""
    from commbench.cli.app import main

    def run(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()  # what the test printed before is not the command's
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["commbench", *args], code, out, err)

    return run


UNIT = Path(__file__).resolve().parent / "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test outside tests/unit is marked `integration` (pyproject.toml's markers): the marker
    says the tier, whatever the file declares."""
    for item in items:
        if UNIT not in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)


def pytest_collection_finish(session) -> None:
    """What collection made (every test module, the package it imports, pandas, matplotlib, torch:
    about 900,000 objects) lives to the end of the session: moved out of the garbage collector's
    sight (gc.freeze), so that each full collection a test triggers (pandas, report._large_html's
    gc.collect) walks only what tests made since, not the whole process: about 5 s of the unit tier."""
    import gc

    gc.collect()
    gc.freeze()
