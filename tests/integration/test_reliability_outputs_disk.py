"""Output files on a really full disk (a small tmpfs: root only), through `python -m commbench`:
every output kind (compare --out / --plot, gate --out / --suggest --out, plot, report html and
markdown) exits 3 with one line `cannot write FILE: No space left on device`, leaves nothing on
the disk (no temporary, no partial file, no lone figure: a group whose first file fit is taken
back), and the same command works once there is room. The writer is commbench/core/outputs.py;
the injected failures (EIO, Ctrl-C, SIGTERM, races) are in unit/test_reliability_outputs.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from unit.synthetic import make_rows, write  # noqa: E402  (the rows go through the real ResultWriter)

PAGE = 4096
# Each output kind: its command line ({a}, {b}, {bands}: inputs outside the disk; {d}: the disk)
# and the files it writes, in the order the writer takes them.
KINDS = {
    "compare-table": (["compare", "{a}", "{b}", "--out", "{d}/c.txt"], ["c.txt"]),
    "compare-json": (["compare", "{a}", "{b}", "--format", "json", "--out", "{d}/c.json"], ["c.json"]),
    "compare-plot": (["compare", "{a}", "{b}", "--plot", "{d}/c.png"], ["c.png"]),
    "compare-out-and-plot": (["compare", "{a}", "{b}", "--wide", "--out", "{d}/c.txt", "--plot", "{d}/c.svg"],
                             ["c.svg", "c.txt"]),
    "gate-report": (["gate", "{b}", "--expect", "{bands}", "--out", "{d}/g.txt"], ["g.txt"]),
    "gate-suggest": (["gate", "--suggest", "--allow-wide", "{a}", "--out", "{d}/new.yaml"], ["new.yaml"]),
    "plot-png": (["plot", "{a}", "--out", "{d}/p.png"], ["p.png"]),
    "plot-svg": (["plot", "{a}", "--out", "{d}/p.svg"], ["p.svg"]),
    "report-html": (["report", "{a}", "--baseline", "{b}", "--out", "{d}/r.html"], ["r.html"]),
    "report-markdown": (["report", "{a}", "--baseline", "{b}", "--out", "{d}/r.md"],
                        ["r.md", "r.png", "r-comparison.png"]),
}


def commbench(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("inputs")
    a = write(base / "a.parquet", make_rows(repetitions=7))
    b = write(base / "b.parquet", make_rows(repetitions=7, label="after", run_id="20250102-000000-bbbbbb",
                                            speed_gbps=300.0))
    bands = base / "bands.yaml"
    made = commbench(["gate", "--suggest", "--allow-wide", str(a), "--out", str(bands)])
    assert made.returncode == 0, made.stderr
    return {"a": a, "b": b, "bands": bands}


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs; unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave: int) -> None:
    st = os.statvfs(disk)
    (disk / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize - leave))
    st = os.statvfs(disk)
    assert st.f_bavail * st.f_frsize == leave


def pages(n: int) -> int:
    return -(-n // PAGE) * PAGE


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.failure(
    row="disk-fills-up-while-writing",
    section="Output files (reports, figures, comparison text, bands)",
    failure="the disk fills up while writing (every output kind; a real 4 MiB tmpfs, root only), also when the "
            "first file of a group fit and the next did not",
    does="exit 3, one line `cannot write FILE: No space left on device`; nothing is left on the disk (no temporary, "
         "no partial file, no lone `.md` or PNG); the same command works once there is room",
)
def test_a_full_disk_is_exit_3_one_line_nothing_left_and_a_rerun_works(kind, inputs, small_disk, tmp_path):
    template, files = KINDS[kind]
    args = lambda d: [a.format(d=d, **inputs) for a in template]  # noqa: E731
    if len(files) > 1:  # room for the first file of the group only: it is written, then taken back
        measured = tmp_path / "measured"
        measured.mkdir()
        assert commbench(args(measured)).returncode in (0, 1)
        sizes = [(measured / f).stat().st_size for f in files]
        assert sizes[1] > PAGE, sizes
        fill(small_disk, pages(sizes[0]))
        failing = files[1]
    else:
        fill(small_disk, 0)
        failing = files[0]
    proc = commbench(args(small_disk))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if not ln.startswith(("commbench: warning:", "commbench: note:"))]
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    assert errors == [f"commbench: cannot write {small_disk / failing}: No space left on device"], proc.stderr
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no temporary, no partial, no lone file
    (small_disk / "filler").unlink()
    again = commbench(args(small_disk))
    assert again.returncode in (0, 1) and "cannot write" not in again.stderr, again.stderr
    assert sorted(p.name for p in small_disk.iterdir()) == sorted(files)
