"""docs/RELIABILITY.md's failure tables, generated from the tests' own `failure` markers.

A table row is one failure: what goes wrong, what commbench does, and the tests that show it. The
first test of a row carries the row's text:

    @pytest.mark.failure(row="ID", section="HEADING", failure="...", does="...")

and every other test of the row names the row only: `@pytest.mark.failure(row="ID")`. Either form
may add `cases="a-*, b"` (the parametrized cases meant, shown as `[a-*, b]`), `note="..."` (shown
after the test in parentheses) and `name="test_x_*"` (a pattern of test names the marked test stands
for, shown instead of its own name). A table without a "what commbench does" column (two columns)
takes markers without `does`. The markers are read with `ast`: no test is imported or run.

Each table between `<!-- failures: HEADING -->` and `<!-- /failures -->` keeps its first two lines
(the header, kept by hand) and gets one row per failure of that section. Rows keep the order the doc
gives them (matched by their failure text), and the tests in a row keep theirs (matched by
`FILE::NAME[CASES]`); a new row or test is added at the end. Everything outside the markers (the
page's narrative) is kept by hand.

    python tools/reliabilitydoc.py          # rewrite docs/RELIABILITY.md's tables
    python tools/reliabilitydoc.py --check  # exit 1, naming the rows, where the doc and the tests differ

tests/unit/test_reliability_doc.py runs the check: to change a row, change its test's marker and run
this script.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ itself: docblocks, run or imported
from docblocks import check_or_write, rewrite_blocks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
DOC = ROOT / "docs" / "RELIABILITY.md"

BEGIN = re.compile(r"^<!-- failures: (.+) -->$")
END = "<!-- /failures -->"
CELL = re.compile(r"(?<!\\)\|")
REF = re.compile(r"(?:([\w/]+\.py))?::([\w*]+)(\[[^\]]*\])?")
KEYS = {"row", "section", "failure", "does", "cases", "note", "name"}


@dataclass
class Ref:
    """One test named in a row: FILE::NAME[CASES] (NOTE)."""

    file: str
    name: str
    cases: str | None
    note: str | None
    line: int

    @property
    def key(self) -> str:
        return f"{self.file}::{self.name}" + (f"[{self.cases}]" if self.cases else "")


@dataclass
class Row:
    section: str
    failure: str
    does: str | None
    refs: list[Ref] = field(default_factory=list)


def _marks(path: Path, rel: str) -> list[tuple[str, int, dict[str, str]]]:
    """(function name, line, the marker's keywords) of every `pytest.mark.failure(...)` in a file."""
    found: list[tuple[str, int, dict[str, str]]] = []
    text = path.read_text()
    if "failure" not in text:  # no marker without the word: most test files need no parse (0.8 s for all)
        return found
    for node in ast.walk(ast.parse(text, str(path))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for dec in node.decorator_list:
            if not (isinstance(dec, ast.Call) and ast.unparse(dec.func) == "pytest.mark.failure"):
                continue
            where = f"{rel}:{dec.lineno}"
            if dec.args or any(k.arg not in KEYS for k in dec.keywords):
                raise SystemExit(f"{where}: a failure marker takes only the keywords {', '.join(sorted(KEYS))}")
            try:
                kwargs = {k.arg: ast.literal_eval(k.value) for k in dec.keywords if k.arg}
            except ValueError:
                raise SystemExit(f"{where}: a failure marker's values must be plain strings") from None
            found.append((node.name, node.lineno, kwargs))
    return found


def collect(tests: Path = TESTS) -> list[Row]:
    """Every row the markers under `tests` define, with its tests, in (file, line) order."""
    rows: dict[str, Row] = {}
    others: list[tuple[str, Ref]] = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests).as_posix()
        for func, line, kw in _marks(path, rel):
            name = kw.get("name", func)
            if not fnmatch.fnmatch(func, name):
                raise SystemExit(f"{rel}::{func}: its failure marker's name={name!r} does not match it")
            ref = Ref(rel, name, kw.get("cases"), kw.get("note"), line)
            row_id = kw.get("row") or kw.get("failure") or ""
            if "failure" not in kw:
                if "row" not in kw or set(kw) & {"section", "does"}:
                    raise SystemExit(
                        f"{rel}::{func}: a failure marker gives section=, failure= (and does=), or row= only"
                    )
                others.append((kw["row"], ref))
                continue
            if "section" not in kw:
                raise SystemExit(f"{rel}::{func}: its failure marker has no section=")
            if row_id in rows:
                raise SystemExit(f"{rel}::{func}: failure row {row_id!r} is defined twice")
            rows[row_id] = Row(kw["section"], kw["failure"], kw.get("does"), [ref])
    for row_id, ref in others:
        if row_id not in rows:
            raise SystemExit(f"{ref.file}::{ref.name}: its failure marker names row={row_id!r}, which no test defines")
        rows[row_id].refs.append(ref)
    return list(rows.values())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in CELL.split(line)[1:-1]]


def _keys(cell: str) -> list[str]:
    """FILE::NAME[CASES] of every test a test cell names, in its order."""
    keys, current = [], ""
    for m in REF.finditer(cell):
        current = m.group(1) or current
        keys.append(f"{current}::{m.group(2)}{m.group(3) or ''}")
    return keys


def render(row: Row, columns: int) -> str:
    """A row as the doc's table line."""
    parts, previous = [], None
    for ref in row.refs:
        text = ref.name + (f"[{ref.cases}]" if ref.cases else "") + (f" ({ref.note})" if ref.note else "")
        if previous is None:
            parts.append(f"{ref.file}::{text}")
        elif ref.file == previous:
            parts.append(f", ::{text}")
        else:
            parts.append(f"; {ref.file}::{text}")
        previous = ref.file
    cells = [row.failure] + ([row.does] if columns == 3 else []) + ["".join(parts)]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(section: str, block: list[str], rows: list[Row]) -> list[str]:
    header = block[:2]
    if len(header) < 2 or not header[1].startswith("|---"):
        raise SystemExit(f"{DOC.name}: the table of '{section}' must start with its header and '|---|' lines")
    columns = len(_cells(header[0]))
    for row in rows:
        if (row.does is None) != (columns == 2):
            raise SystemExit(
                f"{row.refs[0].file}::{row.refs[0].name}: '{section}' has {columns} columns, "
                f"so its markers {'take no' if columns == 2 else 'need a'} does="
            )
    existing = {}
    for line in block[2:]:
        cells = _cells(line)
        if cells:
            existing[cells[0]] = _keys(cells[-1])
    order = list(existing)
    rows = sorted(rows, key=lambda r: order.index(_cell(r.failure)) if _cell(r.failure) in order else len(order))
    out = list(header)
    for row in rows:
        known = existing.get(_cell(row.failure), [])
        first = row.refs[0]
        refs = sorted(
            row.refs,
            key=lambda r: (known.index(r.key) if r.key in known else len(known), r is not first, r.file, r.line),
        )
        out.append(render(Row(row.section, row.failure, row.does, refs), columns))
    return out


def generate(text: str, tests: Path = TESTS) -> str:
    """`text` (the doc) with every failure table rebuilt from the markers."""
    by_section: dict[str, list[Row]] = {}
    for row in collect(tests):
        by_section.setdefault(row.section, []).append(row)
    page, seen = rewrite_blocks(
        text, BEGIN, END, DOC.name, lambda section, block: _table(section, block, by_section.get(section, []))
    )
    unknown = sorted(set(by_section) - set(seen))
    if unknown:
        raise SystemExit(f"{DOC.name} has no '<!-- failures: SECTION -->' table for: {'; '.join(unknown)}")
    return page


def differences(old: str, new: str) -> list[str]:
    """The rows that differ, by their failure text (rows in either text that the other lacks)."""
    a = {ln for ln in old.splitlines() if ln.startswith("| ") and not ln.startswith("|---")}
    b = {ln for ln in new.splitlines() if ln.startswith("| ") and not ln.startswith("|---")}
    names = sorted({_cells(ln)[0] for ln in a ^ b})
    return names or ["(outside the rows: markers or order)"]


def main(argv: list[str]) -> int:
    new = generate(DOC.read_text())
    return check_or_write(
        DOC, ROOT, new, differences, "the tests' failure markers", "reliabilitydoc.py", "--check" in argv
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
