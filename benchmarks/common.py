"""What the benchmark scripts share: the working tree's commbench on sys.path, a description of
the machine a figure came from, and writing figures under benchmarks/results/."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

# The scripts measure this checkout, whatever commbench is installed.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def child_env() -> dict:
    """Environment for a `python -m commbench` subprocess that runs this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def machine() -> dict:
    """The machine, in the words a reader needs to judge a figure: CPU, cores, memory, kernel,
    versions, and the load average (another job on a 2-core machine moves every figure)."""
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": mem_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "loadavg_1m": os.getloadavg()[0],
        "utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def machine_line(m: dict) -> str:
    return (f"{m['cpu']}, {m['cores_usable']} of {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
            f"Python {m['python']}, torch {m['torch']}, load average {m['loadavg_1m']:.2f} at the start")


def _plain(value):
    """numpy scalars (and anything else json does not know) as plain values."""
    return value.item() if hasattr(value, "item") else str(value)


def write(name: str, figures: dict, markdown: str) -> tuple[Path, Path]:
    """benchmarks/results/<name>.json and .md (replaced: the latest run of a benchmark is its figure)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    js, md = RESULTS / f"{name}.json", RESULTS / f"{name}.md"
    for path, text in ((js, json.dumps(figures, indent=2, sort_keys=True, default=_plain) + "\n"), (md, markdown)):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return js, md


def human(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def not_root(name: str) -> bool:
    """True, with one line on stderr, when this process cannot make a lab (it needs root)."""
    if os.geteuid() == 0:
        return False
    print(f"{name}: the lab needs root (network namespaces, veth, tc): run it as root", file=sys.stderr)
    return True


class Lab:
    """The lab CLI with a benchmark's own prefix and state folder (its own lab, never a test's)."""

    def __init__(self, prefix: str):
        self.env = {**child_env(), "COMMBENCH_LAB_PREFIX": prefix,
                    "COMMBENCH_LAB_DIR": f"/run/commbench-lab-{prefix}"}

    def cb(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "commbench", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def must(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        proc = self.cb(*args, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"commbench {' '.join(args)} -> exit {proc.returncode}\n{proc.stdout[-3000:]}\n"
                               f"{proc.stderr[-3000:]}")
        return proc
