#!/usr/bin/env python3
"""The whole suite as CI runs it (.ci/run calls this after its installs), one step after another:
lint and types, the generated docs' checks, the test tiers (unit, parallel, pairwise, serial) and the
benchmarks in short mode.

    python tools/suite.py              # every step, in order
    python tools/suite.py unit         # one step (or several, or a group: lint, tests)
    python tools/suite.py --list       # the steps, their commands and time budgets
    python tools/suite.py -v unit      # pytest's -v on the tiers (as CI runs them)

Every step runs even when one before it failed, so that one run reports every failure; each step's
time is printed, and the exit code is 1 when any step failed (2 for an unknown step). A step that
took longer than its budget (the "at most" docs/DEVELOPMENT.md gives, from STEPS) is said so at the
end, without failing: the budgets hold on a quiet 2-core machine.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    what: str
    budget_s: int  # at most, on a quiet 2-core machine (CI's): docs/DEVELOPMENT.md's table says it
    tier: bool = False  # a test tier: -v applies

    def command(self) -> str:
        return " ".join(f'"{a}"' if " " in a else a for a in self.argv)


STEPS = (
    Step("ruff", ("ruff", "check"), "lint over the whole tree (pyproject.toml's [tool.ruff])", 5),
    Step("mypy", ("mypy",), "types of the whole package, strict on core (pyproject.toml's [tool.mypy])", 60),
    Step("archdoc", ("python", "tools/archdoc.py", "--check"),
         "docs/ARCHITECTURE.md's module tables are the modules' docstrings", 5),
    Step("reliabilitydoc", ("python", "tools/reliabilitydoc.py", "--check"),
         "docs/RELIABILITY.md's failure tables are the tests' failure markers", 5),
    Step("unit", ("python", "-m", "pytest", "-n", "2", "tests/unit", "--durations=20"),
         "the unit tier, in process, two at a time (pytest-xdist)", 90, tier=True),
    Step("parallel", ("python", "-m", "pytest", "-n", "2", "-m", "not serial", "--ignore=tests/unit",
                      "--durations=30"),
         "real ranks, the CLI in subprocesses, tests/test_cli_*.py: two at a time", 480, tier=True),
    Step("pairwise", ("python", "-m", "pytest", "-n", "2", "--dist", "loadfile", "-m", "pairwise",
                      "--ignore=tests/unit", "--durations=20"),
         "the serial files that wait on faults, two files at a time, each its own lab (root; else they skip)", 330,
         tier=True),
    Step("serial", ("python", "-m", "pytest", "-m", "serial and not pairwise", "--ignore=tests/unit", "--durations=40"),
         "the rest of the lab, Slurm, Open MPI and timings, one at a time (root; without it they skip)", 720,
         tier=True),
    Step("bench", ("python", "-m", "pytest", "benchmarks/", "--benchmark-disable", "-q", "--bench-rows", "40000"),
         "the benchmark suite in short mode: each body once, as a test (benchmarks/README.md)", 30),
)
GROUPS = {"lint": ("ruff", "mypy", "archdoc", "reliabilitydoc"), "tests": ("unit", "parallel", "pairwise", "serial")}


def resolve(argv: tuple[str, ...]) -> list[str]:
    """`python` is this interpreter; another tool is the one beside it (a virtual environment's) if
    there is one there, else PATH's."""
    head, *rest = argv
    if head == "python":
        return [sys.executable, *rest]
    beside = Path(sys.executable).parent / head
    return [str(beside) if beside.exists() else (shutil.which(head) or head), *rest]


def chosen(names: list[str]) -> list[Step] | None:
    """The steps `names` ask for, in the suite's order (all of them when none); None if one is unknown."""
    by_name = {s.name: s for s in STEPS}
    wanted: set[str] = set()
    for name in names:
        if name not in by_name and name not in GROUPS:
            return None
        wanted.update(GROUPS.get(name, (name,)))
    return [s for s in STEPS if not names or s.name in wanted]


def main(args: list[str]) -> int:
    verbose = "-v" in args
    names = [a for a in args if a not in ("-v", "--list")]
    steps = chosen(names)
    if steps is None:
        known = ", ".join([s.name for s in STEPS] + list(GROUPS))
        print(f"suite: unknown step in {' '.join(names)}: use one of {known}", file=sys.stderr)
        return 2
    if "--list" in args:
        for s in steps:
            print(f"{s.name:15} at most {s.budget_s:5d} s  {s.command()}")
        return 0
    done: list[tuple[Step, int, float]] = []
    for s in steps:
        argv = resolve(s.argv) + (["-v"] if verbose and s.tier else [])
        print(f"# suite: {s.name}: {s.command()}", flush=True)
        t0 = time.monotonic()
        code = subprocess.run(argv, cwd=ROOT).returncode
        took = time.monotonic() - t0
        done.append((s, code, took))
        print(f"# suite: {s.name}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {took:.0f} s", flush=True)
    print("# suite: " + ", ".join(f"{s.name} {'ok' if c == 0 else 'FAILED'} {t:.0f} s" for s, c, t in done)
          + f"; total {sum(t for _, _, t in done) / 60:.1f} min")
    for s, _, took in done:
        if took > s.budget_s:
            print(f"# suite: {s.name} took {took:.0f} s, over its budget of {s.budget_s} s (docs/DEVELOPMENT.md)")
    return 1 if any(c != 0 for _, c, _ in done) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
