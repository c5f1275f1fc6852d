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
import pyarrow.parquet as pq
import pytest

from commbench.core.results import read_results
from test_sweep_ranks import assert_no_processes_left, clean_env, kill_quietly, stderr_lines

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- four runs at once


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
    for p, (so, se) in zip(procs, results):
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


def test_kill_9_while_writing_never_leaves_an_unreadable_file(tmp_path):
    rng = random.Random(8)
    mid_write = 0
    total = 0
    for k in range(6):
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
    print(f"kills mid-write: {mid_write}/6, rows {total}")
    assert mid_write >= 3, "the kills should mostly land in the middle of a rewrite"
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
    df = pd.read_parquet(results[0])  # the file that was there still reads
    m = re.search(rf"commbench: (\d+) finished rows kept in {re.escape(str(results[0]))}$", err, re.MULTILINE)
    assert m and int(m.group(1)) == len(df) >= 1, err  # and holds exactly the rows it says it kept
    assert 1 <= len(df) < 40 and (df.wrong == 0).all()
    assert pq.read_table(results[0]).num_rows == len(df)
    assert sorted(p.name for p in small_disk.iterdir()) == sorted(["filler", results[0].name])  # no .tmp left
    assert_no_processes_left(proc.pid)
