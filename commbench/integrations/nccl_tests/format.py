"""The vocabulary of nccl-tests output shared by its readers: names, number shapes, limits, and the
small helpers that turn what nccl-tests prints into commbench's names (collective and dtype facts
from commbench.core.vocab)."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

from commbench.core import vocab
from commbench.core.errors import BadInput

WORKLOAD = "nccl-tests"
LAUNCHER = "nccl-tests"
SINGLE_RANK_HINT = "each process ran as its own single rank: nccl-tests built without MPI=1 under mpirun?"

INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1

# Shapes met both in text logs and in -J JSON documents.
STAMP = re.compile(r"(?<!\S)([0-9]{4}-[0-9]{2}-[0-9]{2})[ \t]+([0-9]{2}:[0-9]{2}:[0-9]{2})(?!\S)", re.ASCII)
NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf)", re.ASCII | re.I)
INT = re.compile(r"-?[0-9]+", re.ASCII)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)


def where(source: str, line: int) -> str:
    return f"{source} line {line}"


def nccl_version_string(code: int | str | None) -> str | None:
    """21903 -> '2.19.3' (NCCL >= 2.9 codes are major*10000 + minor*100 + patch); 2708 -> '2.7.8'."""
    if code is None:
        return None
    try:
        n = int(code)
    except (TypeError, ValueError):
        return None
    if n <= 0:
        return None
    if n >= 10000:
        return f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
    return f"{n // 1000}.{n % 1000 // 100}.{n % 100}"


# nccl-tests' own version (src/common.h NCCL_TESTS_VERSION: 2.19.6), a fork's suffix allowed.
_TESTS_VERSION = re.compile(r"[1-9]\.[0-9]{1,3}(?:\.[0-9]{1,3})?(?:[-+~][0-9A-Za-z.+~-]{0,40})?", re.ASCII)


def version_problem(tests_version: str | None, codes: dict[str, str | int | None]) -> str | None:
    """What is wrong with the versions a header prints, or None: nccl-tests' own (major 1 to 9,
    as `2.19.6`), and NCCL's codes (`nccl-headers=`, `nccl-library=`): NCCL_VERSION_CODE, major x
    1000 + minor x 100 + patch before 2.9 (2000..2999), major x 10000 + minor x 100 + patch since
    (20900..99999)."""
    if tests_version is not None and not _TESTS_VERSION.fullmatch(tests_version):
        return f"nccl-tests version {tests_version[:40]!r}: a version like 2.19.6 was expected"
    for name, code in codes.items():
        if code is None:
            continue
        n = int(code) if isinstance(code, int) or (isinstance(code, str) and code.isdigit() and len(code) < 12) else -1
        if not (2000 <= n <= 2999 or 20900 <= n <= 99999):
            return (f"{name}={str(code)[:40]} is no NCCL version code (major x 10000 + minor x 100 + patch: 21903 is "
                    "2.19.3)")
    return None


def _norm_name(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def collective_from_program(program: str | None) -> str | None:
    """'all_gather_perf_mpi', './build/all_reduce_perf' -> canonical commbench names."""
    if not program:
        return None
    base = os.path.basename(str(program).strip())
    m = re.match(r"^(.*?)_perf(?:_mpi)?(?:\.\w+)?$", base)
    if not m:
        return None
    return canonical(m.group(1))


def canonical(name: str) -> str | None:
    """The commbench name of a collective in any commbench or nccl-tests spelling, or None."""
    key = _norm_name(name)
    if not key:
        return None
    for c in vocab.COLLECTIVES + vocab.NCCL_TESTS_ONLY:
        if key in {_norm_name(c.name), *(_norm_name(a) for a in c.aliases)}:
            return c.name
    return None


def fail_collective(name: str) -> str:
    hint = vocab.did_you_mean(name, vocab.collective_spellings(nccl_tests=True))
    raise BadInput(f"unknown --collective {name!r}{hint}: use a commbench or nccl-tests name, e.g. all_reduce, "
                   "all_gather, alltoall, broadcast")


def collective_from_filename(path: str | os.PathLike) -> str | None:
    """The longest collective name inside a file name: all_reduce_legacy_8xA100.txt -> all_reduce."""
    stem = Path(path).name.lower()
    flat = re.sub(r"[^a-z0-9]", "", stem)
    names = [(_norm_name(n), c.name) for c in vocab.COLLECTIVES + vocab.NCCL_TESTS_ONLY for n in (c.name, *c.aliases)]
    best = None
    for key, canon in names:
        if key and key in flat and (best is None or len(key) > len(best[0])):
            best = (key, canon)
    return best[1] if best else None


def bus_factor(collective: str, world: int | None) -> float | None:
    if not world or world < 1:
        return None
    spec = vocab.known(collective)
    return float(spec.busbw_factor(world)) if spec else None


def rooted(collective: str) -> bool:
    spec = vocab.known(collective)
    return bool(spec and spec.rooted)


def dtype_name(raw: str) -> str:
    try:
        return vocab.get_dtype(raw).name
    except BadInput:
        return raw  # a type commbench does not measure (uint32, f8e4m3): kept as nccl-tests names it


def op_name(raw: str | None) -> str | None:
    if raw is None or raw.lower() == "none":
        return None
    try:
        return vocab.get_op(raw)
    except BadInput:
        return raw.lower()


def local_time(text) -> dt.datetime | None:
    """A start time as nccl-tests prints it (local time, no zone), in UTC; None if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S").astimezone(dt.timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None
