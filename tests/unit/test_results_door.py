"""Every results file passes one door (core/filecheck.py) before analysis reads it.

Each case plants what a damaged, hand-edited or hostile file holds (a wrong type, a value that
would mislead, a samples bomb, a glob in a name, a part of the wrong type, a part that a live
run's compaction removes while it is read) and asserts what the user is told: exit 2 and one
line naming the file, the column and what was expected, or the right answer. The commands run
in-process (cli.main), so the file takes seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commbench.analysis.points import pointtable
from commbench.cli import app as cli
from commbench.core import filecheck, results
from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.results import SCHEMA, ResultWriter, read_results
from unit.synthetic import make_rows, write

COMMANDS = {  # how each reading command is called on one file (and a good second one for compare)
    "compare": lambda bad, good, out: ["compare", str(good), str(bad)],
    "gate": lambda bad, good, out: ["gate", str(bad), "--suggest", "--out", str(out / "bands.yaml")],
    "plot": lambda bad, good, out: ["plot", str(bad), "--out", str(out / "fig.png")],
    "report": lambda bad, good, out: ["report", str(bad), "--out", str(out / "r.html")],
    "tune --curve": lambda bad, good, out: ["tune", "--ds-config", DS, "--layers", "2", "--hidden", "64", "--curve",
                                            str(bad), "--backend", "gloo", "--out", str(out / "tune")],
    "pairs --from": lambda bad, good, out: ["pairs", "--from", str(bad)],
}
DS = str(Path(__file__).parents[1] / "data" / "ds_config" / "zero2_bucket5e8_fp16.json")


def _table(rows=None) -> pa.Table:
    return pa.Table.from_pylist(rows or make_rows(repetitions=2), schema=SCHEMA)


def _with(table: pa.Table, name: str, values) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def _run(argv, capsys) -> tuple[int, str, str]:
    """(exit code, stderr, stdout) of one in-process command; never a traceback."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return info.value.code, err, out


def _refused(argv, capsys, *needles) -> str:
    code, err, _ = _run(argv, capsys)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert all(ch.isprintable() for ch in lines[0])
    return lines[0]


n = 40  # rows of _table(): 2 collectives x 5 sizes x 2 placements x 2 repetitions
WRONG = {  # id -> (column, its values, what the line must say)
    "schema_version-string": ("schema_version", pa.array(["1"] * n),
                              "column schema_version holds string, expected int32"),
    "size_bytes-string": ("size_bytes", pa.array(["64K"] * n),
                          "column size_bytes holds string, expected int64 (bytes)"),
    "busbw-string": ("busbw_GBps", pa.array(["fast"] * n), "column busbw_GBps holds string, expected double (GB/s)"),
    "world_size-string": ("world_size", pa.array(["16"] * n), "column world_size holds string, expected int32"),
    "collective-number": ("collective", pa.array([7] * n), "column collective holds int64, expected string"),
    "dtype-binary": ("dtype", pa.array([b"float32"] * n), "column dtype holds binary, expected string"),
    "started_at-int64-limit": ("started_at", pa.array([2 ** 63 - 1] * n, pa.timestamp("us", tz="UTC")),
                               "column started_at holds a time no datetime can hold"),
    "time_us-1e308": ("time_us", pa.array([1e308] * n), "column time_us holds 1e+308, outside 0..1e+12"),
    "size_bytes-negative": ("size_bytes", pa.array([-8] * n, pa.int64()), "column size_bytes holds -8, outside 0"),
    "busbw-infinite": ("busbw_GBps", pa.array([float("inf")] * n), "column busbw_GBps holds inf"),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp("good") / "good.parquet", make_rows(repetitions=2, label="good"))


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", sorted(WRONG))  # every reading command, every wrong cell: no traceback
def test_a_wrong_type_or_value_is_one_line_naming_file_and_column(case, command, good, tmp_path, capsys):
    column, values, says = WRONG[case]
    bad = tmp_path / "bad.parquet"
    pq.write_table(_with(_table(), column, values), bad)
    line = _refused(COMMANDS[command](bad, good, tmp_path), capsys, str(bad), says)
    assert "pass a file written by commbench" in line
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "bands.yaml").exists()


def test_the_engine_path_refuses_the_same(good, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pointtable, "MIN_ROWS", 1)  # every input aggregated by DuckDB
    bad = tmp_path / "bad.parquet"
    pq.write_table(_with(_table(), "time_us", pa.array([1e308] * n)), bad)
    for command in ("compare", "report"):
        _refused(COMMANDS[command](bad, good, tmp_path), capsys, str(bad), "column time_us holds 1e+308")
    bands = tmp_path / "good.yaml"
    assert _run(["gate", str(good), "--suggest", "--allow-wide", "--out", str(bands)], capsys)[0] == 0
    _refused(["gate", str(bad), "--expect", str(bands)], capsys, str(bad), "column time_us holds 1e+308")


def test_wider_integers_and_unknown_columns_read(tmp_path):
    table = _with(_table(), "world_size", pa.array([16] * n, pa.int64()))
    table = table.append_column("my_note", pa.array(["x"] * n))
    pq.write_table(table, tmp_path / "wide.parquet")
    df = read_results([tmp_path / "wide.parquet"])
    assert len(df) == n and set(df["world_size"]) == {16} and set(df["my_note"]) == {"x"}


def test_an_integer_too_wide_for_its_column_is_refused(tmp_path):
    table = _with(_table(), "world_size", pa.array([2 ** 40] * n, pa.int64()))
    pq.write_table(table, tmp_path / "wide.parquet")
    with pytest.raises(BadInput, match=r"column world_size holds 1099511627776, outside 1\.\.2\.14748e\+09"):
        read_results([tmp_path / "wide.parquet"])


def test_a_samples_bomb_is_refused_from_the_footer(tmp_path, capsys, good):
    """One row of 10,000,001 zero samples: a few KB on disk, 80 MB read; commbench never writes more
    than --iters' limit a row, so the footer alone refuses it, for every reading command."""
    rows = make_rows(collectives=("all_reduce",), sizes=(1024,), placements=(True,), repetitions=1)
    table = _table(rows)
    values = pa.array(np.zeros(10_000_001))
    table = _with(table, "samples_us", pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values))
    bomb = tmp_path / "bomb.parquet"
    pq.write_table(table, bomb, compression="zstd")
    assert bomb.stat().st_size < 100_000
    for command in ("compare", "report", "plot", "gate"):
        _refused(COMMANDS[command](bomb, good, tmp_path), capsys,
                 "column samples_us holds 10,000,001 items in 1 row(s)")


def test_a_minimal_file_works_or_is_refused_in_one_line(tmp_path, capsys, good):
    """Only the four required columns: every reading command answers, none with a traceback."""
    table = _table().select(list(results.REQUIRED_COLUMNS))
    minimal = tmp_path / "minimal.parquet"
    pq.write_table(table, minimal)
    for command in ("compare", "gate", "plot", "report"):
        code, err, _ = _run(COMMANDS[command](minimal, good, tmp_path), capsys)
        assert code in (0, 1, 3) or (code == 2 and len(err.splitlines()) == 1), (command, code, err)
    # compare reads it: its points are the sizes of the good file's, one side each (no dtype, no ranks)
    code, err, out = _run(["compare", str(good), str(minimal)], capsys)
    assert code == 3 and "nothing comparable" in out and "20 before only, 10 after only" in out, (err, out)
    # plot and report need a time a point: said in one line, the column named
    for command in ("plot", "report"):
        _refused(COMMANDS[command](minimal, good, tmp_path), capsys, "no finite time_us values")


def test_file_names_are_never_glob_patterns(tmp_path, monkeypatch):
    """DuckDB reads `run[1].parquet` as a pattern that matches run1.parquet: each name is passed
    as a descriptor, so each file is read once, as itself."""
    folder = tmp_path / "runs"
    folder.mkdir()
    write(folder / "run1.parquet", make_rows(repetitions=1, run_id="20250101-000000-aaaaaa"))
    write(folder / "run[1].parquet", make_rows(repetitions=2, run_id="20250101-000000-bbbbbb"))
    source = pointtable.open_source([folder])
    assert source.rows == 20 + 40
    got = pointtable.Query(source, "read").run("SELECT run_id, count(*) AS n FROM rows GROUP BY run_id ORDER BY run_id")
    assert got.to_pydict() == {"run_id": ["20250101-000000-aaaaaa", "20250101-000000-bbbbbb"], "n": [20, 40]}


def _live_run(path: Path, batches: int) -> ResultWriter:
    writer = ResultWriter(path)
    writer.create()
    for rep in range(batches):
        writer.append(make_rows(collectives=("all_reduce",), repetitions=1, seed=rep))
    return writer


def test_a_part_of_the_wrong_type_is_refused_by_name(tmp_path, capsys, good):
    writer = _live_run(tmp_path / "live.parquet", 2)
    part = sorted(writer.parts.iterdir())[0]
    table = pq.read_table(part)
    pq.write_table(_with(table, "size_bytes", pa.array(["8"] * table.num_rows)), part)
    line = _refused(COMMANDS["compare"](tmp_path / "live.parquet", good, tmp_path), capsys,
                    part.name, "column size_bytes holds string, expected int64")
    assert line.startswith("commbench: ")


def test_a_part_of_a_wider_type_reads_beside_its_file(tmp_path):
    writer = _live_run(tmp_path / "live.parquet", 2)
    part = sorted(writer.parts.iterdir())[0]
    table = pq.read_table(part)
    pq.write_table(_with(table, "world_size", pa.array([16] * table.num_rows, pa.int64())), part)
    df = read_results([tmp_path / "live.parquet"])
    assert len(df) == 20 and df["world_size"].dtype == np.int32


def test_a_live_run_compacted_while_it_is_read_is_not_damage(tmp_path):
    """The reader lists and opens the file and its parts; the run then ends (compaction writes the
    file anew and removes the parts): what was opened still reads, every row once."""
    writer = _live_run(tmp_path / "live.parquet", 3)
    opened = results.result_files([tmp_path / "live.parquet"])
    assert len(opened) == 3
    source = pointtable.open_source([tmp_path / "live.parquet"])
    writer.close()
    assert not writer.parts.exists()
    assert sum(pq.read_table(f).num_rows for f in opened) == 30
    got = pointtable.Query(source, "live").run("SELECT count(*) AS n FROM rows")
    assert got.column("n")[0].as_py() == 30


def test_a_part_removed_between_listing_and_open_is_listed_again(tmp_path, monkeypatch):
    writer = _live_run(tmp_path / "live.parquet", 3)
    real = results._live_parts
    calls = []

    def then_compacted(f):
        found = real(f)
        if not calls:
            writer.close()  # the run ends after the listing, before the parts are opened
        calls.append(found)
        return found

    monkeypatch.setattr(results, "_live_parts", then_compacted)
    df = read_results([tmp_path / "live.parquet"])
    assert len(df) == 30 and len(calls) == 2 and calls[1] == []


def test_out_of_memory_is_said_as_such(tmp_path, monkeypatch):
    write(tmp_path / "a.parquet", make_rows(repetitions=1))

    def no_memory(*a, **k):
        raise pa.ArrowMemoryError("malloc of size 4096 failed")

    monkeypatch.setattr(results.pq, "read_table", no_memory)
    with pytest.raises(RuntimeFailure, match=r"out of memory while reading .*a\.parquet: read fewer files"):
        read_results([tmp_path / "a.parquet"])


def test_a_hostile_file_name_is_printed_inert(tmp_path, capsys, good):
    bad = tmp_path / "evil\x1b[2J.parquet"
    pq.write_table(_with(_table(), "size_bytes", pa.array(["x"] * n)), bad)
    line = _refused(COMMANDS["compare"](bad, good, tmp_path), capsys, "evil?[2J.parquet")
    assert "\x1b" not in line


def test_readable_as_accepts_what_means_the_same():
    assert filecheck.readable_as(pa.null(), pa.int32())
    assert filecheck.readable_as(pa.dictionary(pa.int32(), pa.string()), pa.string())
    assert filecheck.readable_as(pa.large_list(pa.float32()), pa.list_(pa.float64()))
    assert filecheck.readable_as(pa.timestamp("ns"), pa.timestamp("us", tz="UTC"))
    assert filecheck.readable_as(pa.float64(), pa.int64())  # pandas: an integer column with a null
    assert not filecheck.readable_as(pa.float64(), pa.bool_())
    assert not filecheck.readable_as(pa.list_(pa.string()), pa.list_(pa.float64()))
    assert not filecheck.readable_as(pa.binary(), pa.string())


def test_a_file_round_tripped_through_pandas_reads(tmp_path):
    """pandas writes an integer column holding a null as float64: whole values read as the integers
    they were, a fraction where an integer belongs is refused."""
    import pandas as pd

    path = write(tmp_path / "run.parquet", make_rows(repetitions=1))
    frame = pd.read_parquet(path)
    frame.to_parquet(tmp_path / "edited.parquet")
    assert pq.read_schema(tmp_path / "edited.parquet").field("bucket_bytes").type == pa.float64()
    df = read_results([tmp_path / "edited.parquet"])
    assert len(df) == 20 and df["bucket_bytes"].isna().all() and list(df["size_bytes"][:2]) == [8, 8]
    frame["zero_stage"] = 1.5
    frame.to_parquet(tmp_path / "fraction.parquet")
    with pytest.raises(BadInput, match=r"fraction\.parquet: column zero_stage holds a value that is not a int32"):
        read_results([tmp_path / "fraction.parquet"])
