"""The package's modules parsed once a session. Several unit tests scan every module with `ast`
(test_architecture, test_security, test_vocab_once); a pass of `ast.parse` over the package costs
0.4 s on 2 cores, so they share the trees here (test_architecture keeps them all for the session
anyway). A file changed since it was parsed (its mtime or size) is parsed again. Readers only read
a tree; none changes one."""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "commbench"


def tree(path: str | os.PathLike) -> ast.Module:
    """The module `path` holds, as `ast.parse(text, path)` gives it (UTF-8)."""
    path = Path(path).resolve()
    st = path.stat()
    return _parsed(path, st.st_mtime_ns, st.st_size)


@functools.cache
def _parsed(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def package_files() -> list[Path]:
    """Every module of the package, in path order."""
    return sorted(PACKAGE.rglob("*.py"))
