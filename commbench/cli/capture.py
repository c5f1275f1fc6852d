"""`commbench capture --out job.trace -- CMD...`: run a job as it is and record, per rank, every
collective and point-to-point call it makes through torch.distributed, merged into one trace
file when it exits (integrations/capture.py, core/trace.py; docs/REPLAY.md)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from commbench.core.errors import BadInput

# Runs first in every Python process of the job; chains to a sitecustomize the job already had.
SHIM = '''\
import importlib.machinery, importlib.util, os, sys
_here = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("{env}"):
    try:
        from commbench.integrations import capture as _capture
    except ImportError as _exc:  # another interpreter than commbench's: this process is not recorded
        sys.stderr.write(f"commbench capture: not recording {{sys.executable}}: {{_exc}}\\n")
    else:
        _capture.autostart(os.environ["{env}"])
_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
'''


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out", required=True, metavar="FILE", help="The trace file to write (one per job).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def capture(out, force, command) -> int:
    """Run COMMAND (after --) and record its torch.distributed communication into one trace file:
    per rank, every collective and point-to-point op in order, with bytes, dtype, group, async and
    times. Works under torchrun and the deepspeed launcher (every Python process of the job loads
    the recorder from PYTHONPATH). Exits with COMMAND's exit code; 2: bad input.

    e.g. commbench capture --out job.trace -- torchrun --nproc_per_node 2 train.py
    """
    from commbench.core.outputs import check_new
    from commbench.integrations.capture import PARTS_ENV, merge_parts

    if not command:
        raise BadInput("capture needs a command after --, e.g. "
                       "'commbench capture --out job.trace -- torchrun --nproc_per_node 2 train.py'")
    target = check_new(out, "capture", "--out", force=force)
    program = shutil.which(command[0])
    if program is None:
        raise BadInput(f"capture: {command[0]!r} is not a program on PATH: pass the job's command after --")
    parts = target.with_name(target.name + ".parts")
    if parts.exists():
        raise BadInput(f"{parts} exists (left by an unfinished capture?): remove it, or pass another --out")
    shim = parts / "shim"
    shim.mkdir(parents=True)
    (shim / "sitecustomize.py").write_text(SHIM.format(env=PARTS_ENV), encoding="utf-8")
    env = dict(os.environ, **{PARTS_ENV: str(parts.resolve())})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim.resolve()), env.get("PYTHONPATH")]))
    code = subprocess.run([program, *command[1:]], env=env, check=False).returncode
    (shim / "sitecustomize.py").unlink()
    shim.rmdir()
    try:
        trace = merge_parts(parts, target)
    except BadInput as exc:
        with contextlib.suppress(OSError):
            parts.rmdir()  # nothing was written: leave no folder behind
        if code:
            sys.exit(code)  # the job failed first: its own error is the one to read
        raise BadInput(f"{exc} (command: {' '.join(command)})") from None
    sys.stdout.write(_summary(target, trace) + "\n")
    return code


def _summary(path: Path, trace) -> str:
    kinds = ", ".join(f"{op} {n}x {size / 1e6:.3g} MB" for op, (n, size) in trace.totals().items())
    missing = trace.meta.get("missing_ranks") or []
    gap = f"; no part from rank(s) {', '.join(map(str, missing))}" if missing else ""
    return f"capture: {path}: {len(trace.ranks)} of {trace.world_size} ranks, {len(trace.ops)} ops ({kinds}){gap}"
