"""Settings axes: `--env NAME=v1|v2` (and `--mtu`, the same mechanism), their combinations, and
what a row records of them.

An axis is a name and its values; the axes multiply (itertools.product, first axis slowest). A
`Setting` is one value per axis; its label, `NAME=value` per axis joined by spaces, is the
`settings` column of every row it measured and part of the point in compare, gate, plot and
report. The harness (harness/settingpasses.py) applies each setting on every rank before it connects
a fresh process group, because gloo and NCCL read their settings when a group connects; every
repetition applies each setting in turn.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from commbench.core.errors import BadInput

MTU = "MTU"  # the axis `--mtu` makes: set on --iface of every host, not an environment variable
MAX_VALUES = 16  # per axis
MAX_SETTINGS = 64  # combinations of all axes: each is a whole grid
MAX_VALUE_CHARS = 256
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_VALUE = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces: the label joins axes with spaces

# Variables the launchers and commbench set for every rank: an axis over them breaks the run itself.
_OWNED = re.compile(r"(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|ROLE_RANK|MASTER_ADDR|MASTER_PORT"
                    r"|TORCHELASTIC_.*|SLURM_.*|OMPI_.*|PMI_.*|PMIX_.*|COMMBENCH_.*|NCCL_DEBUG_FILE)")
# What NCCL reads again for every communicator (src/graph/tuning.cc reads NCCL_ALGO and NCCL_PROTO
# with ncclGetEnv in each ncclTopoTuneModel). Its other variables are read once per process (the
# NCCL_PARAM cache; the network plugins initialise once), so a second value would not take.
NCCL_PER_COMMUNICATOR = ("NCCL_ALGO", "NCCL_PROTO")
# gloo reads these when a process group is made (torch's ProcessGroupGloo binding, createDevice).
GLOO_PER_GROUP = ("GLOO_SOCKET_IFNAME", "GLOO_DEVICE_TRANSPORT")


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Setting:
    """One value of every axis, in axis order."""

    values: tuple[tuple[str, str], ...]

    @property
    def label(self) -> str:
        return " ".join(f"{name}={value}" for name, value in self.values)

    @property
    def env(self) -> dict[str, str]:
        return {name: value for name, value in self.values if name != MTU}

    @property
    def mtu(self) -> int | None:
        return next((int(v) for n, v in self.values if n == MTU), None)


def parse_env(specs: tuple[str, ...] | list[str]) -> list[Axis]:
    """`--env NAME=v1|v2|...`, repeatable: one axis each; every malformed one is one line."""
    axes: list[Axis] = []
    for spec in specs:
        axis = _parse_one(spec)
        first = next((a for a in axes if a.name == axis.name), None)
        if first is not None:
            raise BadInput(f"--env {axis.name} is given twice: give each name once, its values joined by |, "
                           f"e.g. --env {axis.name}={'|'.join(dict.fromkeys(first.values + axis.values))}")
        axes.append(axis)
    return axes


def _parse_one(spec: str) -> Axis:
    name, eq, rest = spec.partition("=")
    example = "e.g. --env GLOO_SOCKET_IFNAME=eth0|eth1"
    if not eq:
        raise BadInput(f"--env {spec!r} has no '=': write NAME=value1|value2, {example}")
    if not _NAME.fullmatch(name):
        raise BadInput(f"--env {name!r} is not an environment variable name (letters, digits, _): {example}")
    if name == MTU:
        raise BadInput("--env MTU is not an environment variable: use --mtu 1500,9000 --iface eth0")
    if _OWNED.fullmatch(name):
        raise BadInput(f"--env {name}: the launcher or commbench sets {name} for every rank, so it cannot be "
                       f"an axis: measure other settings, {example}")
    values = rest.split("|")
    for value in values:
        if value == "":
            raise BadInput(f"--env {name}= has an empty value: give every value, {example} "
                           f"(to measure unset, run without the axis)")
        if len(value) > MAX_VALUE_CHARS or not _VALUE.fullmatch(value):
            raise BadInput(f"--env {name}: value {value[:40]!r} must be printable ASCII without spaces, "
                           f"at most {MAX_VALUE_CHARS} characters: {example}")
    if len(set(values)) != len(values):
        twice = next(v for v in values if values.count(v) > 1)
        raise BadInput(f"--env {name}: value {twice!r} is given twice: give each value once")
    if len(values) > MAX_VALUES:
        raise BadInput(f"--env {name} has {len(values)} values; the most is {MAX_VALUES}: measure fewer at once")
    return Axis(name, tuple(values))


def mtu_axis(mtus: list[int]) -> list[Axis]:
    return [Axis(MTU, tuple(str(m) for m in mtus))] if mtus else []


def combinations(axes: list[Axis]) -> list[Setting]:
    """Every setting, first axis slowest; none without axes."""
    if not axes:
        return []
    count = 1
    for axis in axes:
        count *= len(axis.values)
    if count > MAX_SETTINGS:
        raise BadInput(f"the --env/--mtu axes make {count} settings, each a whole grid; the most is "
                       f"{MAX_SETTINGS}: fewer values or axes")
    return [Setting(tuple(zip((a.name for a in axes), combo)))
            for combo in itertools.product(*(a.values for a in axes))]


def check_backend(axes: list[Axis], backend: str) -> None:
    """Refuse an axis the backend would not see change: NCCL reads most of its variables once per
    process; gloo reads no NCCL variable at all."""
    for axis in axes:
        name = axis.name
        if backend == "nccl" and name.startswith("NCCL_") and name not in NCCL_PER_COMMUNICATOR:
            raise BadInput(f"--env {name}: NCCL reads it once per process, so one run measures only its first "
                           f"value: run once per value (e.g. {name}={axis.values[0]} commbench sweep --label "
                           f"{name}={axis.values[0]}) and compare; per communicator NCCL rereads "
                           f"{' and '.join(NCCL_PER_COMMUNICATOR)}")
        if backend == "gloo" and name.startswith("NCCL_"):
            raise BadInput(f"--env {name} does nothing with --backend gloo: use --backend nccl, or a gloo setting "
                           f"such as {GLOO_PER_GROUP[0]}")


def as_plan(axes: list[Axis]) -> list[list[Any]]:
    """The axes as a plan stores them (JSON): [[name, [values]], ...]."""
    return [[a.name, list(a.values)] for a in axes]


def from_plan(stored: list[Any]) -> list[Axis]:
    return [Axis(str(name), tuple(str(v) for v in values)) for name, values in stored]
