"""docs/ARCHITECTURE.md's module tables, generated from the modules' own docstrings.

Each table between `<!-- modules: PKG -->` and `<!-- /modules -->` has one row per module of
commbench/PKG: its path and the first paragraph of its docstring. The rows keep the order the doc
gives them (a reading order, kept by hand); a new module is added at the end of its table, and a
removed one leaves it. Everything outside the markers is kept by hand, except the facts the page
quotes from the code (FACTS: `schema_version N` is core/columns.py's SCHEMA_VERSION), rewritten
wherever they appear.

    python tools/archdoc.py          # rewrite docs/ARCHITECTURE.md's tables
    python tools/archdoc.py --check  # exit 1, naming the modules, where the doc and the code differ

tests/unit/test_architecture_doc.py runs the check, so a docstring and its row never drift apart:
to change a row, change the module's docstring and run this script.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ itself: docblocks, run or imported
from docblocks import check_or_write, rewrite_blocks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "commbench"
DOC = ROOT / "docs" / "ARCHITECTURE.md"

BEGIN = re.compile(r"^<!-- modules: ([a-z_/]+) -->$")
END = "<!-- /modules -->"
HEADER = ["| module | job |", "|---|---|"]
ROW = re.compile(r"^\| `([a-z_/]+\.py)` \|")
# A fact the page quotes: its pattern on the page (group 1 kept) and where its value is assigned in the code.
FACTS = {"schema_version": (re.compile(r"(schema_version )\d+"), "core/columns.py", "SCHEMA_VERSION")}


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring on one line, as a table cell."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path)))
    if not doc:
        raise SystemExit(f"{path.relative_to(ROOT)} has no docstring: its first paragraph is its row in {DOC.name}")
    first = " ".join(doc.split("\n\n")[0].split())
    return first.replace("|", "\\|")


def modules(package: str, pkg: Path = PKG) -> dict[str, Path]:
    """{path relative to commbench/: file} of a package's modules (an empty __init__.py is none)."""
    found = {}
    for path in sorted((pkg / package).rglob("*.py")):
        if path.name == "__init__.py" and not path.read_text().strip():
            continue
        found[str(path.relative_to(pkg))] = path
    return found


def constant(path: Path, name: str) -> object:
    """The literal value assigned to `name` at the top of a module (read with ast, never imported)."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{path.relative_to(path.parents[1])} assigns no {name}: {DOC.name} quotes it")


def with_facts(text: str, pkg: Path = PKG) -> str:
    """`text` with every fact it quotes set to the code's value."""
    for pattern, module, name in FACTS.values():
        if pattern.search(text):
            value = constant(pkg / module, name)
            text = pattern.sub(lambda m, v=value: f"{m.group(1)}{v}", text)
    return text


def generate(text: str, pkg: Path = PKG) -> str:
    """`text` (the doc) with every module table rebuilt from the docstrings."""

    def table(package: str, block: list[str]) -> list[str]:
        found = modules(package, pkg)
        order = [m.group(1) for m in map(ROW.match, block) if m and m.group(1) in found]
        order += [name for name in found if name not in order]
        return HEADER + [f"| `{name}` | {summary(found[name])} |" for name in order]

    return with_facts(rewrite_blocks(text, BEGIN, END, DOC.name, table)[0], pkg)


def differences(old: str, new: str) -> list[str]:
    """The rows that differ, by module (rows in either text that the other lacks)."""
    a = {ln for ln in old.splitlines() if ROW.match(ln)}
    b = {ln for ln in new.splitlines() if ROW.match(ln)}
    names = sorted({ROW.match(ln).group(1) for ln in a ^ b})
    names += [fact for fact, (pattern, _, _) in FACTS.items()
              if [m.group(0) for m in pattern.finditer(old)] != [m.group(0) for m in pattern.finditer(new)]]
    return names or ["(outside the rows: markers or order)"]


def main(argv: list[str]) -> int:
    new = generate(DOC.read_text())
    return check_or_write(DOC, ROOT, new, differences, "the docstrings", "archdoc.py", "--check" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
