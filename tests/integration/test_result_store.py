"""The result store under stress: runs side by side into one folder, a writer killed with -9 while
it writes, and a disk that fills up mid-run (a small tmpfs: root only).

The single-writer promises (an existing file is never overwritten; Ctrl-C, SIGTERM and a dead rank
keep every finished point) are in test_sweep_ranks.py and tests/test_cli_bad_input.py.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commbench.core.results import read_results
from test_sweep_ranks import assert_no_processes_left, clean_env, kill_quietly, stderr_lines

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- four runs at once


@pytest.mark.failure(
    row="4-runs-once-into-results",
    section="The result store",
    failure="4 runs at once into one results folder",
    does="each run writes `<run_id>.parquet` (time + 24 random bits) and links it into place, which fails rather "
         "than replace a file: 4 distinct files, each with exactly its own rows",
)
def test_four_runs_at_once_into_one_folder_never_clobber_each_other(tmp_path):
    out = tmp_path / "results"
    procs = [subprocess.Popen([sys.executable, "-m", "commbench", "sweep", "--sizes", "1K", "-n", "3", "-w", "1",
                               "--nproc", "2", "--label", f"run{i}", "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
                              start_new_session=True)
             for i in range(4)]
    try:
        results = [p.communicate(timeout=150) for p in procs]
    finally:
        for p in procs:
            kill_quietly(p)
    for p, (_, se) in zip(procs, results):
        assert p.returncode == 0, se
    files = sorted(out.iterdir())
    assert len(files) == 4 and all(f.suffix == ".parquet" for f in files), files  # no temporaries left
    labels = set()
    for f in files:
        df = pd.read_parquet(f)
        assert len(df) == 1, (f, len(df))  # its own row, and nobody else's
        assert df.run_id.iloc[0] == f.stem and df.iters.iloc[0] == 3 and df.wrong.iloc[0] == 0
        labels.add(df.label.iloc[0])
    assert labels == {f"run{i}" for i in range(4)}
    # each run said where its file is, and it is that run's file
    for i, (so, _) in enumerate(results):
        m = re.search(r"# Results: (\S+) \(1 rows\)", so)
        assert m, so
        assert pd.read_parquet(m.group(1)).label.iloc[0] == f"run{i}"
    assert len(read_results([out])) == 4


# ---------------------------------------------------------------- kill -9 while writing

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from commbench.core.results import ResultWriter

    writer = ResultWriter(sys.argv[1])
    writer.create()
    print("ready", flush=True)
    rng = np.random.default_rng()
    i = 0
    while True:  # ever larger rewrites: the whole table after every point, as a run does
        i += 1
        writer.append([{"run_id": "r", "collective": "all_reduce", "size_bytes": i, "busbw_GBps": 1.0,
                        "schema_version": 1, "samples_us": rng.random(20000).tolist()}])
""")


@pytest.mark.failure(
    row="crash-while-writing-kill-9",
    section="The result store",
    failure="a crash while writing (`kill -9` of the writer in the middle of a write)",
    does="every write (the first batch into the file, each later batch as a part) goes to a hidden temporary beside "
         "the file and is renamed into place complete, so the file and its parts always read, with every point "
         "finished before the kill, in order; the killed writer's hidden `.NAME.*.tmp` stays beside it and readers "
         "ignore it, as they ignore half-written part temporaries and foreign files in `NAME.parts/`",
)
def test_kill_9_while_writing_never_leaves_an_unreadable_file(tmp_path):
    rng = random.Random(8)
    mid_write = 0
    total = 0
    kills = 0
    # Six kills at random moments, more (up to 14) until three of them landed mid-rewrite: where a
    # kill lands is timing, and the test is about the mid-rewrite case, so it must see it three times.
    for k in range(14):
        if k >= 6 and mid_write >= 3:
            break
        kills += 1
        target = tmp_path / f"w{k}.parquet"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True,
                                cwd=ROOT)
        try:
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.2, 1.2))
            proc.kill()  # SIGKILL: no handler, no cleanup
            proc.wait(10)
        finally:
            kill_quietly(proc)
        temporaries = [p for p in tmp_path.iterdir() if p.name.startswith(f".{target.name}.")]
        mid_write += bool(temporaries)  # the kill came while a rewrite was under way
        df = read_results([target])  # always a complete parquet file with the full schema
        assert list(df.size_bytes) == list(range(1, len(df) + 1))  # every finished point, in order
        assert all(len(s) == 20000 for s in df.samples_us)
        total += len(df)
    print(f"kills mid-write: {mid_write}/{kills}, rows {total}")
    assert mid_write >= 3, f"only {mid_write} of {kills} kills landed in the middle of a rewrite"
    # A killed writer's temporary stays beside the file, hidden: reading the folder ignores it.
    assert len(read_results([tmp_path])) == total


# ---------------------------------------------------------------- a full disk (root: tmpfs)


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs with about 160 KiB left free; unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        st = os.statvfs(disk)
        free = st.f_bavail * st.f_frsize
        (disk / "filler").write_bytes(b"\0" * (free - 160 * 1024))
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.failure(
    row="disk-fills-up-mid-run",
    section="The result store",
    failure="the disk fills up mid-run (2 MiB tmpfs)",
    does="exit 3 (a runtime failure: the input was fine), one line `cannot write results to FILE: No space left on "
         "device`; the file and its parts keep the rows written before, and `N finished rows kept` counts exactly "
         "those; a compaction that finds no room (it needs as much again) leaves the parts as they are and says so "
         "in a warning (`not compacted into one file: no space left on device`); every reader reads them; no `.tmp` "
         "left",
)
def test_a_full_disk_fails_clearly_and_keeps_what_was_written(small_disk, tmp_path):
    sizes = ",".join(f"{k}K" for k in range(1, 41))  # 40 points of 1000 samples each: ~10 KiB a row
    stdout, stderr = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(stdout, "w") as so, open(stderr, "w") as se:
        proc = subprocess.Popen([sys.executable, "-m", "commbench", "sweep", "--sizes", sizes, "-n", "1000", "-w", "1",
                                 "--nproc", "2", "--timeout", "30", "--out", str(small_disk)],
                                stdout=so, stderr=se, env=clean_env(), start_new_session=True)
    try:
        code = proc.wait(150)
    finally:
        kill_quietly(proc)
    err = stderr.read_text()
    assert code == 3, err  # a runtime failure (docs/ARCHITECTURE.md, exit codes): what was measured is kept
    assert "Traceback" not in err
    lines = stderr_lines(err)
    assert all(line.startswith("commbench: ") for line in lines), err
    full = [line for line in lines if "No space left on device" in line]
    assert len(full) == 1 and full[0].startswith("commbench: cannot write results to "), err
    results = [p for p in small_disk.iterdir() if p.suffix == ".parquet"]
    assert len(results) == 1
    assert str(results[0]) in full[0]  # the line names the file
    df = read_results([results[0]])  # the file that was there still reads, with its parts
    m = re.search(rf"commbench: (\d+) finished rows kept in {re.escape(str(results[0]))}$", err, re.MULTILINE)
    assert m and int(m.group(1)) == len(df) >= 1, err  # and holds exactly the rows it says it kept
    assert 1 <= len(df) < 40 and (df.wrong == 0).all()
    parts = small_disk / f"{results[0].name}.parts"
    if parts.exists():  # no room to compact them into one file (it needs as much room again): said, and kept
        assert [line for line in lines if "not compacted into one file: no space left on device" in line], err
        assert pq.read_table(results[0]).num_rows + sum(pq.read_table(p).num_rows for p in parts.iterdir()) == len(df)
        assert all(p.name.startswith("part-") and p.suffix == ".parquet" for p in parts.iterdir())  # no .tmp left
    else:
        assert pq.read_table(results[0]).num_rows == len(df)
    left = sorted(p.name for p in small_disk.iterdir() if p != parts)
    assert left == sorted(["filler", results[0].name])  # no .tmp left
    assert_no_processes_left(proc.pid)


# ---------------------------------------------------------------- the append-only store (issue #18)


def store_row(i: int, **over) -> dict:
    row = {"run_id": "20261201-000000-abcdef", "label": "parts", "collective": "all_reduce", "size_bytes": 8 * (i + 1),
           "count": 2 * (i + 1), "busbw_GBps": float(i), "schema_version": 1, "repetition": 0,
           "samples_us": [float(i), i + 0.5], "hosts": ["h1", "h2"], "env": '{"NCCL_ALGO": "Ring"}',
           "net": '{"h1": {"mtu": 9000}}', "plan": "{}", "wrong": None if i % 3 == 2 else 0}
    row.update(over)
    return row


@pytest.mark.failure(row="every-finished-point-disk-constant")
def test_parts_read_back_before_compaction_and_compaction_holds_exactly_the_rows(tmp_path):
    from commbench.core.results import SCHEMA, ResultWriter, result_files

    path = tmp_path / "run.parquet"
    writer = ResultWriter(path)
    writer.create()
    batches = [[store_row(0), store_row(1)], [store_row(2)], [store_row(3), store_row(4, hosts=None, env=None)],
               [store_row(5)]]
    for batch in batches:
        writer.append(batch)
    # the first batch replaced the empty file; every later one is a part of its own
    assert pq.read_table(path).num_rows == 2
    parts = sorted(p.name for p in (tmp_path / "run.parquet.parts").iterdir())
    assert parts == ["part-00000001.parquet", "part-00000002.parquet", "part-00000003.parquet"]
    assert result_files([path]) == [path, *[tmp_path / "run.parquet.parts" / p for p in parts]]
    assert result_files([tmp_path]) == result_files([path]) == result_files([tmp_path / "run.parquet.parts"])
    before = read_results([path])
    assert before.size_bytes.tolist() == [8, 16, 24, 32, 40, 48]  # in the order they were appended
    assert read_results([tmp_path]).equals(before)
    assert before.hosts.iloc[4] is None and pd.isna(before.env.iloc[4])
    assert before.env.iloc[0] is before.env.iloc[5]  # one string a distinct value, across the parts too
    assert writer.close() is None and writer.close() is None  # twice: nothing left to do the second time
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.parquet"]
    table = pq.read_table(path)
    assert table.schema.metadata[b"commbench.parts"] == b"3"  # the last part it holds
    assert table.schema.remove_metadata().equals(SCHEMA)
    want = pa.Table.from_pylist([r for b in batches for r in b], schema=SCHEMA).to_pylist()
    assert table.to_pylist() == want and [r["size_bytes"] for r in writer.rows] == [8, 16, 24, 32, 40, 48]
    assert read_results([path]).equals(before)


@pytest.mark.failure(row="every-finished-point-disk-constant")
def test_a_compaction_killed_before_its_cleanup_reads_every_row_once(tmp_path):
    from commbench.core.results import ResultWriter

    path = tmp_path / "run.parquet"
    writer = ResultWriter(path)
    writer.create()
    for i in range(4):
        writer.append([store_row(i)])
    kept = {p.name: p.read_bytes() for p in writer.parts.iterdir()}
    writer.close()
    writer.parts.mkdir()  # what a kill -9 between the compacted file's rename and the parts' removal leaves
    for name, data in kept.items():
        (writer.parts / name).write_bytes(data)
    assert read_results([path]).size_bytes.tolist() == [8, 16, 24, 32]
    writer.append([store_row(4)])  # a part after the compaction counts again
    assert read_results([path]).size_bytes.tolist() == [8, 16, 24, 32, 40]


@pytest.mark.failure(row="crash-while-writing-kill-9")
def test_stray_temporaries_and_foreign_files_beside_the_parts_are_ignored(tmp_path):
    from commbench.core.results import ResultWriter, result_files

    path = tmp_path / "run.parquet"
    writer = ResultWriter(path)
    writer.create()
    writer.append([store_row(0)])
    writer.append([store_row(1)])
    whole = (writer.parts / "part-00000001.parquet").read_bytes()
    # half-written temporaries of a writer killed mid-write, beside the file and in the parts folder
    (tmp_path / ".run.parquet.k3j9x0.tmp").write_bytes(whole[: len(whole) // 2])
    (writer.parts / ".part-00000002.parquet.tmp").write_bytes(whole[:100])
    (writer.parts / "part-00000002.parquet.tmp").write_bytes(b"PAR1")
    (writer.parts / "notes.txt").write_text("not a part")
    assert len(result_files([tmp_path])) == 2
    assert read_results([tmp_path]).size_bytes.tolist() == [8, 16]
    assert writer.close() is None
    assert read_results([path]).size_bytes.tolist() == [8, 16]
    # the parts are gone; what was not ours stays, and the folder with it
    assert sorted(p.name for p in writer.parts.iterdir()) == [".part-00000002.parquet.tmp", "notes.txt",
                                                               "part-00000002.parquet.tmp"]


@pytest.mark.failure(row="two-runs-naming-same-file")
def test_another_run_s_parts_folder_is_never_mixed_with(tmp_path):
    from commbench.core.errors import BadInput
    from commbench.core.results import ResultWriter

    path = tmp_path / "run.parquet"
    (tmp_path / "run.parquet.parts").mkdir()
    with pytest.raises(BadInput, match=r"run\.parquet\.parts already exists \(the parts of another run\)"):
        ResultWriter(path).create()
    assert not path.exists()


CAPPED_WRITER = textwrap.dedent("""
    import resource, signal, sys
    import numpy as np
    from commbench.core.results import ResultWriter

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # a part fits, all of them in one file not
    writer = ResultWriter(sys.argv[1])
    writer.create()
    rng = np.random.default_rng(3)
    for i in range(3):
        writer.append([{"run_id": "r", "collective": "all_reduce", "size_bytes": i + 1, "busbw_GBps": 1.0,
                        "schema_version": 1, "samples_us": rng.random(5000).tolist()}])
    print(writer.close())
    print(writer.close())
""")


@pytest.mark.failure(row="disk-fills-up-mid-run")
def test_a_compaction_that_cannot_write_keeps_the_parts_readable(tmp_path):
    path = tmp_path / "run.parquet"
    proc = subprocess.run([sys.executable, "-c", CAPPED_WRITER, str(path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first == second  # tried again, failed again, the same way
    assert f"the rows stay in {path} and 2 parts in {path}.parts (not compacted into one file: file too large); " \
           "commbench reads them as they are" == first
    assert read_results([path]).size_bytes.tolist() == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.parquet", "run.parquet.parts"]  # no .tmp left


# ---------------------------------------------------------------- a real sweep killed with -9 mid-run

KILLED_SWEEP = ["sweep", "--collective", "all_reduce", "--sizes", ",".join(f"{k}K" for k in range(1, 201)),
                "--iters", "20", "--warmup", "1", "--nproc", "2", "--no-wire"]


def start_sweep(out: Path, tmp_path: Path, label: str) -> subprocess.Popen:
    err = open(tmp_path / f"{label}.err", "w")
    return subprocess.Popen([sys.executable, "-m", "commbench", *KILLED_SWEEP, "--label", label, "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=err, env=clean_env(), start_new_session=True)


def kill_with_parts(proc: subprocess.Popen, out: Path, parts: int = 4, timeout: float = 90) -> int:
    """kill -9 of the whole run (supervisor and ranks, no handler runs) once `parts` parts exist."""
    deadline = time.monotonic() + timeout
    folder = out.with_name(out.name + ".parts")
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the sweep ended by itself ({proc.returncode}) before it was killed"
            if folder.is_dir() and len([p for p in folder.iterdir() if p.name.startswith("part-")]) >= parts:
                n = len(read_results([out]))
                os.killpg(proc.pid, 9)
                proc.wait(10)
                return n
            time.sleep(0.05)
        raise AssertionError(f"no {parts} parts in {folder} after {timeout} s")
    finally:
        kill_quietly(proc)


@pytest.mark.failure(
    row="run-killed-kill-9-supervisor",
    section="The result store",
    failure="a run killed with `kill -9` (supervisor and ranks) mid-sweep",
    does="no handler runs, so nothing compacts: the file holds the first batch and `NAME.parts/` the rest; "
         "read_results of the file or its folder, compare, report, plot and gate read every finished point",
)
def test_kill_9_of_a_sweep_mid_run_leaves_parts_that_every_command_reads(tmp_path):
    runs = {}
    for label in ("before", "after"):
        out = tmp_path / f"{label}.parquet"
        proc = start_sweep(out, tmp_path, label)
        seen = kill_with_parts(proc, out)
        assert_no_processes_left(proc.pid)
        assert (tmp_path / f"{label}.parquet.parts").is_dir()  # never compacted: nobody was left to do it
        df = read_results([out])
        assert len(df) >= seen >= 5 and len(df) < 400  # every point finished before the kill, and it was cut short
        assert (df.label == label).all() and (df.wrong == 0).all() and df.time_us.notna().all()
        assert df.size_bytes.tolist() == sorted(df.size_bytes.tolist())  # in the order measured
        assert pq.read_table(out).num_rows < len(df)  # the file alone holds only the first batch
        runs[label] = df
    env = clean_env()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True, env=env,
                              timeout=120)

    a, b = str(tmp_path / "before.parquet"), str(tmp_path / "after.parquet")
    compared = run("compare", a, b, "--format", "json", "--out", str(tmp_path / "c.json"))
    assert compared.returncode in (0, 1, 3) and "Traceback" not in compared.stderr, compared.stderr  # 3: inconclusive
    text = (tmp_path / "c.json").read_text()
    common = set(runs["before"].size_bytes) & set(runs["after"].size_bytes)
    assert all(str(s) in text for s in common)
    reported = run("report", b, "--baseline", a, "--out", str(tmp_path / "r.md"))
    assert reported.returncode == 0, reported.stderr
    assert "all_reduce" in (tmp_path / "r.md").read_text()
    plotted = run("plot", str(tmp_path), "--out", str(tmp_path / "p.png"))  # the folder: both files with their parts
    assert plotted.returncode == 0 and (tmp_path / "p.png").stat().st_size > 0, plotted.stderr
    bands = tmp_path / "bands.yaml"
    suggested = run("gate", "--suggest", "--allow-wide", "--min-size", "1K", a, "--out", str(bands))
    assert suggested.returncode == 0, suggested.stderr
    judged = run("gate", b, "--expect", str(bands))
    assert judged.returncode in (0, 1) and "Traceback" not in judged.stderr, judged.stderr
    assert len(read_results([tmp_path])) == len(runs["before"]) + len(runs["after"])


# ---------------------------------------------------------------- two runs naming one file, at once


@pytest.mark.failure(
    row="two-runs-naming-same-file",
    section="The result store",
    failure="two runs naming the same file at once",
    does="create() links the file into place, which only one can do: the other exits 2 (`already exists ... never "
         "overwrites`) before it measures, and the file holds the winner's rows only; a `NAME.parts` folder left by "
         "another run is refused too",
)
def test_two_runs_naming_the_same_file_at_once_one_is_refused(tmp_path):
    out = tmp_path / "same.parquet"
    args = ["sweep", "--collective", "all_reduce", "--sizes", "1K,2K,4K,8K,16K,32K", "-n", "20", "-w", "1",
            "--nproc", "2", "--no-wire", "--out", str(out)]
    procs = [subprocess.Popen([sys.executable, "-m", "commbench", *args, "--label", f"run{i}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=clean_env(), start_new_session=True)
             for i in range(2)]
    try:
        results = [p.communicate(timeout=150) for p in procs]
    finally:
        for p in procs:
            kill_quietly(p)
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], results
    winner = next(i for i, p in enumerate(procs) if p.returncode == 0)
    loser_err = results[1 - winner][1]
    assert "already exists" in loser_err and "never overwrites" in loser_err and "Traceback" not in loser_err
    df = pd.read_parquet(out)  # compacted: one file, the winner's rows only
    assert len(df) == 6 and (df.label == f"run{winner}").all()  # its 6 points, nobody else's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.parquet"]


@pytest.mark.failure(row="every-finished-point-disk-constant")
def test_every_thousand_parts_are_merged_into_one_and_read_in_order(tmp_path):
    from commbench.core.results import ResultWriter, result_files

    path = tmp_path / "run.parquet"
    writer = ResultWriter(path)
    writer.create()
    for i in range(1003):  # the file itself, then parts 1..1002: 1..1000 merged into one
        writer.append([store_row(i, samples_us=None, hosts=None)])
    # what is read: the merged part and the two since (the singles it holds go in the background)
    names = ["part-00000001-00001000.parquet", "part-00001001.parquet", "part-00001002.parquet"]
    assert result_files([path])[1:] == [writer.parts / n for n in names]
    want = [8 * (i + 1) for i in range(1003)]
    assert read_results([path]).size_bytes.tolist() == want
    # a merge killed before its cleanup leaves single parts that the merged one holds: not read twice
    (writer.parts / "part-00000007.parquet").write_bytes((writer.parts / "part-00001001.parquet").read_bytes())
    assert read_results([path]).size_bytes.tolist() == want
    assert writer.close() is None and not writer.parts.exists()
    assert read_results([path]).size_bytes.tolist() == want
