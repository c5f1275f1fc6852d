"""The hand-kept facts the docs state about the tree are the tree's (issue 56, docs that cannot drift):
every repo path, dotted name and file named alone they name exists; every `commbench CMD --FLAG` in
a code span is an option of that command, and a span that starts with a flag names one some command
or script takes; every flag given to a script of the tree is one the script reads; every pytest
marker named is declared in pyproject.toml and every marker the tests use too; the schema version,
the DeepSpeed and torch versions, the architecture test's caps and the constants (CONSTANTS) they
quote are the code's; "FILE's `NAME`" names something FILE holds; every COMMBENCH_ variable named is
one the tree reads; the README lists every page and docs/OPTIONS.md every flag of sweep. Each check
is a function from a text to its problems, fed the real docs and a planted stale text. Reads files
only; the CLI is walked as a click group in process, never started. (The tables generated from the
code have their own checks: test_architecture_doc.py, test_columns.py, test_development_doc.py,
tools/reliabilitydoc.py; the commands in the docs' shell blocks are parsed by
tests/integration/test_doc_examples.py.)"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import click
import pytest

from commbench.cli.app import cli
from commbench.core.columns import SCHEMA_VERSION
from commbench.core.options import AUTO_TARGETS, GRAPH_OPS, MAX_ITERATIONS
from commbench.lab.state import MAX_RAILS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
         ROOT / "slurm" / "README.md"]
# Files whose comments name paths too (CHANGELOG.md is history: the paths it names were true then).
COMMENTED = [ROOT / "pyproject.toml", ROOT / "requirements-cpu.txt", ROOT / ".ci" / "run"]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DECLARED = {m.split(":")[0].split("(")[0].strip() for m in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]}
# pytest's own markers and the plugins' (pytest-benchmark's `benchmark`): declared where they come from.
BUILTIN_MARKERS = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings", "benchmark"}

# A path rooted at a top folder of the tree, or at a package of commbench/ (the docs' "relative to
# commbench/"), or at a tier of tests/; one that goes on into a placeholder (`<run_id>`, `*`) is none.
ROOTS = ("commbench", "docs", "tests", "tools", "benchmarks", "slurm", "grafana", r"\.ci", "core", "harness",
         "analysis", "cli", "net", "lab", "workloads", "integrations", "unit", "integration")
PATH = re.compile(rf"(?<![\w./~$-])((?:{'|'.join(ROOTS)})/[\w./-]*\w)(?![\w<*{{])")
DOTTED = re.compile(r"(?<![\w./-])commbench((?:\.\w+)+)")
BARE_FILE = re.compile(r"(?<![\w/.-])([\w-]+\.(?:py|sh|sbatch))\b")  # a module, test or script by its name alone
# Files a page names that are not the tree's: the reader's own (a training script, a health check, a
# sitecustomize.py) and DeepSpeed 0.19.8's sources, which docs/DEEPSPEED.md quotes.
NOT_OURS = {"train.py", "hc.sh", "sitecustomize.py", "bf16_optimizer.py", "engine.py", "parameter_offload.py",
            "partition_parameters.py", "partitioned_param_coordinator.py", "stage3.py", "stage_1_and_2.py"}
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")


def defines(source: str, name: str) -> bool:
    """Whether a module's source defines `name` at its top (a function, a class or an assignment)."""
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def exists(path: str, here: Path, root: Path) -> bool:
    """A path as the docs write it: from the root, from commbench/ or tests/, or from the page's own
    folder; `pkg/module.name` (a module and what it defines) exists when the module defines it."""
    bases = (root, root / "commbench", root / "tests", here)
    if any((base / path).exists() for base in bases):
        return True
    module, _, name = path.rpartition(".")
    files = [base / f"{module}.py" for base in bases if (base / f"{module}.py").is_file()]
    return bool(files) and defines(files[0].read_text(), name)


def dotted_exists(dotted: str, pkg: Path) -> bool | None:
    """`commbench.a.b.name`: the longest module prefix is a file or package and defines the rest's first
    name; None when it names no package of commbench at all (`commbench.prom`, a file's name)."""
    parts = dotted.strip(".").split(".")
    if not (pkg / parts[0]).is_dir() and not (pkg / f"{parts[0]}.py").is_file():
        return None
    for cut in range(len(parts), 0, -1):
        base = pkg.joinpath(*parts[:cut])
        source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if source.is_file():
            return cut == len(parts) or defines(source.read_text(), parts[cut])
    return False


def missing_paths(text: str, here: Path, root: Path = ROOT) -> list[str]:
    """The repo paths, commbench.dotted names and files named alone (`linkrank.py`, `test_x.py`) that
    `text` names and the tree lacks."""
    files = {p.name for folder in ("commbench", "tests", "benchmarks", "tools", "slurm")
             for p in (root / folder).rglob("*") if p.suffix in (".py", ".sh", ".sbatch")} | NOT_OURS
    missing = [m.group(1) for m in PATH.finditer(text) if not exists(m.group(1), here, root)]
    missing += [f"commbench{m.group(1)}" for m in DOTTED.finditer(text)
                if dotted_exists(m.group(1), root / "commbench") is False]
    missing += [m.group(1) for m in BARE_FILE.finditer(text) if m.group(1) not in files]
    return missing


def prose_spans(text: str) -> list[str]:
    """The code spans outside fenced blocks (the fenced shell lines are test_doc_examples.py's)."""
    return SPAN.findall(FENCE.sub("", text))


def code_pieces(text: str) -> list[str]:
    """Every piece of code in a page: its code spans, and each line of its fenced and indented blocks."""
    lines = [ln for block in FENCE.findall(text) for ln in block.splitlines()[1:-1]]
    lines += [ln for ln in FENCE.sub("", text).splitlines() if ln.startswith("    ") and ln.strip()]
    return prose_spans(text) + lines


def option_names(command: click.Command) -> set[str]:
    names = {"-h", "--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts, param.secondary_opts)
    return names


def unknown_options(text: str, group: click.Group = cli) -> list[str]:
    """`commbench CMD [SUB] --flag ...` (or `CMD --flag`, CMD one of commbench's commands) in a code
    span: each such command exists and takes each flag given to it (up to a `--`)."""
    bad = []
    for span in prose_spans(text):
        words = span.split()
        if words[:1] == ["commbench"]:
            words = words[1:]
        elif not (len(words) > 1 and words[0] in group.commands and words[1].startswith("-")):
            continue
        if not words or words[0].isupper():  # `commbench COMMAND --help`: a placeholder
            continue
        command: click.Command = group
        while isinstance(command, click.Group) and words and words[0] in command.commands:
            command = command.commands[words.pop(0)]
        if command is group and words and not words[0].startswith("-"):
            bad.append(f"`{span}`: no command {words[0]}")
            continue
        flags = [w.split("=")[0] for w in words[: words.index("--") if "--" in words else None]]
        bad += [f"`{span}`: no option {f}" for f in flags if re.match(r"--?[A-Za-z]", f)
                and f not in option_names(command)]
    return bad


# Flags of other programs that a page names alone: tcpdump's (pairs --capture runs it), pytest-benchmark's.
FOREIGN_FLAGS = ("--immediate-mode", "--benchmark-")


def all_options(group: click.Group = cli, root: Path = ROOT) -> set[str]:
    """Every option of every commbench command, and every flag the tree's scripts spell."""
    names: set[str] = set()
    stack: list[click.Command] = [group]
    while stack:
        command = stack.pop()
        names |= option_names(command)
        stack += list(command.commands.values()) if isinstance(command, click.Group) else []
    scripts = [*(root / "tools").glob("*.py"), *(root / "benchmarks").rglob("*.py"),
               *(root / "benchmarks").rglob("*.sh"), *(root / "slurm").glob("*.sbatch"), root / ".ci" / "run"]
    return names | {f for script in scripts for f in re.findall(r"--[a-z][\w-]*", script.read_text())}


def unknown_bare_flags(text: str, known: set[str]) -> list[str]:
    """A code span that starts with a flag (`--baseline`, `-R/--repetitions`, `--layout tp=2`): each long
    flag in it is one of commbench's options or of the tree's scripts (or a named program's)."""
    return [f"`{span}`: no command takes {flag}" for span in prose_spans(text) if span.startswith("-")
            for flag in re.findall(r"(?:^|[\s/\[])(--[a-z][\w-]*)", span)
            if flag not in known and not flag.startswith(FOREIGN_FLAGS)]


def undocumented_options(text: str, command: click.Command) -> list[str]:
    """The options of `command` that `text` names by none of their spellings."""
    named = set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", text))
    return [p.opts[-1] for p in command.params if isinstance(p, click.Option)
            and not named & {*p.opts, *p.secondary_opts}]


SCRIPT = re.compile(r"(?:python3?|bash|sh)\s+((?:tools|benchmarks|slurm)/[\w/.-]+\.(?:py|sh))((?:\s+[^\s`|;&#]+)*)")


def unknown_script_flags(text: str, root: Path = ROOT, steps: set[str] | None = None) -> list[str]:
    """A script of the tree run in a page (`python tools/suite.py --list`, `bash benchmarks/x.sh
    --dry-run`): it exists and its source reads each flag given; tools/suite.py's words are its steps."""
    bad = []
    for piece in code_pieces(text):
        for m in SCRIPT.finditer(piece):
            script, words = root / m.group(1), m.group(2).split()
            if not script.is_file():
                bad.append(f"{m.group(1)}: no such script")
                continue
            source = script.read_text()
            bad += [f"{m.group(1)} {w}" for w in words if w.startswith("--") and w.split("=")[0] not in source]
            if m.group(1) == "tools/suite.py" and steps is not None:
                bad += [f"tools/suite.py {w}: no such step" for w in words
                        if not w.startswith("-") and not w.rstrip(".").isupper() and w not in steps]
    return bad


# pytest's -m, not python's (`python -m pytest -m "not serial"`)
MARKER_EXPR = re.compile(r"""(?:^|(?<!python)(?<!python3)\s)-m\s+(?:"([^"]*)"|'([^']*)'|(\w+))""")
MARKER_USE = re.compile(r"pytest\.mark\.(\w+)")


def unknown_markers(text: str, declared: set[str] = DECLARED) -> list[str]:
    """The markers a `-m EXPR` in a piece of code selects, and every `pytest.mark.NAME` the text names,
    that pyproject.toml does not declare (and pytest and its plugins do not bring)."""
    pytest_pieces = [p for p in code_pieces(text) if "pytest" in p or p.startswith("-m ")]  # not torchrun's -m
    names = [w for piece in pytest_pieces for m in MARKER_EXPR.finditer(piece)
             for w in re.findall(r"\w+", next(g for g in m.groups() if g is not None)) if w not in ("and", "or", "not")]
    names += MARKER_USE.findall(text)
    return [n for n in names if n not in declared | BUILTIN_MARKERS and not n.isupper()]  # EXPR, NAME: placeholders


def quoted_facts(root: Path = ROOT) -> dict[str, str]:
    """The facts the docs quote, as the tree states them."""
    pins = dict(re.findall(r"^([\w-]+)==([\w.]+)", (root / "requirements-cpu.txt").read_text(), re.M))
    arch = (root / "tests" / "unit" / "test_architecture.py").read_text()
    caps = dict(re.findall(r"^MAX_(FUNCTION|MODULE)_LINES = (\d+)", arch, re.M))
    return {"schema_version": str(SCHEMA_VERSION), "deepspeed": pins["deepspeed"], "torch": pins["torch"],
            "function": caps["FUNCTION"], "module": caps["MODULE"]}


QUOTES = (
    ("schema_version", re.compile(r"schema_version`?\s+\(?(?:now\s+)?(\d+)")),
    ("deepspeed", re.compile(r"DeepSpeed (\d+\.\d+(?:\.\d+)?)")),
    # a GPU machine's torch (+cuNNN) is that machine's, not the pin's
    ("torch", re.compile(r"\btorch (\d+\.\d+(?:\.\d+)?)(?![\w.]|\+cu)")),
    ("function", re.compile(r"function over (\d+) lines")),
    ("module", re.compile(r"module over (\d+) lines")),
)


def stale_facts(text: str, facts: dict[str, str]) -> list[str]:
    """The quoted facts in `text` that differ from the tree's (a version may be quoted to fewer places)."""
    bad = []
    for fact, pattern in QUOTES:
        for m in pattern.finditer(text):
            said, true = m.group(1), facts[fact]
            if not (said == true or true.startswith(said + ".")):
                bad.append(f"{m.group(0)!r}: the tree's {fact} is {true}")
    return bad


def pct(share: float) -> str:
    return f"{share * 100:g}"


GLOO, NCCL = AUTO_TARGETS["gloo"], AUTO_TARGETS["nccl"]  # --precision auto and --time-budget auto
GLOO_AUTO = (pct(GLOO.precision), f"{GLOO.time_budget:g}")
NCCL_AUTO = (pct(NCCL.precision), f"{NCCL.time_budget:g}")
# Constants the pages quote in words: the wording (its groups are the numbers) and the code's numbers.
CONSTANTS = (
    (r"up to (\d+) rails", (str(MAX_RAILS),)),  # lab up --rails
    (r"([\d,]+), `--iters`' limit", (f"{MAX_ITERATIONS:,}",)),
    (r"(?:graph of|captures|point's) (\d+) calls", (str(GRAPH_OPS),)),  # --cuda-graph
    (r"(\d+)% within ([\d.]+) s a point(?: on gloo|: --precision auto on gloo)", GLOO_AUTO),
    (r"a gloo sweep (\d+)% within ([\d.]+) s", GLOO_AUTO),
    (r"(\d+)% within ([\d.]+) s on NCCL", NCCL_AUTO),
    (r"NCCL (\d+)% within ([\d.]+) s a point", NCCL_AUTO),
    (r"(\d+)% with gloo, (\d+)% with NCCL", (pct(GLOO.precision), pct(NCCL.precision))),
)


def misquoted(text: str, constants: tuple[tuple[str, tuple[str, ...]], ...] = CONSTANTS) -> list[str]:
    """The constants `text` quotes (CONSTANTS' wordings, across line breaks) that differ from the code's."""
    flat = " ".join(text.split())
    return [f"{m.group(0)!r}: the code's is {', '.join(true)}" for wording, true in constants
            for m in re.finditer(wording, flat) if m.groups() != true]


OWNED = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.(?:py|toml|txt|sh|md)|\.ci/run)'s\s+"
                   r"(`[^`\s]+`|\[[\w.]+\]|[A-Z][A-Z_]+\b)")


def unowned_names(text: str, here: Path, root: Path = ROOT) -> list[str]:
    """"FILE's `NAME`" (or FILE's [table], FILE's UPPER_NAME): FILE holds NAME."""
    bad = []
    for m in OWNED.finditer(text):
        path, name = m.group(1), m.group(2).strip("`")
        files = [b / path for b in (root, root / "commbench", root / "tests", here) if (b / path).is_file()]
        if not files or name.split("(")[0] not in files[0].read_text():
            bad.append(f"{path}'s {name}")
    return bad


ENV = re.compile(r"\bCOMMBENCH_[A-Z0-9_]*[A-Z0-9]\b")  # `COMMBENCH_LAB_*`, a family, ends in `_`


def code_env(root: Path = ROOT) -> set[str]:
    """The COMMBENCH_ variables the tree's code, tests, benchmarks and scripts name (not this file's
    planted ones)."""
    files = [f for folder in ("commbench", "tests", "benchmarks", "tools", "slurm") for f in (root / folder).rglob("*")
             if f.suffix in (".py", ".sh", ".sbatch") and f.name != Path(__file__).name] + [root / ".ci" / "run"]
    return {name for f in files for name in ENV.findall(f.read_text())}


def unknown_env(text: str, known: set[str]) -> list[str]:
    """The COMMBENCH_ variables `text` names that nothing in the tree reads or sets."""
    return [name for name in ENV.findall(text) if name not in known]


PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def unknown_imports(text: str, pkg: Path = ROOT / "commbench") -> list[str]:
    """What the pages' Python examples import from commbench that the tree does not hold
    (`from commbench.analysis import metrics` after metrics moved to analysis/export/)."""
    found = []
    for block in PYTHON_BLOCK.findall(text):
        try:
            tree = ast.parse(block)
        except SyntaxError:
            continue  # an excerpt with "..." in it, not a program
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "commbench":
                found += [f"from {node.module} import {a.name}: no such name" for a in node.names
                          if not _importable(f"{node.module}.{a.name}", pkg)]
            elif isinstance(node, ast.Import):
                found += [f"import {a.name}: no such module" for a in node.names
                          if a.name.split(".")[0] == "commbench" and not _importable(a.name, pkg, module=True)]
    return found


def _importable(dotted: str, pkg: Path, module: bool = False) -> bool:
    """A module of commbench (a file or a package), or, unless `module`, a name a module defines."""
    place = pkg.joinpath(*dotted.split(".")[1:])
    if place.is_dir() or place.with_suffix(".py").is_file():
        return True
    return not module and bool(dotted_exists(dotted.removeprefix("commbench"), pkg))


def problems(page: Path) -> list[str]:
    text, here = page.read_text(), page.parent
    steps = {*re.findall(r'Step\("(\w+)"', (ROOT / "tools" / "suite.py").read_text()), "lint", "tests"}
    found = (missing_paths(text, here) + unknown_options(text) + unknown_script_flags(text, steps=steps)
             + unknown_markers(text) + stale_facts(text, quoted_facts()) + unowned_names(text, here)
             + unknown_env(text, KNOWN_ENV) + unknown_bare_flags(text, KNOWN_FLAGS) + misquoted(text)
             + unknown_imports(text))
    return [f"{page.relative_to(ROOT)}: {p}" for p in found]


KNOWN_ENV = code_env()
KNOWN_FLAGS = all_options()


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_the_page_s_facts_are_the_tree_s(page: Path) -> None:
    assert problems(page) == []


@pytest.mark.parametrize("file", COMMENTED, ids=[str(p.relative_to(ROOT)) for p in COMMENTED])
def test_the_paths_comments_name_exist(file: Path) -> None:
    assert missing_paths(file.read_text(), file.parent) == []


def test_the_markers_the_tests_and_the_suite_use_are_declared() -> None:
    used = {node.attr for folder in ("tests", "benchmarks") for f in (ROOT / folder).rglob("*.py")
            for node in ast.walk(ast.parse(f.read_text())) if isinstance(node, ast.Attribute)
            and ast.unparse(node.value) == "pytest.mark"}  # in the code, not in a test's planted text
    assert used - DECLARED - BUILTIN_MARKERS == set()
    assert unknown_markers(f"`{(ROOT / 'tools' / 'suite.py').read_text()}`".replace("\n", " ")) == []
    assert DECLARED <= set(re.findall(r"\| `(\w+)", (ROOT / "docs" / "DEVELOPMENT.md").read_text()))


def test_options_md_names_every_flag_of_sweep() -> None:
    """The README sends the reader to docs/OPTIONS.md "for the sweep's flags in full"."""
    assert "docs/OPTIONS.md for the sweep's flags in full" in " ".join((ROOT / "README.md").read_text().split())
    assert undocumented_options((ROOT / "docs" / "OPTIONS.md").read_text(), cli.commands["sweep"]) == []
    planted = undocumented_options("`-b/-e`, `--wire`, `--max-iters`", cli.commands["sweep"])
    assert planted[:2] == ["--collective", "--step-factor"] and "--wire" not in planted


def test_the_readme_lists_every_page() -> None:
    listed = set(re.findall(r"^- (docs/[A-Z_]+\.md):", (ROOT / "README.md").read_text(), re.M))
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} == listed


def test_planted_unknown_variables_are_found() -> None:
    text = "`COMMBENCH_LAB_PREFIX`, the `COMMBENCH_LAB_*` family, COMMBENCH_NO_SUCH=1"
    assert unknown_env(text, KNOWN_ENV) == ["COMMBENCH_NO_SUCH"]


def test_planted_stale_paths_are_found(tmp_path: Path) -> None:
    text = ("see core/columns.py, core/stragglers.run_findings and tests/unit/test_columns.py; "
            "core/gone.py, core/stragglers.no_such, tests/unit/test_gone.py, test_nothere.py, "
            "linkrank.py, gonemodule.py, train.py; "
            "commbench.core.results.read_results, commbench.core.nothere, commbench.core.results.nope, "
            "`commbench.prom` and results/<run_id>.parquet, tests/test_cli_*.py are no paths")
    assert missing_paths(text, tmp_path) == ["core/gone.py", "core/stragglers.no_such", "tests/unit/test_gone.py",
                                             "commbench.core.nothere", "commbench.core.results.nope",
                                             "test_nothere.py", "gonemodule.py"]


def test_planted_unknown_commands_and_options_are_found() -> None:
    text = ("`commbench sweep -e 64K --precision 0.03`, `lab up --rate 1gbit`, `commbench COMMAND --help`, "
            "`commbench lab run -- python -m x --anything`, `sweep --layout tp=2 --group dp`\n"
            "```bash\ncommbench sweep --fenced-is-test-doc-examples-s\n```\n"
            "`lab --rate`, `commbench sweep --no-such`, `commbench swep -e 8`, `sweep -Z`")
    assert unknown_options(text) == [
        "`lab --rate`: no option --rate", "`commbench sweep --no-such`: no option --no-such",
        "`commbench swep -e 8`: no command swep", "`sweep -Z`: no option -Z"]


def test_planted_unknown_bare_flags_are_found() -> None:
    text = "`--baseline`, `-R/--repetitions`, `--layout tp=2 --group dp`, `--benchmark-save`, `--no-such`, `-x/--nope`"
    assert unknown_bare_flags(text, KNOWN_FLAGS) == ["`--no-such`: no command takes --no-such",
                                                     "`-x/--nope`: no command takes --nope"]


def test_planted_unknown_script_flags_are_found() -> None:
    text = ("`python tools/suite.py --list unit lint STEP...` and `python tools/archdoc.py --check`\n\n"
            "    python tools/suite.py --lsit nosuch\n"
            "```bash\nbash benchmarks/gpu_check.sh --no-such-flag\npython tools/gone.py\n```\n")
    assert unknown_script_flags(text, steps={"unit", "lint"}) == [
        "benchmarks/gpu_check.sh --no-such-flag", "tools/gone.py: no such script",
        "tools/suite.py --lsit", "tools/suite.py nosuch: no such step"]


def test_planted_unknown_markers_are_found() -> None:
    text = ('`-m "not serial"`, `pytest.mark.failure`, `pytest.mark.parametrize`, `-m EXPR`\n'
            "    python -m pytest -m 'slow and not integration'\n"
            "and `@pytest.mark.flaky`, `python -m pytest -m gpu`")
    assert sorted(unknown_markers(text)) == ["flaky", "gpu", "slow"]


def test_planted_stale_facts_are_found() -> None:
    facts = {"schema_version": "5", "deepspeed": "0.19.8", "torch": "2.13.0", "function": "80", "module": "600"}
    good = ("`schema_version` (now 5), schema_version 5, DeepSpeed 0.19.8, torch 2.13 CPU, torch 2.13.0+cpu, "
            "torch 2.11.0+cu130 (a GPU machine's), a function over 80 lines, a module over 600 lines")
    assert stale_facts(good, facts) == []
    bad = "`schema_version` (now 4); DeepSpeed 0.18.1; torch 2.1 here; a module over 700 lines"
    assert [p.split(":")[0] for p in stale_facts(bad, facts)] == [
        "'schema_version` (now 4'", "'DeepSpeed 0.18.1'", "'torch 2.1'", "'module over 700 lines'"]


def test_planted_misquoted_constants_are_found() -> None:
    pages = " ".join(" ".join(page.read_text().split()) for page in PAGES)
    assert [w for w, _ in CONSTANTS if not re.search(w, pages)] == []  # a wording no page uses checks nothing
    good = "up to 8 rails; 10,000,000, `--iters`' limit; each point's 20 calls; 5% within 2 s a point on\ngloo"
    assert misquoted(good) == []
    bad = "up to 16 rails; each point's 10 calls; 3% within 0.05 s on NCCL, a gloo sweep 3% within 2 s"
    assert [p.split(":")[0] for p in misquoted(bad)] == ["'up to 16 rails'", "\"point's 10 calls\"",
                                                           "'a gloo sweep 3% within 2 s'"]


def test_planted_unowned_names_are_found(tmp_path: Path) -> None:
    text = ("pyproject.toml's [tool.ruff], tools/suite.py's STEPS, tests/conftest.py's `cli`, pyproject.toml's "
            "`markers`; core/runsummary.py's figures (a word); pyproject.toml's [tool.nothing], tools/suite.py's "
            "NO_SUCH, tests/conftest.py's `nofixture`, gone.py's `x`")
    assert unowned_names(text, tmp_path) == ["pyproject.toml's [tool.nothing]", "tools/suite.py's NO_SUCH",
                                             "tests/conftest.py's nofixture", "gone.py's x"]


def test_planted_stale_imports_are_found() -> None:
    text = ("```python\nfrom commbench.analysis import metrics\nimport commbench.analysis.engine\n"
            "from commbench.analysis.export import metrics as m\n```\n```python\nx = ...[\n```\n")
    assert unknown_imports(text) == ["from commbench.analysis import metrics: no such name",
                                     "import commbench.analysis.engine: no such module"]
