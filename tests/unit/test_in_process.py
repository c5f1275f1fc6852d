"""The unit tier's guard (tests/unit/inprocess.py): inside a unit test every way of starting a process
is refused with a line that says where such a test goes, and a test whose code caught the refusal
fails all the same."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest

from unit import inprocess


@pytest.mark.parametrize("start", [
    lambda: subprocess.run(["true"], check=False),
    lambda: subprocess.Popen([sys.executable, "-m", "commbench", "--help"]),
    lambda: os.system("true"),
    lambda: os.fork(),
    lambda: os.posix_spawn("/bin/true", ["true"], dict(os.environ)),
    lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
    lambda: multiprocessing.get_context("fork").Process(target=print).start(),
], ids=["subprocess.run", "Popen-the-cli", "os.system", "os.fork", "posix_spawn", "mp-spawn", "mp-fork"])
def test_every_way_to_start_a_process_is_refused_and_named(start):
    with inprocess.refused() as started:  # the innermost guard is told, not this test's own
        with pytest.raises(inprocess.ProcessStart, match="or move the test to tests/integration"):
            start()
    assert len(started) == 1


def test_the_refusal_names_the_command():
    with inprocess.refused() as started, pytest.raises(inprocess.ProcessStart) as refusal:
        subprocess.run([sys.executable, "-m", "commbench", "sweep"])
    assert started == [f"{sys.executable} -m commbench sweep"]
    assert str(refusal.value).endswith(f"it started: {sys.executable} -m commbench sweep")


CAUGHT = """
import subprocess

def test_swallows_it():
    try:
        subprocess.run(["true"])
    except Exception:
        pass

def test_starts_nothing():
    assert 1 + 1 == 2
"""


def test_a_test_that_catches_the_refusal_fails_all_the_same(pytester):
    """An inner session with this tier's hooks (tests/unit/conftest.py's): the test that swallowed
    the refusal fails with the line, the other passes."""
    pytester.makeconftest("from unit.conftest import pytest_runtest_call, pytest_runtest_setup, "
                          "pytest_runtest_teardown  # noqa: F401\n")
    pytester.makepyfile(test_inner=CAUGHT)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:benchmark", "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_swallows_it: a unit test starts no process*it started: true*"])

