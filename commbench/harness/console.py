"""Rank 0's live output: the nccl-tests table, line by line, with a rich progress bar on a
terminal and plain lines elsewhere (Slurm logs, pipes)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

PLACEMENT_HEADER = (
    "#                                                              out-of-place                       in-place          \n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         "
)


@dataclass
class Cell:
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None  # None: not checked


def _time(us: float) -> str:
    if us >= 10000:
        return f"{us:8.0f}"
    if us >= 100:
        return f"{us:8.1f}"
    return f"{us:8.2f}"


def format_cell(cell: Cell | None) -> str:
    if cell is None:
        return f"{'n/a':>8s}  {'n/a':>6s}  {'n/a':>6s}  {'n/a':>6s}"
    wrong = "N/A" if cell.wrong is None else str(cell.wrong)
    return f"{_time(cell.time_us)}  {cell.algbw:6.2f}  {cell.busbw:6.2f}  {wrong:>6s}"


def format_row(size: int, count: int, type_name: str, redop: str, root: int,
               out_of_place: Cell | None, in_place: Cell | None) -> str:
    head = f"{size:12d}  {count:12d}  {type_name:>8s}  {redop:>6s}  {root:6d}"
    return f"{head} {format_cell(out_of_place)} {format_cell(in_place)}"


class Reporter:
    """Prints on rank 0 only; other ranks get a Reporter with enabled=False."""

    def __init__(self, enabled: bool, total_points: int, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self.progress = None
        self.task = None
        if enabled and self.stream.isatty():
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
        if self.progress is not None:
            for part in text.split("\n"):
                self.progress.console.print(part, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=self.stream, flush=True)

    def advance(self, description: str, steps: int = 1) -> None:
        if self.progress is not None:
            self.progress.update(self.task, advance=steps, description=description)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
