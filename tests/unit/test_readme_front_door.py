"""The README as a front door (issue #40): small, a Quick start with a virtual environment before
the set-up CI runs, a table from an operator's question to a command, and links that lead to files
that exist, in the README and in the docs the rest moved to. Reads files only: the commands
themselves run in tests/integration/test_doc_examples.py."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MOVED_TO = ["docs/OPTIONS.md", "docs/COMMANDS.md", "docs/LAB.md", "docs/DEVELOPMENT.md", "benchmarks/README.md"]
QUESTIONS = [
    "How fast is the fabric?",
    "Did my change help?",
    "Which node, NIC or cable is bad?",
    "What do my DeepSpeed settings cost?",
    "Is this number good?",
    "Run it in Slurm, mpirun or torchrun?",
    "Is it worse than last week? Check every node each night?",
    "What does my training job's communication cost on this fabric, or on the new one?",  # issue #41
]
# A path the docs name: docs/X.md, benchmarks/..., slurm/..., tests/..., tools/..., .ci/run.
PATH = re.compile(r"(?<![\w/.-])((?:docs|slurm|benchmarks|tools|\.ci)/[\w./*-]*[\w*]|[A-Z]+\.md)(?![\w/])")


def test_readme_is_small() -> None:
    assert len(README.read_bytes()) <= 12_500


def test_quick_start_makes_a_venv_before_the_set_up_ci_runs() -> None:
    text = README.read_text()
    quick = text[text.index("## Quick start") : text.index("\n## ", text.index("## Quick start") + 1)]
    block = re.search(r"<!-- example run -->\n```bash\n(.*?)```", quick, re.S)
    assert block, "Quick start: its commands in a ```bash block marked <!-- example run -->"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands[0].startswith("python3 -m venv ")
    assert commands[1:] == [
        "pip install -r requirements-cpu.txt",
        "commbench sweep --collective allreduce",
        "python tools/suite.py",
    ]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\npip install -q -r requirements-cpu.txt\n" in ci
    assert "\npython tools/suite.py -v\n" in ci  # the one test line, as CI runs it (-v: each test named)
    assert "venv" not in ci.split("set -euo pipefail", 1)[1].split("#", 1)[0]
    assert "externally-managed-environment" in quick


def test_question_table_has_every_question() -> None:
    text = README.read_text()
    table = text[text.index("| your question | the command |") :].split("\n\n")[0].splitlines()
    questions = [row.strip("|").split("|")[0].strip() for row in table[2:]]
    assert questions == QUESTIONS
    for row in table[2:]:
        assert "`commbench " in row or "`torchrun " in row, row


def test_every_path_the_readme_and_moved_docs_name_exists() -> None:
    for doc in ["README.md", *MOVED_TO]:
        text = (ROOT / doc).read_text()
        for name in sorted(set(PATH.findall(text))):
            if "<" in name or "*" in name or name.endswith("/results"):
                continue
            where = ROOT / name if "/" in name else ROOT / "docs" / name
            assert where.exists() or (ROOT / name).exists(), f"{doc} names {name}, which does not exist"


def test_readme_links_every_doc() -> None:
    text = README.read_text()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{doc.name}" in text, f"README's Documentation list lacks docs/{doc.name}"
