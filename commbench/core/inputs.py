"""Reading a user's input file (a ds_config.json, a bands file, an nccl-tests log): the one place
that turns a missing file, a folder, a pipe or device, a file too large, an unreadable file or bytes
that are not text into one line that names the file and the fix. Each caller brings its own words
and its kind's size limit as an InputMessages; the limits live here, side by side.

Only a regular file is read, and never more than its kind's limit: a named pipe would block
forever, /dev/zero never ends, and a huge file would take the memory of the host. A file of
another kind is refused before it is opened (opening a FIFO blocks until a writer appears), and
the check is made again on the open descriptor, so a file swapped in between is refused too.

Every look at a user's path (does it exist, is it a folder) goes through `path_facts`, which never
raises: a name longer than the file system takes (ENAMETOOLONG: Python 3.11's Path.exists() and
is_dir() raise it), a folder that cannot be searched (EACCES), a loop of links (ELOOP) or a NUL
byte come back as the reason, and `check_path` turns that reason into one line of bad input that
names the path (shortened when long) and the fix.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from commbench.core.errors import BadInput

# The most commbench reads of each kind of input file. Real files are far smaller (an nccl-tests
# log of a whole sweep is kilobytes to a few MB, a ds_config or a bands file a few KB): the limits
# only stop a file that is not what it claims before it takes the host's memory: an nccl-tests log
# at its limits (64 MiB, 50,000 rows) imports in about 20 s and 0.5 GB.
MAX_NCCL_TESTS_LOG_BYTES = 64 << 20
MAX_DS_CONFIG_BYTES = 4 << 20
MAX_BANDS_FILE_BYTES = 1 << 20  # YAML is parsed in Python: 1 MiB of it takes up to 15 s
# Bytes alone do not bound what a log becomes: every row line is two result rows, and a log of
# nothing but short rows would be millions. A real log holds tens to a few thousand.
MAX_NCCL_TESTS_LOG_ROWS = 50_000
# A -J document's values (its commas and containers, counted before json.loads builds them): 64 MiB
# of `{},{},...` would be 20 M dicts. A real one has about 25 values per result row.
MAX_NCCL_TESTS_JSON_VALUES = 2_000_000

# The deepest nesting commbench accepts in JSON or YAML it reads from a file (a ds_config is 3
# levels deep, a bands file 3, a results file's env / net / plan columns 3 or 4).
MAX_NESTING = 64
# What a value nested deeper is read as, where it is shown (report) or judged (compare: not an object).
UNREADABLE = f"(unreadable: nested deeper than {MAX_NESTING} levels)"

_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class InputMessages:
    """Message templates; {name} is the file as given, {error} the OS's reason, {byte} the offset
    of the first byte that is not UTF-8, {what} what the path is when it is not a regular file
    (a named pipe, a character device, ...), {size} and {limit} the file's size and `limit`,
    {kind} the `kind` of file."""

    missing: str
    folder: str
    kind: str  # "an nccl-tests log", "a ds_config", "a bands file": how the limit message names it
    limit: int  # bytes; one of the MAX_*_BYTES above
    unreadable: str = "cannot read {name}: {error}: check the path and its permissions"
    not_text: str = "{name} is not UTF-8 text (byte {byte}): save it as UTF-8"
    not_regular: str = ("{name} is {what}, not a regular file: pass a file on disk "
                        "(save the output to a file first)")
    too_big: str = ("{name} is larger than {limit}, the most commbench reads as {kind}: "
                    "check that it is the right file")


def named_file(label: str, kind: str, limit: int, missing: str, too_big: str, *, fix: str = "pass a YAML file",
               on_disk: str | None = None, folder: str = "a folder", unreadable: str | None = None,
               not_text: str | None = None) -> InputMessages:
    """The messages of a file the user names by what it is (`label`: "bands file", "check profile",
    "DeepSpeed config"): each opens with the label and the file, then says what to do: `missing` where
    it does not exist, `fix` where it is `folder`, `on_disk` (default: `fix` on disk) where it is a
    pipe or a device, `too_big` where it is over `limit`. The defaults are a YAML file's; `unreadable`
    and `not_text` are whole templates where the label's default lines do not fit."""
    named = f"{label} {{name}}"
    return InputMessages(
        missing=f"{named} does not exist: {missing}", folder=f"{named} is {folder}: {fix}",
        unreadable=unreadable or f"cannot read {named}: {{error}}",
        not_text=not_text or f"{{name}} is not UTF-8 text: pass a YAML {label}", kind=kind, limit=limit,
        not_regular=f"{named} is {{what}}, not a regular file: {on_disk or fix + ' on disk'}",
        too_big=f"{named} is larger than {{limit}}, the most commbench reads as {{kind}}: {too_big}")


def size_text(nbytes: int) -> str:
    """8 B, 4 KiB, 64 MiB (core/units.py format_size; imported late: units is larger than this)."""
    from commbench.core.units import format_size

    return format_size(nbytes)


def file_kind(mode: int) -> str | None:
    """What a path is when it is not a regular file ('a named pipe (FIFO)', ...); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, what in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return what
    return "not a file"


def _refuse_kind(mode: int, messages: InputMessages, shown: str) -> None:
    what = file_kind(mode)
    if what == "a folder":
        raise BadInput(messages.folder.format(name=shown))
    if what is not None:
        raise BadInput(messages.not_regular.format(name=shown, what=what))


def _too_big(messages: InputMessages, shown: str) -> BadInput:
    return BadInput(messages.too_big.format(name=shown, kind=messages.kind, limit=size_text(messages.limit)))


def read_bytes(path: str | os.PathLike[str], messages: InputMessages, name: str | None = None) -> bytes:
    """The file's bytes (at most messages.limit), or BadInput with the matching message. `name`:
    how to show the file (default: the path as given)."""
    shown = shown_path(path) if name is None else name
    try:
        _refuse_kind(os.stat(path).st_mode, messages, shown)
        # O_NONBLOCK: a FIFO put in place since the stat must not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise BadInput(messages.missing.format(name=shown)) from None
    except IsADirectoryError:
        raise BadInput(messages.folder.format(name=shown)) from None
    except OSError as exc:
        raise BadInput(messages.unreadable.format(name=shown, error=exc.strerror or exc)) from None
    try:
        st = os.fstat(fd)
        _refuse_kind(st.st_mode, messages, shown)
        if st.st_size > messages.limit:
            raise _too_big(messages, shown)
        chunks, total = [], 0
        while True:  # bounded: a file that grows (or lies about its size, as /proc does) stops here
            chunk = os.read(fd, min(_READ_CHUNK, messages.limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > messages.limit:
                raise _too_big(messages, shown)
        return b"".join(chunks)
    except OSError as exc:
        raise BadInput(messages.unreadable.format(name=shown, error=exc.strerror or exc)) from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], messages: InputMessages, name: str | None = None,
              encoding: str = "utf-8") -> str:
    """The file as text (a UTF-8 byte-order mark is dropped with encoding 'utf-8-sig')."""
    data = read_bytes(path, messages, name)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        shown = shown_path(path) if name is None else name
        raise BadInput(messages.not_text.format(name=shown, byte=exc.start)) from None


def check_regular(path: str | os.PathLike[str], message: str) -> None:
    """Refuse a path that is there but is not a regular file (a FIFO, a device, a socket) before
    anything opens it; `message` takes {name} and {what}. A missing path or a folder is the
    caller's to judge."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    what = file_kind(mode)
    if what is not None and what != "a folder":
        raise BadInput(message.format(name=str(path), what=what))


def nests_deeper(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether JSON text nests its brackets ([ and {), outside strings, more than `limit` levels: a
    linear scan that neither recurses nor builds the values (json.loads would recurse)."""
    import re

    if text.count("[") + text.count("{") <= limit:  # the usual case, at the speed of str.count
        return False
    # Strings first (their brackets are text), then everything but the brackets themselves.
    bare = re.sub(r'"(?:[^"\\]|\\.)*+"?', "", text, flags=re.DOTALL)
    depth = 0
    for m in re.finditer(r"[\[\]{}]+", bare):
        for ch in m.group():
            depth += 1 if ch in "[{" else -1
            if depth > limit:
                return True
    return False


# ---- looking at a path without raising -------------------------------------------------------

_SHOWN_MAX = 120  # a path longer than this is shown by its ends in a message (one line a person reads)


def shown_path(path: str | os.PathLike[str]) -> str:
    """A path as a message shows it: whole up to 120 characters, else its start and end and its length."""
    text = os.fsdecode(path) if isinstance(path, bytes) else str(path)  # str: a ResultFile's own name
    if len(text) <= _SHOWN_MAX:
        return text
    return f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


@dataclass(frozen=True)
class PathFacts:
    """What is at a path, looked at without raising: `mode` (st_mode, links followed; None when
    nothing is there or it could not be looked at), `link` (a symbolic link is there, maybe
    dangling) and `error` (why it could not be looked at: 'File name too long', ...; `errno`)."""

    mode: int | None = None
    link: bool = False
    error: str | None = None
    errno: int | None = None

    @property
    def exists(self) -> bool:
        return self.mode is not None

    @property
    def lexists(self) -> bool:
        return self.mode is not None or self.link

    @property
    def is_dir(self) -> bool:
        return self.mode is not None and stat.S_ISDIR(self.mode)

    @property
    def is_file(self) -> bool:
        return self.mode is not None and stat.S_ISREG(self.mode)


_ABSENT = (errno.ENOENT, errno.ENOTDIR)


def path_facts(path: str | os.PathLike[str]) -> PathFacts:
    """What is at `path`; never raises (see PathFacts). A name nothing is at (ENOENT, or a file
    where a folder should be: ENOTDIR) is absent, not an error."""
    try:
        lst = os.lstat(path)
    except ValueError:  # an embedded NUL byte
        return PathFacts(error="it holds a NUL byte", errno=errno.EINVAL)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return PathFacts()
        return PathFacts(error=exc.strerror or str(exc), errno=exc.errno)
    if not stat.S_ISLNK(lst.st_mode):
        return PathFacts(mode=lst.st_mode)
    try:
        return PathFacts(mode=os.stat(path).st_mode, link=True)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return PathFacts(link=True)  # a dangling link
        return PathFacts(link=True, error=exc.strerror or str(exc), errno=exc.errno)


def path_fix(code: int | None) -> str:
    """The fix for a path that cannot be looked at, by its errno."""
    if code == errno.ENAMETOOLONG:
        return "a file name holds at most 255 bytes and a path 4096: pass a shorter one"
    if code in (errno.EACCES, errno.EPERM):
        return "check the permissions of the folders above it, or pass another path"
    if code == errno.ELOOP:
        return "it loops through symbolic links: pass the real path"
    return "pass another path"


def check_path(path: str | os.PathLike[str], what: str) -> PathFacts:
    """path_facts, or one line of bad input when the path cannot be looked at: `what` names it
    ('--out', 'results file', 'COMMBENCH_LAB_DIR=')."""
    facts = path_facts(path)
    if facts.error is not None:
        raise BadInput(f"{what} {shown_path(path)}: {facts.error}: {path_fix(facts.errno)}")
    return facts
