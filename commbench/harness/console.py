"""Rank 0's live output: the nccl-tests table, line by line, with a rich progress bar on a
person's terminal and plain lines elsewhere (a launcher's pseudo-terminal, Slurm logs, pipes; the
rule and --progress are core/progress.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from commbench.core import streams
from commbench.core.progress import draw_bar, is_terminal
from commbench.core.runsummary import MISSED_MARK, gbps, halfwidth_text, precision_of, rule_fields

# nccl-tests' columns, with room for 3 significant digits of a bandwidth below 0.001 GB/s
_HEAD = (("size", "(B)", 12), ("count", "(elements)", 12), ("type", "", 8), ("redop", "", 6), ("root", "", 6))
_CELL = (("time", "(us)", 8), ("algbw", "(GB/s)", 8), ("busbw", "(GB/s)", 8), ("#wrong", "", 6))
_MEDIAN_CELL = (("time", "(us)", 8), ("min..max", "(us)", 15), ("algbw", "(GB/s)", 8), ("busbw", "(GB/s)", 8))
_TITLE = {False: "out-of-place", True: "in-place"}
BOTH = (False, True)  # nccl-tests' column order: out-of-place, then in-place


def _columns(cols, row: int) -> str:
    return "  ".join(f"{c[row]:>{c[2]}s}" for c in cols)


def placement_header(placements=BOTH, cell=_CELL, prefix: str = "#") -> str:
    """nccl-tests' three header lines, with only the halves of `placements` (in_place flags)."""
    head = [_columns(_HEAD, 0), _columns(_HEAD, 1)]
    width = len(_columns(cell, 0))
    lines = [prefix + " " * (len(head[0]) - 1) + "".join(f" {_TITLE[p]:^{width}s}" for p in placements)]
    for row in (0, 1):
        lines.append(prefix + head[row][1:] + "".join(f" {_columns(cell, row)}" for _ in placements))
    return "\n".join(line.rstrip() for line in lines)


PLACEMENT_HEADER = placement_header()


@dataclass
class Cell:
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None  # None: not checked


def _time(us: float) -> str:
    """Microseconds: 0.1 us resolution from 100 us, 3 significant digits below 1 us."""
    if us >= 10000:
        return f"{us:8.0f}"
    if us >= 100:
        return f"{us:8.1f}"
    if us >= 1 or us <= 0:
        return f"{us:8.2f}"
    return f"{us:8.3f}"


def bw(value: float, width: int = 8) -> str:
    """A bandwidth in GB/s to 3 significant digits (2 decimals made lab rows read "0.12 0.12")."""
    return f"{gbps(value):>{width}s}"


def format_cell(cell: Cell | None) -> str:
    if cell is None:
        return "  ".join(f"{'n/a':>{c[2]}s}" for c in _CELL)
    wrong = "N/A" if cell.wrong is None else str(cell.wrong)
    return f"{_time(cell.time_us)}  {bw(cell.algbw)}  {bw(cell.busbw)}  {wrong:>6s}"


def _head(size: int, count: int, type_name: str, redop: str, root: int) -> str:
    return f"{size:12d}  {count:12d}  {type_name:>8s}  {redop:>6s}  {root:6d}"


def format_row(size: int, count: int, type_name: str, redop: str, root: int,
               out_of_place: Cell | None, in_place: Cell | None, placements=BOTH) -> str:
    """One table line: the halves of `placements` (a collective torch runs one way shows one)."""
    cells = {False: out_of_place, True: in_place}
    return _head(size, count, type_name, redop, root) + "".join(f" {format_cell(cells[p])}" for p in placements)


def precision_mark(records: list[dict], plan) -> str:
    """'  ~ ±12%' after a table line whose point (either placement) missed --precision; '' otherwise."""
    fields = rule_fields(plan)
    missed = [p for r in records if (p := precision_of(r, fields)) is not None and not p.reached]
    if not missed:
        return ""
    return f"  {MISSED_MARK} {halfwidth_text(max(p.halfwidth for p in missed))}"


MEDIAN_CELL = _MEDIAN_CELL


def format_median_row(size: int, count: int, type_name: str, redop: str, root: int, cells: dict,
                      placements) -> str:
    """A line of the median-over-repetitions table; cells: in_place -> (time, lo, hi, algbw, busbw)."""
    parts = []
    for p in placements:
        if cells.get(p) is None:
            parts.append("  ".join(f"{'n/a':>{c[2]}s}" for c in _MEDIAN_CELL))
            continue
        time_us, lo, hi, algbw, busbw = cells[p]
        spread = f"{_time(lo).strip()}..{_time(hi).strip()}"
        parts.append(f"{_time(time_us)}  {spread:>15s}  {bw(algbw)}  {bw(busbw)}")
    return _head(size, count, type_name, redop, root) + "".join(f" {c}" for c in parts)


def point_median_lines(labels: list[str], cells: list[tuple]) -> list[str]:
    """The median table of a workload whose points are named rather than sized (buckets, zero):
    a header and a line per point; cells: (time, lo, hi, algbw, busbw) per label."""
    width = max([len("point"), *map(len, labels)])
    head = [f"#  {'point':<{width}s} " + _columns(_MEDIAN_CELL, 0), f"#  {'':<{width}s} " + _columns(_MEDIAN_CELL, 1)]
    lines = [h.rstrip() for h in head]
    for label, (time_us, lo, hi, algbw, busbw) in zip(labels, cells):
        spread = f"{_time(lo).strip()}..{_time(hi).strip()}"
        lines.append(f"   {label:<{width}s} {_time(time_us)}  {spread:>15s}  {bw(algbw)}  {bw(busbw)}")
    return lines


def repetition_text(repetition: int, repetitions: int) -> str:
    """'repetition 2/3' where the run repeats its grid (-R), '' otherwise: a table's passes told apart."""
    return f"repetition {repetition + 1}/{repetitions}" if repetitions > 1 else ""


class Reporter:
    """Prints on rank 0 only; other ranks get a Reporter with enabled=False."""

    def __init__(self, enabled: bool, total_points: int, stream=None, progress: str = "auto"):
        self.enabled = enabled
        self.reader_gone = False  # stdout's reader went away: see _reader_gone
        self.stream = stream or sys.stdout
        self.progress = None
        self.task = None
        if enabled and draw_bar(progress, is_terminal(self.stream)):  # core/progress.py: --progress
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            console = Console(file=self.stream, highlight=False)
            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=console, transient=True)
            self.task = self.progress.add_task("measuring", total=total_points)
            self.progress.start()

    def line(self, text: str = "") -> None:
        if not self.enabled:
            return
        try:
            if self.progress is not None:
                for part in text.split("\n"):
                    self.progress.console.print(part, markup=False, highlight=False, soft_wrap=True)
            else:
                print(text, file=self.stream, flush=True)
        except BrokenPipeError:  # a plain stdout (a spawned rank's)
            self._reader_gone()
        else:
            if streams.reader_gone(self.stream):  # the entry point's guard (core/streams.py) saw it
                self._reader_gone()

    def repetition(self, repetition: int, repetitions: int) -> None:
        """A line that starts a repetition's rows in a table of one row per point (buckets, zero)."""
        if repetitions > 1:
            self.line(f"# {repetition_text(repetition, repetitions)}")

    def last_line(self, text: str) -> None:
        """The run's last line (where its results are): on stderr once the reader of stdout is gone."""
        if self.reader_gone:
            print(f"commbench: {text.removeprefix('# ')}", file=sys.stderr, flush=True)
        else:
            self.line(text)

    def _reader_gone(self) -> None:
        """stdout's reader went away (`commbench sweep | head`): the measurement is the product and
        the table only a view of it, so the run goes on, writing every point, without the table.
        stdout is pointed at /dev/null so that no later write (or the final flush) fails again."""
        self.enabled, self.reader_gone, self.progress = False, True, None
        streams.silence(self.stream)
        print("commbench: stdout was closed (its reader went away): the run goes on without its table and "
              "writes every point to its results file; Ctrl-C stops it and keeps what was measured",
              file=sys.stderr, flush=True)

    def advance(self, description: str, steps: int = 1) -> None:
        if self.progress is not None and self.task is not None:  # set together in __init__
            self.progress.update(self.task, advance=steps, description=description)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
