"""A bands file's YAML (docs/GATE.md), read so that no file can make commbench expand it.

The file is read through core/inputs.py (a regular file, at most MAX_BANDS_FILE_BYTES), then
parsed by a SafeLoader that builds only what is written: anchors and aliases (`&a`, `*a`, the
"billion laughs" that grow a few lines into gigabytes once a value is printed) are refused where
they appear, nesting stops at MAX_NESTING levels (a deeper document would exhaust the composer's
recursion), numbers longer than MAX_NUMBER_CHARS are refused before they are computed (a
sexagesimal `1:0:0:...` is a power of 60 per group), and a key given twice is refused (YAML keeps
the last silently). Every refusal is one BadInput line naming the file, line and column.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from commbench.analysis.points.frames import printable
from commbench.core.errors import BadInput
from commbench.core.inputs import MAX_BANDS_FILE_BYTES, MAX_NESTING, named_file, read_text

FORMAT_VERSION = 1  # of a bands file (docs/GATE.md)

# A band's numbers are a few characters (64M, 0.05, 1.5e-3): anything past this is not a number
# a bands file means.
MAX_NUMBER_CHARS = 64

FORMAT_HINT = "fix the file (docs/GATE.md has the format)"

BANDS_FILE = named_file("bands file", "a bands file", MAX_BANDS_FILE_BYTES,
                        missing="pass the file --suggest wrote, or write one (docs/GATE.md)",
                        too_big="pass the YAML file --suggest wrote (a few KB)")


def read_bands_text(path: str | os.PathLike) -> str:
    """The bands file's text, or BadInput (missing, a folder, a pipe or device, too large, not UTF-8)."""
    return read_text(path, BANDS_FILE)


class _Refused(Exception):
    """A part of the document this loader does not build: why, and where (a yaml Mark)."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.mark = mark


def _loader() -> type[Any]:
    """A SafeLoader subclass: no anchors or aliases, bounded nesting, bounded numbers, no key twice."""
    import yaml

    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise _Refused("YAML anchors and aliases (&name, *name) are not read in a bands file: "
                               "write each value out", event.start_mark)
            if self.depth >= MAX_NESTING:
                raise _Refused(f"nested deeper than {MAX_NESTING} levels: not a bands file", event.start_mark)
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    def number(base: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def construct(loader: Any, node: Any) -> Any:
            if len(node.value) > MAX_NUMBER_CHARS:
                raise _Refused(f"a number of {len(node.value)} characters: not a bands file (write at most "
                               f"{MAX_NUMBER_CHARS})",
                               node.start_mark)
            return base(loader, node)
        return construct

    def mapping(loader: Any, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                dup = key in seen
            except TypeError:  # an unhashable key: let the constructor say so
                break
            if dup:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice",
                                                        key_node.start_mark)
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    Loader.add_constructor("tag:yaml.org,2002:int", number(yaml.SafeLoader.construct_yaml_int))
    Loader.add_constructor("tag:yaml.org,2002:float", number(yaml.SafeLoader.construct_yaml_float))
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return Loader


def _at(mark: Any) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def load_yaml(text: str, source: str) -> Any:
    """The document as plain Python values, or one line of BadInput naming `source` and where."""
    import yaml

    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        where = f" line {exc.mark.line + 1}, column {exc.mark.column + 1}:" if exc.mark is not None else ""
        raise BadInput(f"{source}:{where} {exc.problem}") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInput(f"{source}: not valid YAML{_at(getattr(exc, 'problem_mark', None))}: "
                       f"{printable(str(problem))}: {FORMAT_HINT}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # a value YAML resolves but cannot build
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise BadInput(f"{source}: not valid YAML: {printable(why)}: {FORMAT_HINT}") from None


def bands_text(entries: list[dict], system: str, sources: Iterable[str], lower: float, upper: float | None,
                min_size: int) -> str:
    """The bands file that gate --suggest writes: a header saying where it came from, then the YAML."""
    import datetime as dt

    import yaml

    from commbench.analysis.gate import tolerance
    from commbench.core.units import format_size

    doc = {"version": FORMAT_VERSION, "system": printable(system), "defaults": {"lower": lower, "upper": upper},
           "entries": entries}
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=200, allow_unicode=False)
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = ", ".join(printable(str(s)) for s in sources) or "a results table"
    header = (f"# commbench reference bands (docs/GATE.md), suggested {when} from {names}.\n"
              f"# One entry per bandwidth-bound point of at least {format_size(min_size)}; busbw_GBps is the run's\n"
              f"# median; each lower covers {tolerance.Z:g} standard deviations of how much that median moves between\n"
              f"# runs (basis: from several runs, repetitions, or one run's CI), at least {lower:g}.\n"
              "# Review before use: this is a starting point, not a specification.\n")
    return header + body
