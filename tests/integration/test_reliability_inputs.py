"""Inputs that are not what they claim (issue #23): every one answered at once, bounded in memory.

Three classes, each fixed in one shared place and tried here on more than one command and input:

- unbounded reads: a FIFO, /dev/zero, a socket or a file over its kind's limit, given as an
  nccl-tests log, a bands file, a ds_config or results (core/inputs.py read_bytes, core/results.py
  read_results) -> exit 2 with one line naming the file;
- expansion bombs in a bands file (aliases, deep nesting, numbers of a million digits) ->
  analysis/gate/bandsfile.py refuses them before any value is built;
- text that is not what it claims: JSON nested a million levels deep in a results file's env or
  net column (analysis/points/frames.py json_cell: "(unreadable ...)" in the report, never a traceback),
  and escape sequences in NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (core/safetext.py: doctor shows
  them as escapes).

The CLI runs in a subprocess with a 60 s timeout and its address space capped at 4 GB, so that a
read that never ends or an expansion fails the test (killed, or MemoryError) instead of taking the
host; the memory it really used, its peak resident set, must stay under 1.5 GB. (The cap itself
cannot be 1.5 GB: pyarrow's and matplotlib's thread pools reserve 1.7 GB of address space they
never touch, on good input too.)
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import commbench
from commbench.core import inputs
from commbench.core.errors import BadInput

from unit import synthetic  # tests/ is on sys.path (tests/conftest.py)

pytestmark = pytest.mark.integration  # the CLI in subprocesses (README, Development: the tiers)

MEMORY_BOUND = 1_500_000_000  # peak resident set of one CLI run
ADDRESS_SPACE_CAP = 4 << 30
DEADLINE_S = 60
# Run the commbench that this test imported (a subprocess would otherwise take whatever is installed).
PACKAGE_ROOT = str(Path(commbench.__file__).resolve().parents[1])
NCCL_LOG = Path(__file__).resolve().parents[1] / "data" / "nccl-tests" / "all_reduce_v2.19.4_1node_8xA100.txt"
NETINFO = Path(__file__).resolve().parents[1] / "data" / "netinfo" / "roce_mtu1500_cx6dx"
ENTRY = "- {collective: all_reduce, size: 64M, ranks: 2, busbw_GBps: 0.119}\n"


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


def run_cli(args: list[str], cwd: Path, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """The CLI in a subprocess (address space capped, killed after DEADLINE_S); its own peak
    resident set, from wait4 on that child (RUSAGE_CHILDREN would be the largest child this pytest
    process ever had, another test's included), must stay under MEMORY_BOUND."""
    full_env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                **(env or {})}
    cmd = [sys.executable, "-m", "commbench", *args]
    start = time.monotonic()
    child = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             errors="replace", preexec_fn=_bounded)
    texts: dict[str, str] = {}
    readers = [threading.Thread(target=lambda n=name, f=stream: texts.__setitem__(n, f.read()))
               for name, stream in (("out", child.stdout), ("err", child.stderr))]
    for r in readers:
        r.start()
    deadline = threading.Timer(DEADLINE_S, child.kill)
    deadline.start()
    try:
        _, status, usage = os.wait4(child.pid, 0)
    finally:
        deadline.cancel()
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    for r in readers:
        r.join()
    child.stdout.close()
    child.stderr.close()
    elapsed = time.monotonic() - start
    peak = usage.ru_maxrss * 1024  # Linux reports KiB
    assert peak < MEMORY_BOUND, (args, peak)
    return subprocess.CompletedProcess(cmd, child.returncode, texts["out"], texts["err"]), elapsed


def assert_refused(proc: subprocess.CompletedProcess, elapsed: float, needles: list[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("commbench: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert elapsed < DEADLINE_S
    return lines[0]


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> Path:
    """A good results file, a good bands file, and the files that are not what they claim."""
    d = tmp_path_factory.mktemp("not-what-they-claim")
    synthetic.write(d / "good.parquet", synthetic.make_rows(repetitions=1))
    (d / "bands.yaml").write_text("version: 1\nsystem: test\nentries:\n" + ENTRY)
    os.mkfifo(d / "fifo")
    os.mkfifo(d / "fifo.parquet")
    (d / "piped").mkdir()  # a folder of results holding one named pipe
    synthetic.write(d / "piped" / "a.parquet", synthetic.make_rows(repetitions=1))
    os.mkfifo(d / "piped" / "b.parquet")
    (d / "devzero.parquet").symlink_to("/dev/zero")
    for name, limit in (("huge.log", inputs.MAX_NCCL_TESTS_LOG_BYTES), ("huge.yaml", inputs.MAX_BANDS_FILE_BYTES),
                        ("huge.json", inputs.MAX_DS_CONFIG_BYTES)):
        with open(d / name, "wb") as fh:  # sparse: over the limit without using the disk
            fh.truncate(limit + 1)
    return d


@pytest.fixture(scope="module")
def unix_socket(d):
    path = d / "sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)
    yield path
    s.close()


# ---- 1. unbounded reads: only regular files, never more than the kind's limit ----

NOT_REGULAR = [
    # (id, argv with {d}, what the line names)
    ("nccl-import-dev-zero", ["nccl-tests", "import", "/dev/zero", "--out", "{d}/imp"],
     ["/dev/zero is a character device, not a regular file", "save the nccl-tests output to a file"]),
    ("nccl-import-fifo", ["nccl-tests", "import", "{d}/fifo", "--out", "{d}/imp"],
     ["fifo is a named pipe (FIFO), not a regular file"]),
    ("nccl-import-over-limit", ["nccl-tests", "import", "{d}/huge.log", "--out", "{d}/imp"],
     ["huge.log is larger than 64 MiB, the most commbench reads as an nccl-tests log"]),
    ("gate-bands-dev-zero", ["gate", "{d}/good.parquet", "--expect", "/dev/zero"],
     ["bands file /dev/zero is a character device, not a regular file"]),
    ("gate-bands-fifo", ["gate", "{d}/good.parquet", "--expect", "{d}/fifo"],
     ["bands file {d}/fifo is a named pipe (FIFO), not a regular file", "pass a YAML file"]),
    ("gate-bands-over-limit", ["gate", "{d}/good.parquet", "--expect", "{d}/huge.yaml"],
     ["huge.yaml is larger than 1 MiB, the most commbench reads as a bands file"]),
    ("zero-ds-config-dev-zero", ["zero", "--ds-config", "/dev/zero"],
     ["DeepSpeed config '/dev/zero' is a character device, not a regular file"]),
    ("zero-ds-config-fifo", ["zero", "--ds-config", "{d}/fifo"],
     ["fifo' is a named pipe (FIFO), not a regular file", "give the path of a ds_config.json"]),
    ("zero-ds-config-over-limit", ["zero", "--ds-config", "{d}/huge.json"],
     ["huge.json' is larger than 4 MiB, the most commbench reads as a ds_config"]),
    ("report-dev-zero", ["report", "/dev/zero", "--out", "{d}/r.html"],
     ["results file /dev/zero is a character device, not a regular file"]),
    ("report-fifo", ["report", "{d}/fifo.parquet", "--out", "{d}/r.html"],
     ["results file {d}/fifo.parquet is a named pipe (FIFO)"]),
    ("report-baseline-fifo", ["report", "{d}/good.parquet", "--baseline", "{d}/fifo.parquet", "--out", "{d}/r.html"],
     ["fifo.parquet is a named pipe (FIFO)"]),
    ("plot-fifo", ["plot", "{d}/fifo.parquet", "--out", "{d}/p.png"], ["fifo.parquet is a named pipe (FIFO)"]),
    ("plot-link-to-dev-zero", ["plot", "{d}/devzero.parquet", "--out", "{d}/p.png"],
     ["devzero.parquet is a character device, not a regular file"]),
    ("plot-folder-holding-a-fifo", ["plot", "{d}/piped", "--out", "{d}/p.png"],
     ["results file {d}/piped/b.parquet is a named pipe (FIFO)"]),
    ("compare-fifo", ["compare", "{d}/good.parquet", "{d}/fifo.parquet"], ["fifo.parquet is a named pipe (FIFO)"]),
    ("compare-dev-zero", ["compare", "/dev/zero", "{d}/good.parquet"], ["/dev/zero is a character device"]),
    ("gate-results-folder-holding-a-fifo", ["gate", "{d}/piped", "--expect", "{d}/bands.yaml"],
     ["piped/b.parquet is a named pipe (FIFO)"]),
]


@pytest.mark.parametrize("argv, needles", [pytest.param(a, n, id=i) for i, a, n in NOT_REGULAR])
@pytest.mark.failure(
    row="dev-zero-named-pipe-fifo",
    section="Inputs that are not what they claim",
    failure="`/dev/zero`, a named pipe (FIFO), a symlink to a device, or a socket as an nccl-tests log, a bands "
            "file (`gate --expect`), a ds_config (`zero --ds-config`) or results (`report`, `report --baseline`, "
            "`plot`, `compare`, `gate`)",
    does="refused at once, before it is opened (a FIFO would block the open for ever, `/dev/zero` never ends): `X "
         "is a named pipe (FIFO), not a regular file: ...`; the kind is checked again on the open descriptor "
         "(opened non-blocking), so a file swapped in between is refused too",
)
@pytest.mark.failure(
    row="folder-results-holding-named-pipe",
    section="Inputs that are not what they claim",
    failure="a folder of results holding a named pipe `b.parquet`",
    does="the entry is named: `results file DIR/b.parquet is a named pipe (FIFO), not a regular file`, before "
         "pyarrow opens any file",
    cases="plot-folder-holding-a-fifo",
)
@pytest.mark.failure(
    row="input-over-kind-s-limit",
    section="Inputs that are not what they claim",
    failure="an input over its kind's limit (a 64 MiB + 1 log, a 1 MiB + 1 bands file, a 4 MiB + 1 ds_config), or a "
            "file whose size lies (`/proc`)",
    does="`X is larger than 64 MiB, the most commbench reads as an nccl-tests log: ...`, from the size before "
         "reading, and from a read that stops at limit + 1 byte whatever the size said",
    cases="nccl-import-over-limit",
)
def test_a_pipe_a_device_or_a_file_over_the_limit_is_refused_at_once(argv, needles, d):
    proc, elapsed = run_cli([a.format(d=d) for a in argv], d)
    assert_refused(proc, elapsed, [n.format(d=d) for n in needles])
    assert not (d / "imp").exists() and not (d / "r.html").exists() and not (d / "p.png").exists()


@pytest.mark.failure(row="dev-zero-named-pipe-fifo")
def test_a_socket_is_refused_as_an_nccl_tests_log_and_as_a_bands_file(d, unix_socket):
    for argv in (["nccl-tests", "import", str(unix_socket), "--out", str(d / "imp")],
                 ["gate", str(d / "good.parquet"), "--expect", str(unix_socket)]):
        proc, elapsed = run_cli(argv, d)
        assert_refused(proc, elapsed, [f"{unix_socket} is a socket, not a regular file"])


def _log_of_rows(n: int) -> str:
    """A real log's header and footer around n result rows (its own 25, repeated)."""
    lines = NCCL_LOG.read_text().splitlines(keepends=True)
    head, rows, tail = lines[:17], lines[17:42], lines[42:]
    return "".join(head + (rows * (n // len(rows) + 1))[:n] + tail)


@pytest.mark.failure(
    row="nccl-tests-log-would-become",
    section="Inputs that are not what they claim",
    failure="an nccl-tests log that would become millions of rows (50,001 row lines; a `-J` document of two million "
            "empty results)",
    does="counted before parsing (a possessive regex, a count of JSON values): `more than 50000 result rows ...: "
         "import one log per nccl-tests run`; nothing written",
)
def test_an_nccl_tests_log_that_would_become_too_many_rows_is_refused_before_parsing(tmp_path):
    log = tmp_path / "many.log"
    log.write_text(_log_of_rows(inputs.MAX_NCCL_TESTS_LOG_ROWS + 1))
    proc, elapsed = run_cli(["nccl-tests", "import", str(log), "--out", str(tmp_path / "imp")], tmp_path)
    assert_refused(proc, elapsed, [f"{log}: more than 50000 result rows", "import one log per nccl-tests run"])
    doc = tmp_path / "many.json"  # a -J document of two million empty results
    doc.write_text('{"results": [' + ",".join(["{}"] * inputs.MAX_NCCL_TESTS_JSON_VALUES) + "]}")
    proc, elapsed = run_cli(["nccl-tests", "import", str(doc), "--out", str(tmp_path / "imp")], tmp_path)
    assert_refused(proc, elapsed, [f"{doc}: more than 2000000 JSON values"])
    assert not (tmp_path / "imp").exists()


@pytest.mark.failure(
    row="63-mib-binary-junk-nccl",
    section="Inputs that are not what they claim",
    failure="63 MiB of binary junk as an nccl-tests log",
    does="`line 1: binary data (N bytes that are not text)`, counted per character kind, not as a list of positions "
         "(which took 1.7 GB)",
)
def test_binary_junk_just_under_the_limit_is_refused_within_the_memory_bound(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_bytes(os.urandom(inputs.MAX_NCCL_TESTS_LOG_BYTES - (1 << 20)).replace(b"\x00", b"\x01"))
    proc, elapsed = run_cli(["nccl-tests", "import", str(junk), "--out", str(tmp_path / "imp")], tmp_path)
    assert_refused(proc, elapsed, [f"{junk} line 1: binary data", "not an nccl-tests log"])


MESSAGES = inputs.InputMessages(missing="{name} missing", folder="{name} folder", kind="a test file", limit=100)


@pytest.mark.failure(row="input-over-kind-s-limit")
def test_the_read_is_bounded_even_when_the_size_lies(tmp_path):
    # /proc files are regular and report size 0: the read itself must stop at the limit.
    with pytest.raises(BadInput, match="larger than 100 B, the most commbench reads as a test file"):
        inputs.read_bytes("/proc/self/maps", MESSAGES)
    small = tmp_path / "small"
    small.write_bytes(b"x" * 100)
    assert inputs.read_bytes(small, MESSAGES) == b"x" * 100
    small.write_bytes(b"x" * 101)
    with pytest.raises(BadInput, match="larger than 100 B"):
        inputs.read_bytes(small, MESSAGES)


@pytest.mark.failure(row="dev-zero-named-pipe-fifo")
def test_a_fifo_never_blocks_the_reader_even_with_a_writer_waiting(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer holding it open: reads would block, not end
    try:
        with pytest.raises(BadInput, match="is a named pipe"):
            inputs.read_text(fifo, MESSAGES)
    finally:
        os.close(fd)
    with pytest.raises(BadInput, match="folder"):
        inputs.read_bytes(tmp_path, MESSAGES)
    with pytest.raises(BadInput, match="missing"):
        inputs.read_bytes(tmp_path / "nope", MESSAGES)


@pytest.mark.failure(row="folder-results-holding-named-pipe")
def test_read_results_refuses_a_pipe_before_pyarrow_opens_it(tmp_path):
    from commbench.core.results import read_results

    os.mkfifo(tmp_path / "x.parquet")
    for target in (tmp_path / "x.parquet", tmp_path, Path("/dev/null")):
        with pytest.raises(BadInput, match="not a regular file"):
            read_results([target])


# ---- 2. expansion bombs in a bands file ----


def _system_bomb() -> str:
    # every level an anchored list inside `system`'s own value, so that no unknown key is involved
    parts = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        parts.append(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "version: 1\nsystem: [" + ", ".join(parts) + "]\nentries:\n" + ENTRY


def _entry_bomb(key: str) -> str:
    parts = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        parts.append(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    value = "[" + ", ".join(parts) + "]"
    entry = {"note": f"- {{collective: all_gather, size: 64M, ranks: 2, busbw_GBps: 1, note: {value}}}\n",
             "collective": f"- {{collective: {value}, size: 64M, ranks: 2, busbw_GBps: 1}}\n",
             "defaults": ""}[key]
    top = f"defaults: {{lower: 0.05, upper: {value}}}\n" if key == "defaults" else ""
    return "version: 1\nsystem: test\n" + top + "entries:\n" + ENTRY + entry


BAD_BANDS = [
    ("alias-bomb-in-system", _system_bomb(), ["line 2", "YAML anchors and aliases (&name, *name) are not read"]),
    ("alias-bomb-in-a-note", _entry_bomb("note"), ["line 5", "YAML anchors and aliases"]),
    ("alias-bomb-as-a-collective", _entry_bomb("collective"), ["line 5", "YAML anchors and aliases"]),
    ("alias-bomb-in-defaults", _entry_bomb("defaults"), ["line 3", "YAML anchors and aliases"]),
    ("nested-400000-deep-in-system", "version: 1\nsystem: " + "[" * 400_000 + "]" * 400_000 + "\nentries:\n"
     + ENTRY, ["line 2", "nested deeper than 64 levels"]),
    ("nested-400000-deep-in-a-note", "version: 1\nentries:\n" + ENTRY + "- {collective: all_gather, size: 64M, "
     "ranks: 2, busbw_GBps: 1, note: " + "{a: " * 200_000 + "1" + "}" * 200_000 + "}\n",
     ["line 4", "nested deeper than 64 levels"]),
    ("sexagesimal-busbw", "version: 1\nentries:\n- {collective: all_reduce, size: 64M, ranks: 2, busbw_GBps: 1"
     + ":0" * 500_000 + "}\n", ["line 3", "a number of 1000001 characters"]),
    ("hex-version-of-a-million-digits", "version: 0x" + "f" * 1_000_000 + "\nentries:\n" + ENTRY,
     ["line 1", "a number of 1000002 characters"]),
]


@pytest.mark.parametrize("text, needles", [pytest.param(t, n, id=i) for i, t, n in BAD_BANDS])
@pytest.mark.failure(
    row="yaml-alias-bomb-billion-laughs",
    section="Inputs that are not what they claim",
    failure="a YAML alias bomb (billion laughs) in a bands file: in `system:`, in an entry's `note:`, as a "
            "`collective:`, in `defaults:`",
    does="the loader (analysis/gate/bandsfile.py) refuses anchors and aliases where they appear, before any value is "
         "built: `FILE: line 2, column 9: YAML anchors and aliases (&name, *name) are not read in a bands file: "
         "write each value out` (it used to take 7 GB and never finish)",
    cases="alias-bomb-*",
)
@pytest.mark.failure(
    row="bands-file-nested-400-000",
    section="Inputs that are not what they claim",
    failure="a bands file nested 400,000 levels deep (in `system:`, in a `note:`), a number of a million characters "
            "(sexagesimal `1:0:0:...`, a hex `version`)",
    does="`nested deeper than 64 levels: not a bands file`; `a number of 1000001 characters: not a bands file`, "
         "refused before the number is computed",
    cases="nested-*, sexagesimal-busbw, hex-version-of-a-million-digits",
)
def test_an_expansion_bomb_in_a_bands_file_is_refused_at_once(text, needles, d, tmp_path):
    bands = tmp_path / "bomb.yaml"
    bands.write_text(text)
    proc, elapsed = run_cli(["gate", str(d / "good.parquet"), "--expect", str(bands)], tmp_path)
    line = assert_refused(proc, elapsed, [f"{bands}: ", *needles])
    assert elapsed < 30 and len(line) < 400, (elapsed, len(line))


@pytest.mark.failure(row="yaml-alias-bomb-billion-laughs")
def test_the_bands_loader_builds_nothing_it_was_not_given():
    from commbench.analysis.gate.bands import load_bands, parse_bands

    start = time.monotonic()
    for _, text, needles in BAD_BANDS:
        with pytest.raises(BadInput) as err:
            parse_bands(text, "b.yaml")
        assert all(n in str(err.value) for n in needles), str(err.value)
    assert time.monotonic() - start < 30
    # what people write still reads: plain values, and a file --suggest wrote
    example = Path(__file__).resolve().parents[1] / "data" / "gate" / "example.yaml"
    assert load_bands(example).system == "lab-1gbit"
    assert len(parse_bands("version: 1\nsystem: '*not an alias* & no anchor'\nentries:\n" + ENTRY).entries) == 1


# ---- 8. text that is not what it claims ----

DEEP = "[" * 1_000_000 + "]" * 1_000_000


def _nested_results(d: Path, column: str, value: str) -> Path:
    rows = synthetic.make_rows(repetitions=1)
    for r in rows:
        r[column] = value
    path = d / f"nested_{column}_{len(value)}.parquet"
    if not path.exists():
        synthetic.write(path, rows)
    return path


@pytest.mark.parametrize("column", ["env", "net", "plan"])
@pytest.mark.parametrize("fmt", ["html", "md"])
@pytest.mark.failure(
    row="json-nested-million-levels-deep",
    section="Inputs that are not what they claim",
    failure="JSON nested a million levels deep in a results file's `env`, `net` or `plan` column",
    does="read_results reads such a cell as the JSON string `(unreadable: nested deeper than 64 levels)` (a scan, "
         "no recursion); `report` (HTML and Markdown) shows that text, `plot` draws the figure, exit 0, no "
         "RecursionError",
)
def test_report_shows_json_nested_too_deeply_as_unreadable(column, fmt, d, tmp_path):
    results = _nested_results(d, column, DEEP)
    out = tmp_path / f"report.{fmt}"
    proc, elapsed = run_cli(["report", str(results), "--out", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and elapsed < DEADLINE_S
    text = out.read_text()
    if fmt == "html":  # the Markdown leaves out what it cannot show as a table
        assert "(unreadable: nested deeper than 64 levels)" in text
    assert "[[[[[[[[" not in text


@pytest.mark.parametrize("column", ["env", "net"])
@pytest.mark.failure(row="json-nested-million-levels-deep")
def test_plot_draws_results_whose_json_nests_too_deeply(column, d, tmp_path):
    results = _nested_results(d, column, DEEP)
    out = tmp_path / "plot.png"
    proc, elapsed = run_cli(["plot", str(results), "--out", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and elapsed < DEADLINE_S
    assert out.stat().st_size > 0


@pytest.mark.parametrize("argv", [["compare", "{good}", "{deep}"], ["report", "{good}", "--baseline", "{deep}",
                                                                      "--out", "{tmp}/r.html"]])
@pytest.mark.failure(
    row="same-nested-env-given-compare",
    section="Inputs that are not what they claim",
    failure="the same nested `env` given to `compare` or `report --baseline`",
    does="exit 2, one line: `the after results hold an env column that is not a JSON object`",
)
def test_compare_refuses_an_env_nested_too_deeply_with_one_line(argv, d, tmp_path):
    deep = _nested_results(d, "env", DEEP)
    args = [a.format(good=d / "good.parquet", deep=deep, tmp=tmp_path) for a in argv]
    proc, elapsed = run_cli(args, tmp_path)
    assert_refused(proc, elapsed, ["env column that is not a JSON object"])
    assert not (tmp_path / "r.html").exists()


@pytest.mark.failure(row="json-nested-million-levels-deep")
def test_read_results_reads_a_json_cell_nested_too_deeply_as_unreadable(d):
    import json

    from commbench.core.results import read_results

    frame = read_results([_nested_results(d, "net", DEEP)])
    assert {json.loads(v) for v in frame["net"]} == {inputs.UNREADABLE}
    assert json.loads(read_results([d / "good.parquet"])["net"][0])["node01"]["mtu"] == 9000  # the usual kept


@pytest.mark.failure(row="json-nested-million-levels-deep")
def test_json_cells_are_read_without_recursion():
    from commbench.analysis.points.frames import UNREADABLE, json_cell
    from commbench.analysis.points.runs import describe_run
    from commbench.analysis.report.summary import json_value

    for deep in (DEEP, '{"a":' * 100_000 + "1" + "}" * 100_000, "[" * 1_000_000, "[" * 65 + "]" * 65):
        assert json_cell(deep) == UNREADABLE and json_value(deep) == UNREADABLE
    assert json_cell("[" * 64 + "]" * 64) is not None and json_cell('"[[[["') == "[[[["  # brackets in a string
    assert json_cell('{"eth0": {"mtu": 9000}}') == {"eth0": {"mtu": 9000}}
    assert json_cell("not json") == "not json" and json_cell("") is None and json_cell(None) is None
    assert "MTU ?" in describe_run({"net": DEEP, "world_size": 2})


@pytest.mark.parametrize("variable", ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"])
@pytest.mark.failure(
    row="terminal-escape-x1b-31m-x1b",
    section="Inputs that are not what they claim",
    failure="a terminal escape (`\\x1b[31m`, `\\x1b]0;title\\x07`, `\\x1b[2J`), rich markup (`[bold]`), an emoji "
            "code or a bidi override in `NCCL_SOCKET_IFNAME` or `GLOO_SOCKET_IFNAME`",
    does="`doctor`'s human output shows every control character as an escape "
         "(`NCCL_SOCKET_IFNAME=\\x1b[31meth9...`), in the environment line, the findings and the tables "
         "(core/safetext.py); markup and emoji are text; `--json` escapes by itself",
)
def test_doctor_shows_escape_sequences_in_the_environment_as_escapes(variable, tmp_path):
    hostile = "\x1b[31meth9\x1b]0;owned\x07\x1b[2J[bold]:x:\u202e"
    proc, elapsed = run_cli(["doctor", "--root", str(NETINFO)], tmp_path, env={variable: hostile})
    assert proc.returncode == 1, proc.stderr[-2000:]  # the interface does not exist: a problem found
    assert "Traceback" not in proc.stderr and elapsed < DEADLINE_S
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout and "\u202e" not in proc.stdout
    shown = "\\x1b[31meth9\\x1b]0;owned\\x07\\x1b[2J[bold]:x:\\u202e"
    assert f"{variable}={shown}" in proc.stdout  # in the environment line and in the finding
    assert sum(line.count(shown) for line in proc.stdout.splitlines() if line.startswith("PROBLEM")) >= 1


@pytest.mark.failure(row="terminal-escape-x1b-31m-x1b")
def test_safetext_escapes_every_control_character():
    from commbench.analysis.points.frames import printable as frames_printable
    from commbench.core.safetext import escaped, escaped_tree, printable

    assert escaped("a\tb\nc\x1b[0m\x00\u202e\U000e0001é") == "a\\tb\\nc\\x1b[0m\\x00\\u202e\\U000e0001é"
    assert printable("a\x1b[0m\nb") == "a?[0m?b" and frames_printable is printable
    assert escaped_tree({"k\x1b": ["v\x07", ("w\n", 3)], "n": None}) == {"k\\x1b": ["v\\x07", ("w\\n", 3)], "n": None}
