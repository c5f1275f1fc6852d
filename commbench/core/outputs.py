"""The one writer of a command's output files: reports, figures, comparison text, bands (every
file a command writes except the results parquet, which core/results.py writes, and run logs).

Each file is written to a hidden temporary beside its target (`.NAME.XXXXXXXX.tmp`, the same
folder, so the last step is a link, not a copy), flushed and fsynced, then linked into place. A
link fails rather than replace a file, so an existing file is never changed; only a command's
explicit --force (`force=True`) renames over one instead. A group of files that belong together
(a Markdown report and its figures) is written as temporaries first and then linked together: if
any write or link fails, none of the group remains. A failed write (a full disk, an I/O error,
Ctrl-C, SIGTERM) removes its temporaries and the folders it made: nothing is left behind to block
a rerun. An output that is one of the command's inputs (the same path, or os.path.samefile) is
refused, --force or not.

Messages: an existing file or an unusable path is bad input (exit 2, the fix named); a write
that fails on a usable path (ENOSPC, EIO, EDQUOT) is a runtime failure (exit 3):
`cannot write FILE: No space left on device`.
"""

from __future__ import annotations

import errno
import os
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable, Sequence

from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.inputs import check_path, shown_path
from commbench.core.signals import Terminated, sigterm_raises

# A path the user can fix (exit 2), as opposed to a disk that failed under a good path (exit 3).
_BAD_PATH = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EISDIR,
             errno.ENAMETOOLONG, errno.ELOOP, errno.EEXIST}
# A file system without hard links: reserve the name exclusively, then rename over the reservation.
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK, errno.EXDEV}
_PREFIX_MAX = 200  # leaves room for mkstemp's random part and ".tmp" within NAME_MAX (255)


@dataclass(frozen=True)
class Output:
    """One file to write: where, its bytes, and the option that named it (the message's fix)."""

    path: Path
    data: bytes
    flag: str = "--out"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare the names
        return os.path.abspath(a) == os.path.abspath(b)


def check_new(path: str | os.PathLike[str], command: str, flag: str = "--out",
              inputs: Iterable[str | os.PathLike[str] | None] = (), force: bool = False) -> Path:
    """Refuse, before anything is read or drawn, a target that is an input, a folder, an existing
    file (unless `force`), under a regular file, or a path that cannot be looked at (a name too
    long, a folder above it that cannot be searched). `command` is who never overwrites ("plot")."""
    path = Path(path)
    facts = check_path(path, flag)
    shown = shown_path(path)
    for given in inputs:
        if given is not None and _same_file(path, Path(given)):
            raise BadInput(f"{shown} already exists and is an input of {command}: pass another {flag}; "
                           "commbench never writes over its inputs")
    if facts.is_dir:
        raise BadInput(f"{flag} {shown} is a folder: pass a file name")
    if facts.lexists and not force:
        raise BadInput(f"{shown} already exists: {command} never overwrites a file; pass --force to replace it, "
                       f"or another {flag}")
    if facts.lexists and not facts.is_file:  # --force replaces a file, never /dev/null or a FIFO
        raise BadInput(f"{flag} {shown} is not a regular file: pass another {flag}")
    folder = path.parent
    while not (above := check_path(folder, flag)).lexists and folder != folder.parent:
        folder = folder.parent
    if not above.is_dir:
        raise BadInput(f"{shown_path(folder)} is a file, not a folder: pass another {flag}")
    return path


def write_file(path: str | os.PathLike[str], data: bytes, command: str, flag: str = "--out",
               inputs: Iterable[str | os.PathLike[str] | None] = (), force: bool = False) -> Path:
    """One file, atomically (see write_files)."""
    return write_files([Output(Path(path), data, flag)], command, inputs, force)[0]


def write_files(outputs: Sequence[Output], command: str, inputs: Iterable[str | os.PathLike[str] | None] = (),
                force: bool = False) -> list[Path]:
    """Write a group of files all or nothing; returns their paths in order. Raises BadInput for a
    taken or unusable name, RuntimeFailure for a failed write; SIGTERM mid-write ends the process
    as SIGTERM would, after removing what was started."""
    if not outputs:
        return []
    inputs = list(inputs)
    names = [os.path.abspath(o.path) for o in outputs]
    if len(set(names)) != len(names):
        taken = next(o for o, n in zip(outputs, names) if names.count(n) > 1)
        raise BadInput(f"{taken.path} is named twice among the outputs: pass different file names")
    for o in outputs:
        check_new(o.path, command, o.flag, inputs, force)
    group = _Group(command, force)
    terminated = False
    with sigterm_raises():
        try:
            for o in outputs:
                group.stage(o)
            for o in outputs:
                group.place(o)
        except Terminated:
            group.undo()
            terminated = True
        except BaseException:  # a failed write, Ctrl-C: nothing of the group stays
            group.undo()
            raise
    if terminated:
        _end_as_terminated()
    group.settle()
    return [o.path for o in outputs]


def _end_as_terminated() -> None:
    """After the cleanup: die of SIGTERM as the default handler would (exit 143 in a shell), or
    hand Terminated on to a caller that installed a handler of its own."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGTERM)
    raise Terminated()


def _file_mode() -> int:
    """rw-r--r-- narrowed by the umask (mkstemp alone would make files 0600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o644 & ~mask


def _failure(exc: OSError, path: Path, flag: str) -> Exception:
    reason = exc.strerror or str(exc)
    if exc.errno in _BAD_PATH:
        return BadInput(f"cannot write {shown_path(path)}: {reason}; pass another {flag}")
    return RuntimeFailure(f"cannot write {shown_path(path)}: {reason}")


def _remove(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class _Group:
    """The temporaries, placed files and made folders of one write_files call, to undo on failure."""

    def __init__(self, command: str, force: bool):
        self.command, self.force = command, force
        self.temporaries: dict[Path, str] = {}
        self.placed: list[Path] = []
        self.folders: list[Path] = []

    def _make_folders(self, folder: Path, flag: str) -> None:
        missing = []
        while not os.path.lexists(folder) and folder != folder.parent:
            missing.append(folder)
            folder = folder.parent
        for made in reversed(missing):
            try:
                os.mkdir(made)
            except FileExistsError:
                continue
            except OSError as exc:
                raise _failure(exc, made, flag) from None
            self.folders.append(made)

    def stage(self, o: Output) -> None:
        """The bytes in a fsynced hidden temporary beside the target."""
        path = Path(o.path)
        self._make_folders(path.parent, o.flag)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:_PREFIX_MAX]}.", suffix=".tmp", dir=path.parent)
        except OSError as exc:
            raise _failure(exc, path, o.flag) from None
        self.temporaries[path] = tmp
        try:
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), _file_mode())
                fh.write(o.data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise _failure(exc, path, o.flag) from None

    def place(self, o: Output) -> None:
        path = Path(o.path)
        tmp = self.temporaries[path]
        try:
            if self.force:
                os.replace(tmp, path)
            else:
                _link_new(tmp, path)
        except FileExistsError:  # taken since the check: someone else's file, left as it is
            raise BadInput(f"{path} already exists: {self.command} never overwrites a file; pass --force to "
                           f"replace it, or another {o.flag}") from None
        except OSError as exc:
            raise _failure(exc, path, o.flag) from None
        self.placed.append(path)

    def undo(self) -> None:
        for tmp in self.temporaries.values():
            _remove(tmp)
        for path in self.placed:
            _remove(path)
        for folder in reversed(self.folders):
            try:
                os.rmdir(folder)
            except OSError:
                pass

    def settle(self) -> None:
        """Drop the temporaries' second names, make the new names durable."""
        for tmp in self.temporaries.values():
            _remove(tmp)
        for folder in {p.parent for p in self.placed}:
            try:
                fd = os.open(folder, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)


def _link_new(tmp: str, path: Path) -> None:
    """Link the temporary to `path`, which must not exist (FileExistsError otherwise). Where the
    file system has no hard links, reserve the name exclusively and rename over the reservation."""
    try:
        os.link(tmp, path)
        return
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        os.replace(tmp, path)
    except BaseException:
        _remove(path)
        raise
