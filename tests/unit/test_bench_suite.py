"""The benchmark suite (benchmarks/, pytest-benchmark) stays out of the default test run: speed
figures are measured there, never in timed tests. CI runs it on its own, in short mode (.ci/run),
which is also what fails when the suite rots."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_default_run_collects_only_the_tests_folder():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and newer
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    # `python -m pytest` without arguments collects testpaths; benchmarks/ holds test_*.py files
    # that would be collected (and measured) if the checkout root were searched.
    assert config["testpaths"] == ["tests"]
    assert sorted(p.name for p in (REPO / "benchmarks").glob("test_*.py"))
