"""The package rules of docs/ARCHITECTURE.md, read from the source with `ast`.

Imports go down the flow (cli -> workloads -> harness -> core; analysis, net, lab and
integrations beside), without circles, without another module's private names, and core and
analysis never reach torch. Inside analysis, each feature folder imports only the features its row
of FEATURES names (the same table as docs/ARCHITECTURE.md's), so they run one way. Outside cli/ no
two modules share a basename. Functions stay short enough to read at once. The allow-lists are
empty on purpose: a new exception is a change to these rules, made here and in the doc.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from unit.sources import tree

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "commbench"
DOC = ROOT / "docs" / "ARCHITECTURE.md"

# What each package may import (besides itself and the root package's __version__).
ALLOWED = {
    "core": set(),
    "analysis": {"core"},
    "net": {"core"},
    "lab": {"core"},
    "integrations": {"core", "net"},
    "harness": {"core", "net"},
    "workloads": {"core", "net", "harness", "integrations", "analysis"},
    "cli": {"core", "net", "harness", "integrations", "analysis", "workloads", "lab"},
}
# analysis/'s feature folders, in order: each may import (besides itself) only the features named
# here, all of them above it, so their imports run one way. points is the base every feature reads.
FEATURES = {
    "points": set(),
    "layout": {"points"},
    "wire": {"points"},
    "replay": {"points"},
    "trend": {"points"},
    "pairs": {"points"},
    "tune": {"points"},
    "ncclside": {"points"},
    "curves": {"points", "tune"},
    # the list of every feature's report section, below compare and export, which loop over it too
    "catalog": {"points", "layout", "wire", "replay", "trend", "pairs", "tune", "curves"},
    "compare": {"points", "catalog"},
    "gate": {"points", "layout", "compare"},
    "check": {"points", "pairs", "gate"},
    "export": {"points", "catalog"},
    "report": {"points", "layout", "wire", "replay", "trend", "pairs", "tune", "curves", "catalog", "compare"},
}
TORCH_FREE = {"core", "analysis"}
HEAVY = {"torch", "deepspeed"}
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600
MAX_LOOSE_MODULES = 3


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: set[str] = field(default_factory=set)  # commbench modules
    heavy: set[str] = field(default_factory=set)  # torch / deepspeed, imported directly
    private_uses: list[str] = field(default_factory=list)
    pkg_dir: Path = PKG

    @property
    def package(self) -> str:
        parts = self.name.split(".")
        return parts[1] if len(parts) > 2 or (len(parts) == 2 and (self.pkg_dir / parts[1]).is_dir()) else ""

    @property
    def feature(self) -> str:
        """The analysis feature folder the module lives in ("" for analysis/'s own modules and other packages)."""
        parts = self.name.split(".")
        if self.package != "analysis" or len(parts) < 3:
            return ""
        return parts[2] if len(parts) > 3 or (self.pkg_dir / "analysis" / parts[2]).is_dir() else ""


def _name_of(path: Path, pkg: Path) -> str:
    rel = path.relative_to(pkg.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(pkg: Path = PKG) -> dict[str, Module]:
    mods = {}
    for path in sorted(pkg.rglob("*.py")):
        name = _name_of(path, pkg)
        mods[name] = Module(name, path, tree(path), pkg_dir=pkg)  # parsed once a session (sources.py)
    for mod in mods.values():
        _read_imports(mod, mods)
    return mods


def _read_imports(mod: Module, mods: dict[str, Module]) -> None:
    aliases: dict[str, str] = {}  # a local name bound to a commbench module
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in HEAVY:
                    mod.heavy.add(top)
                elif a.name in mods:
                    mod.imports.add(a.name)
                    if a.asname:
                        aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{mod.path}: relative import (commbench uses absolute ones)"
            top = node.module.split(".")[0]
            if top in HEAVY:
                mod.heavy.add(top)
                continue
            if top != "commbench":
                continue
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in mods:  # from commbench.analysis import plot
                    mod.imports.add(sub)
                    aliases[a.asname or a.name] = sub
                else:
                    mod.imports.add(node.module)
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        mod.private_uses.append(f"from {node.module} import {a.name}")
    for node in ast.walk(mod.tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            mod.private_uses.append(f"{aliases[node.value.id]}.{node.attr} (line {node.lineno})")
    mod.imports.discard(mod.name)


def _cycles(mods: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(mods[v].imports):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def mods() -> dict[str, Module]:
    """The package's modules and their imports, built when the first test here asks (not at collection,
    where each xdist worker would pay about a second for it whether or not it runs these tests)."""
    return _modules()


def test_no_import_circles(mods):
    cycles = _cycles(mods)
    assert not cycles, "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def _private_uses(mods: dict[str, Module]) -> dict[str, list[str]]:
    return {m.name: m.private_uses for m in mods.values() if m.private_uses}


def test_no_module_imports_another_modules_private_names(mods):
    uses = _private_uses(mods)
    assert not uses, "\n".join(f"{m}: {u}" for m, us in uses.items() for u in us)


OWN = ("commbench", "tests", "unit", "helpers")  # the project's modules as a test names them


def private_imports(source: str | ast.Module) -> list[str]:
    """`from X import _y` of one of OWN's modules (or a relative one) in a test, and in the code a
    test hands a child process as a string (`python -c` with an import in it)."""
    found = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in OWN):
            found += [f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import {a.name}"
                      for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "import " in node.value:
            try:
                child = ast.parse(textwrap.dedent(node.value))
            except SyntaxError:
                continue  # text, not code
            found += [f"line {node.lineno} (a child's code): {f.split(': ', 1)[1]}" for f in private_imports(child)]
    return found


def test_the_scan_finds_a_private_import_in_a_test():
    assert private_imports("from commbench.harness.runner import _failure\n") == [
        "line 1: from commbench.harness.runner import _failure"]
    assert private_imports("from .test_trend import _nights\n") == ["line 1: from .test_trend import _nights"]
    child = 'CHILD = """\nfrom commbench.lab.ranklaunch import _wait_all\n"""\n'
    assert private_imports(child) == ["line 1 (a child's code): from commbench.lab.ranklaunch import _wait_all"]
    assert not private_imports("from commbench.core import results\nimport _posixsubprocess\n")


def test_no_test_imports_a_private_name():
    found = [f"{path.relative_to(ROOT)}: {f}" for path in sorted((ROOT / "tests").rglob("*.py"))
             if path != Path(__file__) for f in private_imports(tree(path))]  # this file: its planted ones
    assert not found, "tests import private names (test through the public name):\n" + "\n".join(found)


def other_spellings(source: str | ast.Module) -> list[str]:
    """Imports of a test helper by a spelling other than the one tests/conftest.py puts on sys.path
    (`unit.synthetic`, `helpers`, an integration file by its own name): a relative import, or one
    through the `tests` package, which would load a second copy of the module under another name.
    (tests.integration.conftest is imported by that name on purpose: `conftest` alone is tests/'s own.)"""
    found = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if isinstance(node, ast.ImportFrom):
            name = "." * node.level + (node.module or "")
            if node.level or (name.startswith("tests.") and name != "tests.integration"):
                found.append(f"line {node.lineno}: from {name} import ...")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.startswith("tests.")]
    return found


def test_the_spelling_scan_finds_another_spelling():
    assert other_spellings("from tests.unit.synthetic import make_rows\n") == [
        "line 1: from tests.unit.synthetic import make_rows"[:-len("make_rows")] + "..."]
    assert other_spellings("from .synthetic import make_rows\nimport tests.helpers\n") == [
        "line 1: from .synthetic import ...", "line 2: import tests.helpers"]
    assert not other_spellings("from unit.synthetic import make_rows\nfrom helpers import cb\n"
                               "from tests.integration import conftest\n")


def test_tests_import_their_helpers_by_one_spelling():
    found = [f"{path.relative_to(ROOT)}: {f}" for path in sorted((ROOT / "tests").rglob("*.py"))
             if path != Path(__file__) for f in other_spellings(tree(path))]  # the trees the private scan parsed
    assert not found, ("tests import a helper by another spelling (write `from unit.X`, `from helpers`, "
                       "or an integration file by its name):\n" + "\n".join(found))


def _climbing(mods: dict[str, Module]) -> list[str]:
    climbing = []
    for mod in mods.values():
        for dep in sorted(mod.imports):
            target = mods[dep]
            if not target.package or target.package == mod.package:
                if dep.endswith("__main__") or (dep.startswith("commbench.cli") and mod.package != "cli"
                                                and mod.name != "commbench.__main__"):
                    climbing.append(f"{mod.name} -> {dep}")
                continue
            if not mod.package:  # the root package: only __main__, which starts the CLI
                if mod.name != "commbench.__main__" or target.package != "cli":
                    climbing.append(f"{mod.name} -> {dep}")
                continue
            if target.package not in ALLOWED[mod.package]:
                climbing.append(f"{mod.name} ({mod.package}) -> {dep} ({target.package})")
    return climbing


def test_imports_go_down_the_flow(mods):
    climbing = _climbing(mods)
    assert not climbing, "imports that climb the flow:\n" + "\n".join(climbing)


def _feature_climbing(mods: dict[str, Module]) -> list[str]:
    """Analysis modules outside a feature folder of FEATURES, and imports between feature folders
    that FEATURES does not allow."""
    wrong = []
    for mod in mods.values():
        if mod.package != "analysis" or mod.name == "commbench.analysis":
            continue
        if mod.feature not in FEATURES:
            wrong.append(f"{mod.name}: not in a feature folder of FEATURES")
            continue
        for dep in sorted(mod.imports):
            target = mods[dep]
            if target.package == "analysis" and target.feature and target.feature != mod.feature \
                    and target.feature not in FEATURES[mod.feature]:
                wrong.append(f"{mod.name} ({mod.feature}) -> {dep} ({target.feature})")
    return wrong


def test_analysis_features_import_one_way(mods):
    wrong = _feature_climbing(mods)
    assert not wrong, "analysis imports against FEATURES:\n" + "\n".join(wrong)


def test_the_feature_order_runs_one_way():
    """Each feature names only features above it in FEATURES: no circle can be allowed."""
    seen: set[str] = set()
    for feature, allowed in FEATURES.items():
        assert allowed <= seen, f"{feature} may import {sorted(allowed - seen)}, not above it in FEATURES"
        seen.add(feature)
    assert "points" in FEATURES and not FEATURES["points"], "points is the base: it imports no feature"


def test_the_doc_states_the_feature_order():
    text = DOC.read_text()
    block = text.split("<!-- features -->\n", 1)[1].split("<!-- /features -->", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    stated = {}
    for row in rows:
        name, allowed = (cell.strip() for cell in row.strip("|").split("|"))
        stated[name.strip("`")] = set() if allowed == "no feature" else set(allowed.split(", "))
    assert list(stated) == list(FEATURES) and stated == FEATURES, "docs/ARCHITECTURE.md's feature table is not FEATURES"


def _shared_basenames(mods: dict[str, Module]) -> dict[str, list[str]]:
    """{basename: modules} of the module names used twice outside cli/ (a cli module may carry its
    command's name; package __init__ files are not modules with a name of their own)."""
    by_name: dict[str, list[str]] = {}
    for mod in mods.values():
        if mod.path.name != "__init__.py" and mod.package != "cli" and mod.package:
            by_name.setdefault(mod.path.stem, []).append(str(mod.path.relative_to(mod.pkg_dir)))
    return {name: paths for name, paths in sorted(by_name.items()) if len(paths) > 1}


def test_module_basenames_are_unique_outside_cli(mods):
    shared = _shared_basenames(mods)
    assert not shared, "modules sharing a name outside cli/:\n" + "\n".join(
        f"{name}: {', '.join(paths)}" for name, paths in shared.items())


def _reaches_heavy(name: str, seen: set[str], mods: dict[str, Module]) -> list[str]:
    """A path from `name` to torch/deepspeed through commbench imports, or []."""
    mod = mods[name]
    if mod.heavy:
        return [name, sorted(mod.heavy)[0]]
    seen.add(name)
    for dep in sorted(mod.imports):
        if dep not in seen:
            path = _reaches_heavy(dep, seen, mods)
            if path:
                return [name, *path]
    return []


def _torch_paths(mods: dict[str, Module]) -> dict[str, str]:
    paths = {}
    for mod in mods.values():
        if mod.package in TORCH_FREE:
            path = _reaches_heavy(mod.name, set(), mods)
            if path:
                paths[mod.name] = " -> ".join(path)
    return paths


def test_core_and_analysis_never_reach_torch(mods):
    paths = _torch_paths(mods)
    assert not paths, "\n".join(paths.values())


def _long_functions(mods: dict[str, Module]) -> list[str]:
    long = []
    for mod in mods.values():
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{mod.path.name}:{node.lineno} {node.name} ({lines} lines)")
    return long


def test_functions_are_short(mods):
    long = _long_functions(mods)
    assert not long, "functions over 80 lines:\n" + "\n".join(long)


def test_modules_are_short_and_live_in_packages(mods):
    long = [f"{m.path.relative_to(ROOT)} ({n} lines)" for m in mods.values()
            if (n := len(m.path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)
    loose = sorted(p.name for p in PKG.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_every_file_beside_the_modules_is_package_data():
    """A non-Python file in commbench/ (the report's stylesheet) is read through importlib.resources:
    pyproject.toml's package-data names it, or a non-editable install would lack it."""
    tomllib = pytest.importorskip("tomllib")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {f"{pkg.replace('.', '/')}/{name}" for pkg, names in data.items() for name in names}
    found = {str(p.relative_to(ROOT)) for p in PKG.rglob("*")
             if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts}
    assert found and found <= shipped, f"not in pyproject.toml's package-data: {sorted(found - shipped)}"


def _documented() -> set[str]:
    """Module paths named in docs/ARCHITECTURE.md, relative to commbench/ (e.g. `core/units.py`)."""
    return set(re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", DOC.read_text()))


def test_architecture_doc_names_every_module_and_only_real_ones(mods):
    named = _documented()
    real = {str(m.path.relative_to(PKG)) for m in mods.values()
            if m.path.name != "__init__.py" or m.path.read_text().strip()}
    assert sorted(named - real) == [], "named in docs/ARCHITECTURE.md but not in commbench/"
    assert sorted(real - named) == [], "in commbench/ but not named in docs/ARCHITECTURE.md"


@pytest.mark.parametrize("pkg", sorted(ALLOWED))
def test_every_package_exists(pkg):
    assert (PKG / pkg / "__init__.py").is_file()


def test_the_checks_find_planted_violations(tmp_path):
    """Each rule fails on a tree that breaks it, so an empty answer above means something."""
    pkg = tmp_path / "commbench"
    files = {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/a.py": "from commbench.harness import b\n_x = 1\n",
        "harness/__init__.py": "",
        "harness/b.py": "import torch\nfrom commbench.core import a\n",
        "analysis/__init__.py": "",
        "analysis/c.py": ("from commbench.core.a import _x\nfrom commbench.core import a\n"
                          "def f():\n" + "    y = a._x\n" * 81),
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    mods = _modules(pkg)
    assert _cycles(mods) == [["commbench.core.a", "commbench.harness.b"]]
    assert _private_uses(mods)["commbench.analysis.c"][:2] == ["from commbench.core.a import _x",
                                                               "commbench.core.a._x (line 4)"]
    assert _climbing(mods) == ["commbench.core.a (core) -> commbench.harness.b (harness)"]
    assert _torch_paths(mods) == {"commbench.analysis.c": "commbench.analysis.c -> commbench.core.a -> "
                                                          "commbench.harness.b -> torch",
                                  "commbench.core.a": "commbench.core.a -> commbench.harness.b -> torch"}
    assert _long_functions(mods) == ["c.py:3 f (82 lines)"]


def test_the_feature_checks_find_planted_violations(tmp_path):
    """The base importing a feature, a feature importing one below it, a module loose in analysis/ and two
    modules of one name outside cli/ are each found; a cli module named as its command is not."""
    pkg = tmp_path / "commbench"
    files = {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/wire.py": "",
        "harness/__init__.py": "",
        "harness/wire.py": "",
        "cli/__init__.py": "",
        "cli/gate.py": "",
        "analysis/__init__.py": "",
        "analysis/loose.py": "",
        "analysis/points/__init__.py": "",
        "analysis/points/base.py": "from commbench.analysis.trend import trend\n",
        "analysis/trend/__init__.py": "",
        "analysis/trend/trend.py": ("from commbench.analysis.points import base\n"
                                    "from commbench.analysis.gate.gate import x\n"),
        "analysis/gate/__init__.py": "",
        "analysis/gate/gate.py": ("from commbench.analysis.points import base\n"
                                  "from commbench.analysis.trend import trend\n"),
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    mods = _modules(pkg)
    assert _feature_climbing(mods) == [
        "commbench.analysis.gate.gate (gate) -> commbench.analysis.trend.trend (trend)",
        "commbench.analysis.loose: not in a feature folder of FEATURES",
        "commbench.analysis.points.base (points) -> commbench.analysis.trend.trend (trend)",
        "commbench.analysis.trend.trend (trend) -> commbench.analysis.gate.gate (gate)",
    ]
    assert _shared_basenames(mods) == {"wire": ["core/wire.py", "harness/wire.py"]}
