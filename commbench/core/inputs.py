"""Reading a user's input file (a ds_config.json, a bands file, an nccl-tests log): the one place
that turns a missing file, a folder, an unreadable file or bytes that are not text into one line
that names the file and the fix. Each caller brings its own words as an InputMessages."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from commbench.core.errors import BadInput


@dataclass(frozen=True)
class InputMessages:
    """Message templates; {name} is the file as given, {error} the OS's reason, {byte} the offset
    of the first byte that is not UTF-8."""

    missing: str
    folder: str
    unreadable: str = "cannot read {name}: {error}: check the path and its permissions"
    not_text: str = "{name} is not UTF-8 text (byte {byte}): save it as UTF-8"


def read_bytes(path: str | os.PathLike, messages: InputMessages, name: str | None = None) -> bytes:
    """The file's bytes, or BadInput with the matching message. `name`: how to show the file
    (default: the path as given)."""
    shown = str(path) if name is None else name
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise BadInput(messages.missing.format(name=shown)) from None
    except IsADirectoryError:
        raise BadInput(messages.folder.format(name=shown)) from None
    except OSError as exc:
        raise BadInput(messages.unreadable.format(name=shown, error=exc.strerror or exc)) from None


def read_text(path: str | os.PathLike, messages: InputMessages, name: str | None = None,
              encoding: str = "utf-8") -> str:
    """The file as text (a UTF-8 byte-order mark is dropped with encoding 'utf-8-sig')."""
    data = read_bytes(path, messages, name)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        shown = str(path) if name is None else name
        raise BadInput(messages.not_text.format(name=shown, byte=exc.start)) from None
