"""`commbench nccl-tests run`: an nccl-tests binary, directly or under mpirun/srun, its output
streamed live and parsed as it comes (rows are written after every line that completes one, so a
failing or hung binary keeps what it printed), `-J` JSON asked for when the binary knows it and
preferred when it arrives, a timeout that kills the whole process group."""

from __future__ import annotations

import datetime as dt
import math
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from collections.abc import Callable, Iterable

from commbench.core.columns import TOPOLOGY_COLUMNS
from commbench.core.errors import EXIT_BAD_RESULT, EXIT_OK, EXIT_RUNTIME, EXIT_SIGINT, EXIT_SIGTERM, BadInput
from commbench.core.signals import Terminated, sigterm_raises
from commbench.integrations.nccl_tests.format import (canonical, collective_from_filename, collective_from_program,
                                                      fail_collective)
from commbench.integrations.nccl_tests.json_doc import parse_json_document
from commbench.integrations.nccl_tests.process import Streamed, supports_json
from commbench.integrations.nccl_tests.records import Parsed, RecordBuilder, base_columns, describe
from commbench.integrations.nccl_tests.text import TextParser


def user_json_path(args: list[str]) -> str | None:
    for i, a in enumerate(args):
        if a in ("-J", "--output_file") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--output_file="):
            return a.split("=", 1)[1]
        if a.startswith("-J") and len(a) > 2:
            return a[2:]
    return None


def build_argv(binary: str, args: list[str], launcher: str, np_: int | None, launcher_args: list[str]) -> list[str]:
    if launcher == "none":
        if np_ not in (None, 1):
            raise BadInput("--np starts several processes and needs --launcher mpirun or srun; with "
                           "--launcher none use nccl-tests' own -g/-t for several GPUs")
        return [binary, *args]
    exe = shutil.which(launcher)
    if exe is None:
        raise BadInput(f"--launcher {launcher}: {launcher} is not on PATH here")
    if launcher == "mpirun":
        return [exe, *(["-np", str(np_)] if np_ else []), *launcher_args, binary, *args]
    return [exe, *(["--ntasks", str(np_)] if np_ else []), *launcher_args, binary, *args]


def _to_stdout(line: str) -> None:
    """The binary's output, shown as it arrives."""
    sys.stdout.write(line)
    sys.stdout.flush()


def run_binary(binary: str, args: list[str], *, launcher: str = "none", np_: int | None = None,
               launcher_args: list[str] | None = None, timeout: float | None = None, out: str = "results",
               label: str = "", collective: str | None = None, use_json: bool = True,
               echo: Callable[[str], None] | None = None, say: Callable[[str], None] | None = None) -> int:
    """Run an nccl-tests binary; stream and parse its output into a results file. Exit code."""
    from commbench.net.envinfo import env_snapshot
    from commbench.core.results import ResultWriter, make_run_id, resolve_out

    echo = echo or _to_stdout
    say = say or (lambda m: print(f"commbench: {m}", file=sys.stderr, flush=True))
    path, collective, hint = _check_usage(binary, args, launcher, np_, launcher_args, timeout, collective)
    args = list(args)
    json_path = user_json_path(args)
    deadline = time.monotonic() + timeout if timeout else None  # the -h probe counts too
    try:
        with sigterm_raises():  # the probe's process group is killed on the way out
            ask_json = json_path is None and use_json and supports_json(path, deadline)
    except Terminated:
        say(f"interrupted while asking {os.path.basename(path)} -h for its options; nothing was written")
        return EXIT_SIGTERM
    if deadline is not None and time.monotonic() >= deadline:
        say(f"{os.path.basename(path)} timed out after {timeout:g} s answering -h (asked for its options): "
            "its process group was killed; nothing was run or written")
        return EXIT_RUNTIME

    run_id = make_run_id()
    target = resolve_out(out, run_id)
    writer = ResultWriter(target)
    writer.create()
    if ask_json:  # beside the results: kept as evidence, and on the shared folder rank 0 can reach
        json_path = str(target.with_suffix(".json"))
        args += ["-J", json_path]
    argv = build_argv(path, args, launcher, np_, list(launcher_args or []))
    stdbuf = shutil.which("stdbuf")
    if stdbuf:  # glibc stdio buffers a pipe in blocks: ask for lines so rows arrive as they are printed
        argv = [stdbuf, "-oL", "-eL", *argv]
    started = dt.datetime.now(dt.timezone.utc)
    plan = {"source": "run", "argv": argv, "launcher": launcher, "np": np_, "timeout": timeout}
    builder = RecordBuilder(base_columns(run_id, label, started, env_snapshot(), plan), collective, hint, binary)
    parser = TextParser(binary, builder)
    log_path = target.with_suffix(".log")
    try:
        log = open(log_path, "x", encoding="utf-8")
    except OSError:
        log = None

    say(f"running {' '.join(argv)} -> {target}")
    feed = _Feed(Streamed(argv, log, deadline, echo), parser, writer, say)
    feed.follow()
    feed.feed_pending()

    parsed = parser.close(strict=False)
    ended_well = not feed.timed_out and feed.interrupted is None and feed.live.proc.returncode == 0
    source_note = _prefer_json(say, parsed, builder, json_path, collective, hint, ended_well)
    writer.rows = list(parsed.records)
    writer.append([])
    for w in parsed.warnings:
        say(f"warning: {w}")
    return _exit_code(say, binary, timeout, feed, parsed, len(writer.rows), target, log_path, source_note)


def _check_usage(binary: str, args: list[str], launcher: str, np_: int | None, launcher_args: list[str] | None,
                 timeout: float | None, collective: str | None) -> tuple[str, str | None, str | None]:
    """Every usage error before anything starts or is written: (the binary's path, the
    canonical --collective, the collective its name says)."""
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise BadInput(f"--timeout {timeout} must be more than 0 seconds")
    if np_ is not None and np_ < 1:
        raise BadInput(f"--np {np_} must be at least 1")
    path = binary if os.sep in binary else (shutil.which(binary) or binary)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise BadInput(f"{binary} is not an executable file: pass the path of an nccl-tests binary, "
                       "e.g. ./build/all_reduce_perf")
    if collective is not None:
        collective = canonical(collective) or fail_collective(collective)
    hint = collective_from_program(path) or collective_from_filename(path)
    if collective is None and hint is None:
        raise BadInput(f"cannot tell which collective {os.path.basename(path)} measures: pass --collective")
    build_argv(path, list(args), launcher, np_, list(launcher_args or []))
    return path, collective, hint


class _Feed:
    """The binary's stdout into the parser and the writer as it comes, until it ends, the deadline
    passes (however much it prints) or Ctrl-C / SIGTERM stop it; then its process group is
    stopped and nothing is left."""

    WARNINGS = 10  # skipped-line warnings shown; past that one line says more were not
    LONGEST_PARSED = 8192  # characters: a row is under 1000, and a cut line is no row

    def __init__(self, live: Streamed, parser: TextParser, writer, say: Callable[[str], None]) -> None:
        self.live, self.parser, self.writer, self.say = live, parser, writer, say
        self.lineno = 0
        self.warned = 0
        self.pending: str | None = None  # a last line without its newline: parsed after the end
        self.interrupted: int | None = None  # the exit code of the signal that stopped the run

    @property
    def timed_out(self) -> bool:
        return self.live.child.timed_out

    def follow(self) -> None:
        try:
            with sigterm_raises():
                for text in self.live.stdout_lines():
                    self._line(text, warn=True)
                self.live.child.wait()  # stdout is closed: the end should come now (or by the deadline)
        except KeyboardInterrupt:
            self.interrupted = EXIT_SIGINT
        except Terminated:
            self.interrupted = EXIT_SIGTERM
        finally:
            self._stop()

    def _line(self, text: str, warn: bool) -> None:
        """Parse one line as it arrives, so a hung or failing binary keeps the rows it printed."""
        if not text.endswith("\n"):
            self.pending = text
            return
        self.lineno += 1
        if len(text) > self.LONGEST_PARSED:  # neither a row nor an NCCL line: shown and logged only
            return
        try:
            new = self.parser.feed(text, self.lineno)
        except BadInput as exc:
            if warn:
                self._warn(f"warning: {exc} (line skipped)")
            return
        if new:
            self.writer.append(new)

    def _warn(self, message: str) -> None:
        self.warned += 1
        if self.warned <= self.WARNINGS:
            self.say(message)
        elif self.warned == self.WARNINGS + 1:
            self.say(f"warning: more than {self.WARNINGS} lines skipped; the rest are not shown")

    def _stop(self) -> None:
        """Kill the group (with a grace on a timeout or a signal; also what the binary left behind
        after a normal end), then take what was printed before it."""
        child = self.live.child
        child.stop(5.0 if self.timed_out or self.interrupted is not None else 0)
        if child.sigterm_while_stopping and self.interrupted is None:
            self.interrupted = EXIT_SIGTERM
        for text in self.live.stdout_lines(drain=True):
            self._line(text, warn=False)
        self.live.close()

    def feed_pending(self) -> None:
        if self.pending is None:
            return
        self.lineno += 1
        try:
            new = self.parser.feed(self.pending, self.lineno)
            if new:
                self.writer.append(new)
        except BadInput:
            self.say(f"warning: the last line ({self.pending.strip()[:60]!r}) was cut short and is not kept")


def _prefer_json(say: Callable[[str], None], parsed: Parsed, builder: RecordBuilder, json_path: str | None,
                 collective: str | None, hint: str | None, ended_well: bool) -> str:
    """Where the kept rows come from: the -J JSON when a run that ended well wrote it whole, else
    the text output (each fallback said)."""
    source_note = "text output"
    jp = parsed.json_path or json_path  # nccl-tests says where it wrote (it never overwrites: X.0, X.1, ...)
    if ended_well and jp and os.path.isfile(jp):
        try:
            if _use_json(jp, parsed, builder, collective, hint):
                source_note = "-J JSON"
            else:
                say(f"warning: the -J JSON {jp} holds fewer rows than the text output: keeping the text rows")
        except BadInput as exc:
            say(f"warning: the -J JSON could not be used ({exc}); keeping the rows parsed from the text output")
    elif ended_well and json_path:
        say(f"warning: no -J JSON file at {json_path} (did rank 0 run on another node?): rows from the text output")
    return source_note


def _use_json(path: str, parsed: Parsed, builder: RecordBuilder, collective: str | None, hint: str | None) -> bool:
    """Replace the text rows with the -J JSON's (more digits, per-iteration times) if it holds them all."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    jb = RecordBuilder(builder.run, collective, hint, path)
    jparsed = parse_json_document(text, path, jb)
    text0 = parsed.records[0] if parsed.records else {}
    for rec in jparsed.records:
        if not rec["hosts"] and text0.get("hosts"):  # a JSON without config.devices: the Rank lines
            for col in (*TOPOLOGY_COLUMNS, "hosts", "device_name"):
                rec[col] = text0[col]
        rec["transport"] = parsed.transport
        rec["nccl_version"] = rec["nccl_version"] or text0.get("nccl_version")
    if len(jparsed.records) < len(parsed.records):
        return False
    parsed.records[:] = jparsed.records
    parsed.failed = parsed.failed or jparsed.failed
    return True


def _exit_code(say: Callable[[str], None], binary: str, timeout: float | None, feed: _Feed, parsed: Parsed,
               rows: int, target: Path, log_path: Path, source_note: str) -> int:
    """How the run ended, in one line (with stderr's tail when it failed), and its exit code."""
    rc = feed.live.proc.returncode
    name = os.path.basename(binary)
    kept = f"{rows} rows kept in {target}"
    if feed.interrupted is not None:
        say(f"interrupted: {binary} stopped; {kept}")
        return feed.interrupted
    if feed.timed_out:
        _show_tail(say, feed.live.tail)
        say(f"{name} timed out after {timeout:g} s: its process group was killed; {kept}")
        return EXIT_RUNTIME
    if rc != 0:
        _show_tail(say, feed.live.tail)
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals() else f"exit code {rc}"
        if parsed.failed:
            say(f"{name} ended with {how}: its data check failed (wrong results); {kept}")
            return EXIT_BAD_RESULT
        say(f"{name} ended with {how}; {kept}")
        return EXIT_RUNTIME
    if not rows:
        _show_tail(say, feed.live.tail)
        say(f"{name} printed no result rows commbench could read; the output is in {log_path}")
        return EXIT_RUNTIME
    if parsed.failed:
        say(f"the data check failed (wrong results); {kept}")
        return EXIT_BAD_RESULT
    print(f"nccl-tests: {rows} rows from the {source_note} ({describe(parsed)}) -> {target}")
    return EXIT_OK


def _show_tail(say: Callable[[str], None], tail: Iterable[str]) -> None:
    lines = [t for t in tail if t.strip()]
    if not lines:
        say("(nothing on stderr)")
        return
    say("last lines on stderr:")
    for t in lines:
        print(f"  | {t}", file=sys.stderr)
