"""docs/DEVELOPMENT.md and the README say what the tree does (issue 56, docs that cannot drift): the
suite's steps table is tools/suite.py's STEPS (names, commands, budgets), the markers table is
pyproject.toml's markers, the README's test times are the suite's budgets, and the versions the
README names are the code's. Reads files only."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import tomllib
from pathlib import Path

import commbench

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "DEVELOPMENT.md"
README = ROOT / "README.md"
_spec = importlib.util.spec_from_file_location("suite", ROOT / "tools" / "suite.py")
suite = sys.modules["suite"] = importlib.util.module_from_spec(_spec)  # its dataclass looks it up
_spec.loader.exec_module(suite)
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def steps_table() -> list[str]:
    return ["| step | command | what it runs | at most |", "|---|---|---|---|"] + [
        f"| `{s.name}` | `{s.command()}` | {s.what} | {s.budget_s} s |" for s in suite.STEPS]


def markers_table() -> list[str]:
    rows = ["| marker | meaning |", "|---|---|"]
    for marker in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]:
        name, meaning = marker.split(":", 1)
        rows.append(f"| `{name.strip()}` | {meaning.strip()} |")
    return rows


def block(text: str, name: str) -> list[str]:
    m = re.search(rf"<!-- {name} -->\n(.*?)\n<!-- /{name} -->", text, re.S)
    assert m, f"docs/DEVELOPMENT.md: no <!-- {name} --> block"
    return m.group(1).splitlines()


def test_the_steps_table_is_the_suite_s_steps() -> None:
    assert block(DOC.read_text(), "suite steps") == steps_table(), "\n".join(["write:", *steps_table()])


def test_the_markers_table_is_pyproject_s_markers() -> None:
    assert block(DOC.read_text(), "markers") == markers_table(), "\n".join(["write:", *markers_table()])


def test_the_readme_s_test_times_are_the_suite_s_budgets() -> None:
    text = " ".join(README.read_text().split())
    budget = {s.name: s.budget_s for s in suite.STEPS}
    total = math.ceil(sum(budget.values()) / 60)
    assert f"the tests at most {total} minutes" in text
    assert f"the unit tier at most {budget['unit']} s" in text
    assert total <= 30  # CI as a whole (issue 56)


def test_the_readme_s_versions_are_the_code_s() -> None:
    text = README.read_text()
    torch = re.search(r"^torch==([\d.]+)", (ROOT / "requirements-cpu.txt").read_text(), re.M)
    assert torch and f"`torch=={torch.group(1)}`" in text
    assert f"# commbench {commbench.__version__} " in text
    python = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert f"Python {python}+" in text


def test_the_suite_names_the_doc_s_step_groups() -> None:
    assert set(suite.GROUPS["lint"]) | set(suite.GROUPS["tests"]) <= {s.name for s in suite.STEPS}
    assert suite.chosen(["unit"]) == [s for s in suite.STEPS if s.name == "unit"]
    assert suite.chosen(["nope"]) is None
    tiers = [s.name for s in suite.STEPS if s.tier]
    assert tiers == list(suite.GROUPS["tests"])
    assert f"the test tiers ({', '.join(tiers)})" in " ".join(suite.__doc__.split())  # its docstring names them
