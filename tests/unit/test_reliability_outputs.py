"""Every output a command writes goes through the one writer (commbench/core/outputs.py): an existing
file is refused and untouched, an output that is an input is refused (--force or not), a failed
write (ENOSPC, EIO, Ctrl-C, SIGTERM) leaves nothing behind (no temporary, no partial file, no
lone figure), and a rerun after the failure works. Every output kind: compare --out (table,
markdown, json) and --plot, gate --out and --suggest --out, plot (png, svg, a figure per view),
report (html, markdown with its figures). Failures are injected in-process on the exact file
that should fail, with the figures built but not drawn (conftest.py's `undrawn`: these tests are about
the writer; test_force_replaces_an_existing_report_or_figure draws them); the real full disk is in
integration/test_reliability_outputs_disk.py."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import pytest

from commbench.analysis.gate.bandsuggest import suggest
from commbench.cli.app import main
from commbench.core import outputs
from commbench.core.errors import BadInput
from commbench.core.results import read_results
from commbench.core.signals import Terminated

from unit.synthetic import make_rows, write
from unit.test_zerogrid import zero_rows

ROOT = Path(__file__).resolve().parents[2]

# Each output kind: the command line ({a}, {b}, {m}, {bands} are inputs, {d} the output folder)
# and every file it writes there, in the order the writer takes them.
KINDS = {
    "compare-table": (["compare", "{a}", "{b}", "--out", "{d}/c.txt"], ["c.txt"]),
    "compare-markdown": (["compare", "{a}", "{b}", "--format", "markdown", "--out", "{d}/c.md"], ["c.md"]),
    "compare-json": (["compare", "{a}", "{b}", "--format", "json", "--out", "{d}/c.json"], ["c.json"]),
    "compare-plot": (["compare", "{a}", "{b}", "--plot", "{d}/c.png"], ["c.png"]),
    "compare-out-and-plot": (["compare", "{a}", "{b}", "--out", "{d}/c.txt", "--plot", "{d}/c.svg"],
                             ["c.svg", "c.txt"]),
    "gate-report": (["gate", "{b}", "--expect", "{bands}", "--format", "markdown", "--out", "{d}/g.md"], ["g.md"]),
    "gate-suggest": (["gate", "--suggest", "--allow-wide", "{a}", "--out", "{d}/new.yaml"], ["new.yaml"]),
    "plot-png": (["plot", "{a}", "--out", "{d}/p.png"], ["p.png"]),
    "plot-svg": (["plot", "{a}", "--out", "{d}/p.svg"], ["p.svg"]),
    "plot-views": (["plot", "{m}", "--out", "{d}/p.png"], ["p.png", "p-zero.png"]),
    "report-html": (["report", "{a}", "--baseline", "{b}", "--out", "{d}/r.html"], ["r.html"]),
    "report-markdown": (["report", "{m}", "--out", "{d}/r.md"], ["r.md", "r.png", "r-zero.png"]),
    "report-markdown-baseline": (["report", "{a}", "--baseline", "{b}", "--out", "{d}/r.md"],
                                 ["r.md", "r.png", "r-comparison.png"]),
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("inputs")
    a = write(base / "a.parquet", make_rows(repetitions=7))
    b = write(base / "b.parquet", make_rows(repetitions=7, label="after", run_id="20250102-000000-bbbbbb",
                                            speed_gbps=300.0))
    m = write(base / "m.parquet", make_rows(repetitions=1) + zero_rows())
    bands = base / "bands.yaml"
    bands.write_text(suggest(read_results([a]), sources=[str(a)], allow_wide=True).text)  # outputs, not bands
    return {"a": a, "b": b, "m": m, "bands": bands}


def argv(kind: str, inputs: dict[str, Path], d: Path) -> list[str]:
    return [arg.format(d=d, **inputs) for arg in KINDS[kind][0]]


def run(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


def the_error(err: str) -> str:
    """The one error line (warnings and notes a command printed before writing aside)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert all(ln.startswith("commbench: ") for ln in lines), err
    errors = [ln for ln in lines if not ln.startswith(("commbench: warning:", "commbench: note:"))]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def fail_on(monkeypatch, target: Path, error=None) -> None:
    """os.fsync of the temporary of `target` (and only that file) fails with `error`: ENOSPC, or
    an exception instance to raise (KeyboardInterrupt)."""
    real = os.fsync

    def fsync(fd):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(f".{target.name}.") and name.endswith(".tmp"):
            if isinstance(error, BaseException):
                raise error
            code = errno.ENOSPC if error is None else error
            raise OSError(code, os.strerror(code))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


# ---------------------------------------------------------------- existing files and inputs


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.failure(
    row="output-already-exists-every-output",
    section="Output files (reports, figures, comparison text, bands)",
    failure="the output already exists (every output kind, including the last file of a group such as `r-zero.png` "
            "of `report r.md`)",
    does="refused before anything is read or drawn, exit 2, one line `FILE already exists: CMD never overwrites a "
         "file; pass --force to replace it, or another --out`; the file is untouched (bytes and mtime), and no "
         "other file of the group and no temporary is left",
)
def test_an_existing_output_is_refused_and_untouched(kind, inputs, tmp_path, capsys):
    files = KINDS[kind][1]
    taken = tmp_path / files[-1]  # the last of a group: nothing of the group may be written first
    taken.write_bytes(b"mine\n")
    mtime = taken.stat().st_mtime_ns
    code, _, err = run(argv(kind, inputs, tmp_path), capsys)
    line = the_error(err)
    assert code == 2 and f"{taken} already exists" in line and "never overwrites" in line, err
    assert taken.read_bytes() == b"mine\n" and taken.stat().st_mtime_ns == mtime
    assert listing(tmp_path) == [taken.name]  # no other file of the group, no temporary


@pytest.mark.parametrize("args, links, needle", [
    (["gate", "{b}", "--expect", "{bands}", "--out", "{bands}"], {}, "{bands} already exists and is an input"),
    (["gate", "{b}", "--expect", "{bands}", "--out", "{bands}", "--force"], {},
     "{bands} already exists and is an input"),
    (["gate", "{b}", "--expect", "{bands}", "--out", "{d}/hard.yaml", "--force"], {"hard.yaml": ("hard", "bands")},
     "{d}/hard.yaml already exists and is an input"),
    (["gate", "{b}", "--expect", "{bands}", "--out", "{d}/soft.yaml", "--force"], {"soft.yaml": ("soft", "bands")},
     "{d}/soft.yaml already exists and is an input"),
    (["gate", "--suggest", "--allow-wide", "{a}", "--out", "{d}/hard.yaml", "--force"], {"hard.yaml": ("hard", "a")},
     "{d}/hard.yaml already exists and is an input"),
    (["compare", "{a}", "{b}", "--plot", "{d}/hard.png", "--force"], {"hard.png": ("hard", "a")},
     "{d}/hard.png already exists and is an input"),
    (["compare", "{a}", "{b}", "--out", "{d}/hard.txt", "--force"], {"hard.txt": ("hard", "b")},
     "{d}/hard.txt already exists and is an input"),
    (["compare", "{a}", "{b}", "--out", "{b}", "--force"], {}, "is a folder or a results file"),
    (["plot", "{a}", "--out", "{d}/hard.png"], {"hard.png": ("hard", "a")},
     "{d}/hard.png already exists and is an input"),
    (["report", "{a}", "--out", "{a}"], {}, "{a} already exists and is an input"),
    (["report", "{a}", "--baseline", "{b}", "--out", "{d}/hard.html"], {"hard.html": ("hard", "b")},
     "{d}/hard.html already exists and is an input"),
], ids=["gate-bands", "gate-bands-force", "gate-hard-link", "gate-symlink", "suggest-hard-link", "compare-plot",
        "compare-out", "compare-out-results", "plot", "report", "report-baseline"])
@pytest.mark.failure(
    row="output-command-s-inputs-gate",
    section="Output files (reports, figures, comparison text, bands)",
    failure="an output that is one of the command's inputs (`gate --expect bands.yaml --out bands.yaml`, `report "
            "run.parquet --out run.parquet`), also as a hard link or a symlink of one (`os.path.samefile`)",
    does="refused with `--force` or without, exit 2, one line `FILE already exists and is an input of CMD: pass "
         "another --out`; every input unchanged",
)
def test_an_output_that_is_an_input_is_refused_even_with_force(args, links, needle, inputs, tmp_path, capsys):
    for name, (how, what) in links.items():
        if how == "hard":
            os.link(inputs[what], tmp_path / name)  # another name of the same file (os.path.samefile)
        else:
            (tmp_path / name).symlink_to(inputs[what])
    before = {k: p.read_bytes() for k, p in inputs.items()}
    code, _, err = run([a.format(d=tmp_path, **inputs) for a in args], capsys)
    line = the_error(err)
    assert code == 2 and needle.format(d=tmp_path, **inputs) in line, err
    assert {k: p.read_bytes() for k, p in inputs.items()} == before
    assert listing(tmp_path) == sorted(links)  # nothing written beside them


@pytest.mark.failure(
    row="compare-out-plot-gate-out",
    section="Output files (reports, figures, comparison text, bands)",
    failure="`compare --out`/`--plot` or `gate --out` onto a file that should be replaced",
    does="only with an explicit `--force`, which renames a complete temporary over it (a reader never sees half a "
         "file); `--force` never replaces a FIFO, a device or a folder",
)
def test_force_replaces_an_existing_report_or_figure(inputs, tmp_path, capsys, undrawn):
    for name in ("c.txt", "c.png", "g.txt"):
        (tmp_path / name).write_text("old\n")
    code, out, err = run(["compare", str(inputs["a"]), str(inputs["b"]), "--out", str(tmp_path / "c.txt"),
                          "--plot", str(tmp_path / "c.png"), "--force"], capsys)
    assert code in (0, 1) and "report written to" in out, err
    assert (tmp_path / "c.txt").read_text() != "old\n"
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    code, _, err = run(["gate", str(inputs["b"]), "--expect", str(inputs["bands"]), "--out", str(tmp_path / "g.txt"),
                        "--force"], capsys)
    assert code in (0, 1) and (tmp_path / "g.txt").read_text().startswith("bands: "), err
    assert listing(tmp_path) == ["c.png", "c.txt", "g.txt"]


@pytest.mark.failure(row="compare-out-plot-gate-out")
def test_force_never_replaces_what_is_not_a_regular_file(inputs, tmp_path, capsys):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    code, _, err = run(["compare", str(inputs["a"]), str(inputs["b"]), "--out", str(fifo), "--force"], capsys)
    assert code == 2 and f"--out {fifo} is not a regular file" in the_error(err)
    assert listing(tmp_path) == ["pipe.txt"] and fifo.is_fifo()


@pytest.mark.failure(
    row="compare-out-x-plot-x",
    section="Output files (reports, figures, comparison text, bands)",
    failure="`compare --out X --plot X`",
    does="refused before reading, exit 2",
)
def test_out_and_plot_naming_one_file_is_refused_before_reading(inputs, tmp_path, capsys):
    code, _, err = run(["compare", str(inputs["a"]), str(inputs["b"]), "--out", str(tmp_path / "x.svg"),
                        "--plot", str(tmp_path / "x.svg")], capsys)
    assert code == 2 and "--out and --plot both name" in the_error(err)
    assert listing(tmp_path) == []


@pytest.mark.failure(
    row="output-path-under-regular-file",
    section="Output files (reports, figures, comparison text, bands)",
    failure="an output path under a regular file, or in a folder it may not write to",
    does="exit 2, one line naming the path and `pass another --out`",
)
def test_a_folder_under_a_file_is_refused(inputs, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("keep\n")
    code, _, err = run(["plot", str(inputs["a"]), "--out", str(tmp_path / "notes.txt" / "p.png")], capsys)
    assert code == 2 and "notes.txt is a file, not a folder" in the_error(err)
    assert (tmp_path / "notes.txt").read_text() == "keep\n" and listing(tmp_path) == ["notes.txt"]


# ---------------------------------------------------------------- failed writes


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.failure(row="disk-fills-up-while-writing")
def test_a_full_disk_leaves_nothing_and_a_rerun_works(kind, inputs, tmp_path, capsys, monkeypatch, undrawn):
    files = KINDS[kind][1]
    failing = tmp_path / files[-1]  # the others of a group are complete temporaries by then
    with monkeypatch.context() as m:
        fail_on(m, failing)
        code, _, err = run(argv(kind, inputs, tmp_path), capsys)
    assert code == 3 and the_error(err) == f"commbench: cannot write {failing}: No space left on device", err
    assert listing(tmp_path) == []  # no temporary, no partial file, no lone figure
    code, _, err = run(argv(kind, inputs, tmp_path), capsys)
    assert code in (0, 1) and "cannot write" not in err, err
    assert listing(tmp_path) == sorted(files)


@pytest.mark.parametrize("kind", ["report-markdown", "plot-views", "compare-out-and-plot"])
@pytest.mark.failure(
    row="link-into-place-fails-after",
    section="Output files (reports, figures, comparison text, bands)",
    failure="a link into place fails after others of the group were placed (EIO)",
    does="the placed files are taken back: exit 3, one line, nothing left",
)
def test_a_group_whose_last_link_fails_takes_back_the_files_already_placed(kind, inputs, tmp_path, capsys,
                                                                         monkeypatch, undrawn):
    last = tmp_path / KINDS[kind][1][-1]
    real = os.link

    def link(src, dst, *a, **kw):
        if Path(dst) == last:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(src, dst, *a, **kw)

    with monkeypatch.context() as m:
        m.setattr(os, "link", link)
        code, _, err = run(argv(kind, inputs, tmp_path), capsys)
    assert code == 3 and the_error(err) == f"commbench: cannot write {last}: Input/output error", err
    assert listing(tmp_path) == []


@pytest.mark.failure(
    row="ctrl-c-sigterm-while-writing",
    section="Output files (reports, figures, comparison text, bands)",
    failure="Ctrl-C or SIGTERM while writing",
    does="the temporaries and any files already placed are removed; Ctrl-C exits 130; SIGTERM ends the command as "
         "SIGTERM does (143), or comes back as `Terminated` to a caller with a handler of its own",
)
def test_ctrl_c_while_writing_leaves_nothing(inputs, tmp_path, capsys, monkeypatch, undrawn):
    with monkeypatch.context() as m:
        fail_on(m, tmp_path / "r-zero.png", KeyboardInterrupt())
        code, _, _ = run(argv("report-markdown", inputs, tmp_path), capsys)
    assert code == 130 and listing(tmp_path) == []


@pytest.mark.failure(row="ctrl-c-sigterm-while-writing")
def test_sigterm_while_writing_leaves_nothing_and_is_handed_on(tmp_path, monkeypatch):
    """With a handler of the caller's own, SIGTERM comes back as Terminated after the cleanup."""
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        real = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (os.kill(os.getpid(), signal.SIGTERM), real(fd)))
        group = [outputs.Output(tmp_path / "r.md", b"# r\n"), outputs.Output(tmp_path / "r.png", b"png")]
        with pytest.raises(Terminated):
            outputs.write_files(group, "report")
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert listing(tmp_path) == []


@pytest.mark.failure(
    row="folders-made-output-out-new",
    section="Output files (reports, figures, comparison text, bands)",
    failure="folders made for an output (`--out new/sub/r.md`) when the write then fails",
    does="removed again; a rerun makes them and writes",
)
def test_folders_made_for_a_failed_write_are_removed(inputs, tmp_path, capsys, monkeypatch, undrawn):
    target = tmp_path / "new" / "deeper" / "r.md"
    with monkeypatch.context() as m:
        fail_on(m, target.with_name("r.png"))
        code, _, err = run(["report", str(inputs["a"]), "--out", str(target)], capsys)
    assert code == 3 and "No space left on device" in the_error(err)
    assert listing(tmp_path) == []
    code, _, err = run(["report", str(inputs["a"]), "--out", str(target)], capsys)
    assert code == 0 and listing(target.parent) == ["r.md", "r.png"], err


@pytest.mark.failure(row="output-path-under-regular-file")
def test_an_unwritable_folder_is_bad_input_naming_the_fix(inputs, tmp_path, capsys, monkeypatch):
    def denied(*_, **__):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(outputs.tempfile, "mkstemp", denied)
    code, _, err = run(["gate", "--suggest", "--allow-wide", str(inputs["a"]), "--out", str(tmp_path / "b.yaml")],
                       capsys)
    assert code == 2 and the_error(err) == (f"commbench: cannot write {tmp_path / 'b.yaml'}: Permission denied; "
                                            "pass another --out")
    assert listing(tmp_path) == []


@pytest.mark.failure(
    row="another-process-creates-file-between",
    section="Output files (reports, figures, comparison text, bands)",
    failure="another process creates the file between the check and the link",
    does="theirs stays as it is, ours is removed, exit 2",
)
def test_a_name_taken_while_writing_is_left_to_its_owner(inputs, tmp_path, capsys, monkeypatch, undrawn):
    """Another process creates the file between the check and the link: theirs stays, ours goes."""
    target = tmp_path / "p.png"
    real = os.fsync

    def fsync(fd):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".p.png."):
            target.write_bytes(b"theirs")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    code, _, err = run(["plot", str(inputs["a"]), "--out", str(target)], capsys)
    assert code == 2 and f"{target} already exists" in the_error(err)
    assert target.read_bytes() == b"theirs" and listing(tmp_path) == ["p.png"]


# ---------------------------------------------------------------- the writer itself


@pytest.mark.failure(
    row="file-system-without-hard-links",
    section="Output files (reports, figures, comparison text, bands)",
    failure="a file system without hard links",
    does="the name is reserved with an exclusive create, then the temporary is renamed over it: still never over "
         "someone else's file",
)
def test_without_hard_links_the_name_is_reserved_then_renamed(tmp_path, monkeypatch):
    def no_links(*_, **__):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "link", no_links)
    path = outputs.write_file(tmp_path / "a.txt", b"new\n", "compare")
    assert path.read_bytes() == b"new\n" and listing(tmp_path) == ["a.txt"]
    with pytest.raises(BadInput, match="a.txt already exists: compare never overwrites"):
        outputs.write_file(tmp_path / "a.txt", b"other\n", "compare")
    assert path.read_bytes() == b"new\n" and listing(tmp_path) == ["a.txt"]


@pytest.mark.parametrize("umask, mode", [(0o000, 0o644), (0o022, 0o644), (0o077, 0o600)])
@pytest.mark.failure(
    row="world-writable-outputs",
    section="Output files (reports, figures, comparison text, bands)",
    failure="world-writable outputs",
    does="0644 narrowed by the umask (umask 000 gives 0644, 077 gives 0600)",
)
def test_outputs_are_never_group_or_world_writable(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = outputs.write_file(tmp_path / "r.html", b"<p>", "report")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode


@pytest.mark.failure(
    row="name-twice-group-group-new",
    section="Output files (reports, figures, comparison text, bands)",
    failure="one name twice in a group; a group in a new sub-folder",
    does="refused / written whole",
)
def test_one_name_twice_in_a_group_is_refused(tmp_path):
    with pytest.raises(BadInput, match="named twice"):
        outputs.write_files([outputs.Output(tmp_path / "x", b"1"), outputs.Output(tmp_path / "x", b"2")], "report")
    assert listing(tmp_path) == []


@pytest.mark.failure(row="name-twice-group-group-new")
def test_a_group_is_written_whole(tmp_path):
    group = [outputs.Output(tmp_path / "r.md", b"# r\n"), outputs.Output(tmp_path / "sub" / "r.png", b"png")]
    assert outputs.write_files(group, "report") == [tmp_path / "r.md", tmp_path / "sub" / "r.png"]
    assert (tmp_path / "r.md").read_bytes() == b"# r\n" and (tmp_path / "sub" / "r.png").read_bytes() == b"png"
    assert listing(tmp_path) == ["r.md", "sub"] and listing(tmp_path / "sub") == ["r.png"]
