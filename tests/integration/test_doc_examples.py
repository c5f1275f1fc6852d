"""Every command the README and docs show (issue #40): run, or checked to parse.

Which commands run, and how:
- A block or table marked `<!-- example run -->` (or `<!-- example table run small="FLAGS" -->`)
  is run as printed, in a fresh folder, except where it names a file or hosts this machine does not
  have (a launcher of several hosts, `srun` or `mpirun`; a placeholder such as `bands.yaml` or
  `results/RUN.parquet`): those are parsed only. `small="FLAGS"` is the doc's own word that the test
  appends FLAGS to each `commbench sweep` (click keeps an option's last value, so `-e 64K` replaces
  the printed `-e`). The Quick start's set-up lines are checked against .ci/run (the commands CI
  runs), and its main job's output against the README's sample: the same header lines, table
  header and closing lines, with the real point count.
- Every other `commbench ...` line in a ```bash / ```console block of README.md, docs/*.md,
  benchmarks/README.md and slurm/README.md (also after `srun`, `mpirun`, `torchrun -m`, `lab run --`)
  is parsed by click exactly as the shell would pass it (commbench.cli.app's group: every option must
  exist and its value convert; the command itself is not run). Placeholders for the reader's own
  files ("does not exist") pass.

About 60-90 s on a 2-core machine: 10 short runs (the main job, the question table's commands) and
in-process parsing of the rest."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from helpers import clean_env

pytestmark = pytest.mark.integration  # runs the CLI in subprocesses (tests/conftest.py: the tiers)

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "benchmarks" / "README.md",
    ROOT / "slurm" / "README.md",
]
MARK = re.compile(
    r"<!--\s*example(?P<table>\s+table)?(?P<run>\s+run)?(?:\s+small=\"(?P<small>[^\"]*)\")?"
    r"(?:\s+refused=\"(?P<refused>[^\"]*)\")?\s*-->\s*\n"
)
FENCE = re.compile(r"```(?P<lang>[a-z]*)[^\n]*\n(?P<body>.*?)```", re.S)
SHELL_LANGS = {"bash", "console", "sh", "shell"}
LAUNCHERS = ("srun", "mpirun")  # several hosts: parsed only
PLACEHOLDERS = ("ds_config.json", "bands.yaml", "RUN.parquet", "results/nccl", "sweep.parquet", "results/nightly",
                "train.py", "job.trace", "results/fabric-")
RUN_TIMEOUT = 240


def _lines(body: str) -> list[str]:
    """A block's command lines: continuations joined, console prompts removed, output lines dropped
    (a console block's lines without `$ `)."""
    text = body.replace("\\\n", " ")
    console = any(line.startswith("$ ") for line in text.splitlines())
    out = []
    for line in text.splitlines():
        if console:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if line.strip():
            out.append(line.strip())
    return out


def _words(line: str) -> list[str]:
    """The shell words of one command line, up to a pipe, redirection or `&&`, comments removed."""
    lex = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    words = []
    for word in lex:
        if word and set(word) <= set("|&;<>"):
            break
        words.append(word)
    return words


def _commbench_argvs(words: list[str]) -> list[list[str]]:
    """Each commbench invocation in one command's words: `commbench ...`, `python -m commbench ...`,
    `torchrun ... -m commbench ...`, and after `--` of `lab run` / `lab exec` the inner one too."""
    return [words[i + 1 :] for i, word in enumerate(words) if word == "commbench" and words[i + 1 :]]


def doc_commands() -> list[tuple[str, str]]:
    """(where, line) for every command line of every shell block in the docs."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            if m.group("lang") not in SHELL_LANGS:
                continue
            line_no = text.count("\n", 0, m.start()) + 1
            for line in _lines(m.group("body")):
                words = _words(line)
                if words and _commbench_argvs(words):
                    found.append((f"{doc.relative_to(ROOT)}:{line_no}", line))
    return found


def parse_only(argv: list[str]) -> None:
    """click parses argv as `commbench` would (every option must exist and convert), down to the
    command, whose body is not run."""
    from commbench.cli.app import cli

    cmd: click.Command = cli
    name, parent, args = "commbench", None, list(argv)
    while True:
        ctx = cmd.make_context(name, args, parent=parent)
        if not isinstance(cmd, click.Group):
            return
        rest = [*(ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args), *ctx.args]
        if not rest:
            return
        sub_name, sub, args = cmd.resolve_command(ctx, rest)
        assert sub is not None and sub_name is not None, f"no command {rest[0]!r}"
        cmd, name, parent = sub, sub_name, ctx


def _parses(where: str, line: str) -> None:
    for argv in _commbench_argvs(_words(line)):
        try:
            parse_only(argv)
        except click.exceptions.Exit:
            pass  # --help, --version
        except click.BadParameter as exc:
            if "does not exist" not in exc.format_message():
                raise AssertionError(f"{where}: {line!r}: {exc.format_message()}") from exc
        except click.ClickException as exc:
            raise AssertionError(f"{where}: {line!r}: {exc.format_message()}") from exc


DOC_COMMANDS = doc_commands()


@pytest.mark.parametrize(("where", "line"), DOC_COMMANDS, ids=[where for where, _ in DOC_COMMANDS])
def test_doc_command_parses(where: str, line: str) -> None:
    """Every commbench command shown in a shell block of the docs parses as the shell passes it."""
    _parses(where, line)


def _marked(doc: Path) -> list[tuple[re.Match, str]]:
    """(marker, what follows it: a fenced block's body or a table's lines) for each marker in doc."""
    text = doc.read_text()
    out = []
    for m in MARK.finditer(text):
        rest = text[m.end() :]
        if m.group("table"):
            table = []
            for line in rest.splitlines():
                if not line.startswith("|"):
                    break
                table.append(line)
            out.append((m, "\n".join(table)))
        else:
            fence = FENCE.match(rest)
            assert fence, f"{doc.name}: an example marker not followed by a fenced block"
            out.append((m, fence.group("body")))
    return out


def _run(line: str, small: str, cwd: Path) -> subprocess.CompletedProcess:
    words = _words(line)
    if small and (argvs := _commbench_argvs(words)) and argvs[0][:1] == ["sweep"]:
        words = [*words, *shlex.split(small)]
    if words[0] == "commbench":
        words = [sys.executable, "-m", "commbench", *words[1:]]
    elif words[0] == "torchrun":
        words = [sys.executable, "-m", "torch.distributed.run", *words[1:]]
    # the documented machine: a CPU one (gloo ranks), also where the tests run beside a GPU
    env = clean_env(PYTHONPATH=str(ROOT), CI="1", TORCH_CPP_LOG_LEVEL="ERROR", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(words, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)


def _runnable(line: str) -> bool:
    words = _words(line)
    return words[0] not in LAUNCHERS and not any(p in line for p in PLACEHOLDERS)


def _table_commands(table: str) -> list[list[str]]:
    """Per row of a question table: the commands in its second column's code spans."""
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append(re.findall(r"`([^`]+)`", cells[1]))
    return rows


def marked_blocks() -> list[tuple[str, re.Match, str]]:
    """(where, marker, body) of every marked fenced block but the README's Quick start (its own test)."""
    found = []
    for doc in DOCS:
        for mark, body in _marked(doc):
            if mark.group("table") or (doc.name == "README.md" and doc.parent == ROOT and mark.group("run")):
                continue
            found.append((f"{doc.relative_to(ROOT)}:{doc.read_text()[: mark.start()].count(chr(10)) + 1}", mark, body))
    return found


MARKED = marked_blocks()


@pytest.mark.parametrize(("where", "mark", "body"), MARKED, ids=[where for where, _, _ in MARKED])
def test_marked_block(where: str, mark: re.Match, body: str, tmp_path: Path) -> None:
    """A block marked `example run` runs (with the marker's `small` flags on each sweep; lines that
    need hosts or the reader's files only parse); one marked `example refused="WORDS"` is refused:
    exit 2, WORDS on stderr."""
    assert mark.group("run") or mark.group("refused"), f"{where}: a marker says run or refused"
    for line in _lines(body):
        if mark.group("refused"):
            proc = _run(line, "", tmp_path)
            assert proc.returncode == 2 and mark.group("refused") in proc.stderr, (where, line, proc.stderr)
        elif _runnable(line):
            proc = _run(line, mark.group("small") or "", tmp_path)
            assert proc.returncode == 0, (where, line, proc.stderr[-3000:])
        else:
            _parses(where, line)


def test_some_blocks_are_marked() -> None:
    """The marker syntax is in use beyond the README (a typo in it would silently mark nothing)."""
    assert any(mark.group("refused") for _, mark, _ in MARKED)


def test_question_table_rows_run(tmp_path: Path) -> None:
    """README's question table: every row's commands run (a sweep with the doc's small sizes) or,
    where they need hosts or the reader's files, parse; each row has at least one that runs."""
    marked = [(m, t) for m, t in _marked(ROOT / "README.md") if m.group("table")]
    assert len(marked) == 1, "README: one question table marked <!-- example table run ... -->"
    mark, table = marked[0]
    assert table.splitlines()[0].startswith("| your question | the command |")
    rows = _table_commands(table)
    assert len(rows) >= 6
    for row in rows:
        commands = [c for c in row if _commbench_argvs(_words(c))]
        ran = 0
        for command in commands:
            if _runnable(command):
                proc = _run(command, mark.group("small") or "", tmp_path)
                # an answer, not a failure: compare 1 a regression (a loaded machine), 3 inconclusive;
                # doctor 1 problems found on this host
                answers = (0, 1, 3) if " compare " in command else (0, 1) if " doctor" in command else (0,)
                assert proc.returncode in answers, (
                    f"{command!r} -> {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
                )
                ran += 1
            else:
                _parses("README.md question table", command)
        assert ran, f"no command of the row {row} runs here"


def test_quick_start_prints_what_readme_shows(tmp_path: Path) -> None:
    """README's Quick start: the set-up and test lines are what .ci/run runs; the main job, run as
    printed, prints the README's sample's shape: its header lines, the table header, the closing
    lines (with this run's numbers), and as many points as the sample says."""
    readme = (ROOT / "README.md").read_text()
    blocks = [b for m, b in _marked(ROOT / "README.md") if m.group("run") and not m.group("table")]
    assert len(blocks) == 1, "README: the Quick start's commands marked <!-- example run -->"
    lines = [line for line in _lines(blocks[0])]
    ci = (ROOT / ".ci" / "run").read_text()
    setup = [line for line in lines if _words(line)[0] == "pip"]
    tests = [line for line in lines if _words(line)[:2] == ["python", "tools/suite.py"]]
    assert setup and tests and any(_words(line)[:3] == ["python3", "-m", "venv"] for line in lines)
    ci_words = [_words(line) for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert [w for w in _words(setup[0]) if w != "-q"] in [[w for w in cw if w != "-q"] for cw in ci_words]
    assert [*_words(tests[0]), "-v"] in ci_words  # the suite, as CI runs it
    (main_job,) = [line for line in lines if _words(line)[0] == "commbench"]

    proc = _run(main_job, "", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = proc.stdout.splitlines()

    sample = re.search(r"What the main job prints.*?\n```\n(.*?)```", readme, re.S)
    assert sample, "README: the main job's sample output"
    shown = sample.group(1).splitlines()

    def shape(line: str) -> str:  # a line without its numbers, units of size and run id
        line = re.sub(r"run \S+|results/\S+", "X", line)
        line = re.sub(r"(?<![\w.])\d[\d.]*(?:e[+-]?\d+)?(?![\w.])", "N", line)
        return re.sub(r"N (?:B|KiB|MiB|GiB)\b", "N U", line)

    got_shapes = [shape(line) for line in got]
    marked = any("~ ±" in line for line in got if not line.startswith("#"))
    for line in shown:
        if line == "..." or not line.startswith("#"):
            continue  # table rows: their count is checked below
        if line.startswith("# ~ ±") and not marked:
            continue  # the marks' legend: printed only when a point is marked (every point may reach the target)
        if line.startswith("# Precision: "):  # how many stopped short, and why, is this run's
            head = shape(line).split(";")[0].split(" (")[0]
            assert any(g.startswith(head) for g in got_shapes), f"README shows {line!r}:\n{proc.stdout}"
            continue
        assert shape(line) in got_shapes, f"README shows {line!r}; the run printed no such line:\n{proc.stdout}"
    assert shown[-1].startswith("# Results:") and got[-1].startswith("# Results:")
    points = re.search(r"\((\d+) rows\)", shown[-1])
    assert points and f"({points.group(1)} rows)" in got[-1], (shown[-1], got[-1])
    rows = [line for line in got if line.strip() and not line.startswith("#")]
    assert len(rows) == int(points.group(1))
    assert os.listdir(tmp_path / "results")
