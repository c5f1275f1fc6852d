"""Security rules that need no ranks: nothing in the package runs through a shell (an AST scan, so
comments, strings and docs do not count and aliases do), and result files are never group- or
world-writable whatever the umask.

The end-to-end checks (planted secrets through a real sweep, plot, report and compare; the HTML
label; listening sockets after a run) are in tests/integration/test_security_run.py.
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

import commbench
from commbench.core.results import ResultWriter, read_results
from unit.sources import tree
from unit.synthetic import make_rows

PACKAGE = Path(commbench.__file__).parent

# module -> functions that hand a command line to /bin/sh
SHELL_FUNCTIONS = {
    "os": {"system", "popen"},
    "subprocess": {"getoutput", "getstatusoutput"},
    "asyncio": {"create_subprocess_shell"},
    "commands": {"getoutput", "getstatusoutput"},
}
# functions whose first argument must be an argv list, never a command string
ARGV_FUNCTIONS = {"subprocess": {"run", "Popen", "call", "check_call", "check_output"}}


class ShellFinder(ast.NodeVisitor):
    """Finds shell use in one module, following `import x as y` and `from x import f as g`."""

    def __init__(self) -> None:
        self.modules: dict[str, str] = {}  # local name -> module
        self.functions: dict[str, tuple[str, str]] = {}  # local name -> (module, function)
        self.found: list[tuple[int, str]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.modules[alias.asname or alias.name.split(".")[0]] = alias.name
            if alias.name == "commands":
                self.found.append((node.lineno, "import commands"))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            local = alias.asname or alias.name
            self.functions[local] = (node.module or "", alias.name)
            if alias.name in SHELL_FUNCTIONS.get(node.module or "", ()):
                self.found.append((node.lineno, f"from {node.module} import {alias.name}"))

    def _target(self, func: ast.expr) -> tuple[str, str] | None:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in self.modules:
            return self.modules[func.value.id], func.attr
        if isinstance(func, ast.Name) and func.id in self.functions:
            return self.functions[func.id]
        return None

    def visit_Call(self, node: ast.Call) -> None:
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                self.found.append((node.lineno, f"shell={ast.unparse(kw.value)}"))
        target = self._target(node.func)
        if target:
            module, name = target
            if name in SHELL_FUNCTIONS.get(module, ()):
                self.found.append((node.lineno, f"{module}.{name}()"))
            if name in ARGV_FUNCTIONS.get(module, ()) and node.args and (
                    isinstance(node.args[0], ast.JoinedStr)
                    or (isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))):
                self.found.append((node.lineno, f"{module}.{name}() with a command string, not an argv list"))
        self.generic_visit(node)


def shell_uses(source: str | ast.Module) -> list[tuple[int, str]]:
    """The shell uses in a module's source text or its parsed tree."""
    finder = ShellFinder()
    finder.visit(ast.parse(source) if isinstance(source, str) else source)
    return finder.found


@pytest.mark.failure(
    row="command-line-run-through-shell",
    section="Security",
    failure="a command line run through a shell",
    does="subprocess argv lists only; an AST scan of the package fails on `shell=` anything but `False`, "
         "`os.system`, `os.popen`, `subprocess.getoutput/getstatusoutput`, `asyncio.create_subprocess_shell`, and a "
         "command string given to `subprocess.run/Popen/...` (aliases followed); the scan is itself tested on each "
         "form",
)
def test_nothing_in_the_package_runs_through_a_shell():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20, files  # the scan really covers the package
    found = [f"{f.relative_to(PACKAGE.parent)}:{line}: {what}"
             for f in files for line, what in shell_uses(tree(f))]  # parsed once a session (sources.py)
    assert found == [], "\n".join(found)


def test_the_package_does_start_processes_with_argv_lists():
    """The scan sees real subprocess use (so an empty answer above means something)."""
    calls = 0
    for f in PACKAGE.rglob("*.py"):
        calls += sum(1 for n in ast.walk(tree(f)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and n.func.attr in ("run", "Popen") and isinstance(n.func.value, ast.Name)
                     and n.func.value.id == "subprocess")
    assert calls >= 3


@pytest.mark.parametrize("source", [
    "import subprocess\nsubprocess.run(['ls'], shell=True)",
    "import subprocess\nsubprocess.Popen('ls -l', shell=1)",
    "import subprocess as sp\nflag = True\nsp.check_output(['x'], shell=flag)",
    "import os\nos.system('ls')",
    "import os as o\no.popen('ls')",
    "from os import system\nsystem('ls')",
    "from os import popen as p\np('ls')",
    "import subprocess\nsubprocess.getoutput('ls')",
    "import subprocess\nsubprocess.getstatusoutput('ls')",
    "from subprocess import getoutput",
    "import subprocess\nsubprocess.run('ls -l')",
    "import subprocess\nsubprocess.check_call(f'ip link del {name}')",
    "import asyncio\nasyncio.create_subprocess_shell('ls')",
    "import commands",
    "def f(**kw):\n    import subprocess\n    subprocess.run(['ls'], **kw, shell=True)",
])
@pytest.mark.failure(row="command-line-run-through-shell")
def test_the_scan_catches_every_shell_form(source):
    assert shell_uses(source), source


@pytest.mark.parametrize("source", [
    "import subprocess\nsubprocess.run(['ip', 'link'], shell=False)",
    "import subprocess\nsubprocess.run(argv, capture_output=True)",
    "x = 'os.system(1)'  # os.system in a string or comment is not a call",
    "import os\nos.execvp('ip', ['ip', 'link'])",
])
def test_the_scan_passes_argv_use(source):
    assert shell_uses(source) == []


# ----------------------------------------------------------------------------- result file modes


@pytest.mark.parametrize("umask, mode", [(0o000, 0o644), (0o002, 0o644), (0o022, 0o644), (0o077, 0o600)])
@pytest.mark.failure(
    row="world-writable-results",
    section="Security",
    failure="world-writable results",
    does="result files are created 0644 narrowed by the umask, never group- or world-writable (umask 000 gives "
         "0644, 077 gives 0600)",
)
def test_result_files_are_never_group_or_world_writable(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        writer = ResultWriter(tmp_path / "r.parquet")
        writer.create()
        assert stat.S_IMODE((tmp_path / "r.parquet").stat().st_mode) == mode
        writer.append(make_rows(repetitions=1))  # the rewrite after every point keeps the mode
        assert stat.S_IMODE((tmp_path / "r.parquet").stat().st_mode) == mode
    finally:
        os.umask(old)
    assert len(read_results([tmp_path / "r.parquet"])) == len(make_rows(repetitions=1))
