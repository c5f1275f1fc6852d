"""The lab's state: which hosts exist, what `up` created (recorded before each creation), the
daemons it started; one JSON file per lab under STATE_DIR, written atomically.

The file is checked whenever it is read: JSON, the fields and types LabState and LabNode hold, and
names this lab makes (`<prefix>node<N>` namespaces, `<prefix>veth<N>` links and, on a multi-rail lab,
`<prefix>veth<N>r<R>` for rail R, the `<prefix>br0` bridge and `<prefix>br<R>` per further rail,
munged/slurmctld/slurmd daemons, files inside STATE_DIR). A damaged file is refused with one
line; `lab down` reads it with `load_for_down`, which drops every entry that is not the lab's own
(and says so), so a hand-edited or foreign file never makes it delete anything else.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.inputs import check_path, shown_path

# One lab per (prefix, state folder); tests run their own labs side by side with other prefixes.
PREFIX = os.environ.get("COMMBENCH_LAB_PREFIX", "cb")
STATE_DIR = Path(os.path.abspath(os.environ.get("COMMBENCH_LAB_DIR", f"/run/commbench-lab-{PREFIX}")))
BRIDGE = f"{PREFIX}br0"
NS_IFACE = "eth0"
MAX_RAILS = 8  # eth0..eth7: the NICs of a GPU node
RESOURCE_KINDS = ("bridge", "netns", "link")  # what `up` creates, in creation order per host
DAEMON_NAMES = ("munged", "slurmctld", "slurmd")  # the programs `lab slurm up` starts
STATE_MAX_BYTES = 1 << 20  # a 64-host lab with Slurm writes about 40 KB


@dataclass
class LabRail:
    """Rail R > 0 of a host: eth<R> inside the namespace, its port on bridge `<prefix>br<R>`."""
    iface: str
    addr: str
    port: str
    mtu: int
    rate: str
    queue: int | None = None
    frames: bool = False


@dataclass
class LabNode:
    name: str  # namespace name and hostname
    addr: str  # address inside the namespace, no prefix length
    port: str  # the bridge-side veth in the root namespace
    mtu: int
    rate: str
    queue: int | None = None  # tbf's queue in bytes (lab set --queue); None: 100 ms of traffic
    frames: bool = False  # tbf splits every GSO packet, so eth0's counters count frames as a NIC does
    rails: list[LabRail] = field(default_factory=list)  # eth1..: the host's further rails, in order

    @property
    def iface(self) -> str:
        return NS_IFACE  # the node's own fields are rail 0's

    def links(self) -> list:
        """Every rail of the host, eth0 first (the node itself stands for rail 0)."""
        return [self, *self.rails]


@dataclass
class LabState:
    subnet: str
    bridge: str
    nodes: list[LabNode] = field(default_factory=list)
    # Resources in creation order: ("bridge"|"netns"|"link", name). down() removes them in reverse.
    created: list[list[str]] = field(default_factory=list)
    daemons: list[dict] = field(default_factory=list)  # {"name", "pid", "start"} for slurm/munge
    files: list[str] = field(default_factory=list)
    rails: int = 1  # NICs per host: eth0..eth<rails-1>, rail R on bridge <prefix>br<R>

    def node(self, name: str) -> LabNode:
        """A host by its name (cbnode3) or its number (3), as --rail takes eth1 or 1 (issue #40)."""
        text = str(name).strip()
        wanted = f"{PREFIX}node{int(text)}" if text.isdigit() and str(int(text)) == text else text
        for n in self.nodes:
            if n.name == wanted:
                return n
        raise BadInput(f"no lab host {name!r}: the hosts are {', '.join(n.name for n in self.nodes)} "
                       f"(or their numbers, 1..{len(self.nodes)})")


def state_path() -> Path:
    return STATE_DIR / "state.json"


HOSTS_NAME = "hosts"  # the lab's /etc/hosts for its hosts; lab/nsexec.py's NSSWITCH_NAME lies beside it


def hosts_file(state: LabState) -> str:
    """The lab's hosts file: the last file of its records named `hosts` (`lab up` writes it in the
    state folder, or in a folder of its own there when the state folder holds a `hosts` or
    `nsswitch.conf` of someone else's); STATE_DIR/hosts for a lab that recorded none."""
    for f in reversed(state.files):
        if os.path.basename(f) == HOSTS_NAME and owns_path(f):
            return f
    return str(STATE_DIR / HOSTS_NAME)


# ---------------------------------------------------------------------------------------------
# What is the lab's own
# ---------------------------------------------------------------------------------------------


def bridge_name(rail: int) -> str:
    return BRIDGE if rail == 0 else f"{PREFIX}br{rail}"


def port_name(node_index: int, rail: int) -> str:
    """The bridge-side veth of host `node_index` (from 1) on `rail`; rail 0 keeps the one-rail name."""
    return f"{PREFIX}veth{node_index}" + (f"r{rail}" if rail else "")


def owns_resource(kind: object, name: object) -> bool:
    """A network object this lab makes: its bridges (`<prefix>br0`, `<prefix>br<R>` for rails 1..7),
    `<prefix>node<N>` namespaces, `<prefix>veth<N>` and `<prefix>veth<N>r<R>` links."""
    if not isinstance(name, str):
        return False
    rail = f"[1-{MAX_RAILS - 1}]"
    if kind == "bridge":
        return name == BRIDGE or re.fullmatch(rf"{re.escape(PREFIX)}br{rail}", name) is not None
    if kind == "netns":
        return re.fullmatch(rf"{re.escape(PREFIX)}node[1-9][0-9]*", name) is not None
    if kind == "link":
        return re.fullmatch(rf"{re.escape(PREFIX)}veth[1-9][0-9]*(r{rail})?", name) is not None
    return False


def owns_daemon(entry: object) -> bool:
    """A daemon entry `lab slurm up` writes: munged, slurmctld or `slurmd <host>`, a real pid."""
    if not isinstance(entry, dict):
        return False
    name = entry.get("name")
    words = name.split(" ") if isinstance(name, str) else []
    pid = entry.get("pid")
    if not words or words[0] not in DAEMON_NAMES or not isinstance(pid, int) or isinstance(pid, bool):
        return False
    host_ok = len(words) == 1 if words[0] != "slurmd" else len(words) == 2 and owns_resource("netns", words[1])
    return host_ok and pid > 1 and pid != os.getpid()


def _root() -> str:
    return os.path.abspath(str(STATE_DIR))


def owns_path(path: object) -> bool:
    """STATE_DIR itself or a path inside it, also once symbolic links in its folders are followed."""
    if not isinstance(path, str) or not path or "\0" in path or not os.path.isabs(path):
        return False
    root, p = _root(), os.path.normpath(path)
    if p == root:
        return True
    if not p.startswith(root.rstrip(os.sep) + os.sep):
        return False
    real_root, real_parent = os.path.realpath(root), os.path.realpath(os.path.dirname(p))
    return real_parent == real_root or real_parent.startswith(real_root.rstrip(os.sep) + os.sep)


def remove_path(path: str) -> bool:
    """Remove a file or folder the lab made (a link itself, never what it points at); refuse, and
    remove nothing, for any path that is not owns_path's. True if it was the lab's."""
    if not owns_path(path):
        return False
    try:
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise RuntimeFailure(f"cannot remove {path}: {exc.strerror}") from None
    return True


# ---------------------------------------------------------------------------------------------
# Reading and writing the file
# ---------------------------------------------------------------------------------------------


# Folders of the system: the state folder may be none of these, nor inside one (lab down removes the
# folder it made and the files it wrote; `hosts` in /etc/avahi is the system's). /run, /tmp, /var/tmp,
# /home and /mnt hold folders of anyone's own, so only the folders themselves are refused there.
SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev",
                "/proc", "/sys", "/var", "/opt", "/srv", "/snap", "/root/.ssh", "/run/netns", "/run/systemd",
                "/run/user", "/run/lock", "/run/dbus", "/run/udev")
SYSTEM_FOLDERS = ("/", "/run", "/tmp", "/var/tmp", "/home", "/mnt", "/media", "/root")
_OWN_TREES = ("/var/tmp",)  # under /var, folders of anyone's own


def system_folder(real: str, home: str | None) -> str | None:
    """The system folder (or tree) `real` (a resolved path) is or lies in, None when it is not one."""
    if real in SYSTEM_FOLDERS or real == home or (home is not None and real == os.path.dirname(home)):
        return real
    if any(real.startswith(t + "/") for t in _OWN_TREES):
        return None
    return next((t for t in SYSTEM_TREES if real == t or real.startswith(t + "/")), None)


def _check_dir() -> None:
    """STATE_DIR must be a folder (or not exist yet, under folders), one that can be looked at, and
    not a system or home folder."""
    for p in (STATE_DIR, *STATE_DIR.parents):
        facts = check_path(p, "COMMBENCH_LAB_DIR: the lab state folder")
        if facts.lexists:
            if not facts.is_dir:
                raise BadInput(f"the lab state folder {STATE_DIR} is under a file, not a folder ({p}): move {p} "
                               f"away, or point COMMBENCH_LAB_DIR at a folder of the lab's own"
                               if p != STATE_DIR else f"the lab state folder {STATE_DIR} is a file, not a folder: "
                               f"move it away, or point COMMBENCH_LAB_DIR at a folder of the lab's own")
            break
    real = os.path.realpath(_root())
    try:
        home: str | None = os.path.realpath(Path.home())
    except (RuntimeError, KeyError):
        home = None
    system = system_folder(real, home)
    if system is not None:
        inside = "" if system == real else f" (inside {system})"
        raise BadInput(f"COMMBENCH_LAB_DIR={shown_path(STATE_DIR)} is a system or home folder{inside}, not one of "
                       f"the lab's own (lab down removes the folder it made): use e.g. /run/commbench-lab-{PREFIX}")


def _damaged(why: str) -> BadInput:
    path = state_path()
    return BadInput(f"the lab state file {path} is damaged ({why}): remove the lab's namespaces and links by hand "
                    f"(ip netns list; ip link show: names starting with {PREFIX}) and delete {path}")


# A field's JSON type: one Python type, or a tuple of them (a whole number or null).
FieldType = type | tuple[type, ...]
# A JSON object whose fields _check_fields has checked against a table of FieldTypes: its values are
# what json.loads made of them (Any), known by that check to have the table's types.
JsonObject = dict[str, Any]

_TYPE_WORDS: dict[FieldType, str] = {str: "text", int: "a whole number", bool: "true or false", list: "a list",
               (int, type(None)): "a whole number or null"}


def _typed(value: object, kind: FieldType) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        return False  # JSON true is not an MTU
    return isinstance(value, kinds)


def _check_fields(raw: object, types: Mapping[str, FieldType], required: set[str], what: str) -> JsonObject:
    if not isinstance(raw, dict):
        raise _damaged(f"{what} is not an object")
    unknown = sorted(set(raw) - set(types))
    if unknown:
        raise _damaged(f"{what} has an unknown field {unknown[0][:40]!r}")
    missing = sorted(required - set(raw))
    if missing:
        raise _damaged(f"{what} has no {missing[0]!r}")
    for name, kind in types.items():
        if name in raw and not _typed(raw[name], kind):
            raise _damaged(f"{what}'s {name!r} is not {_TYPE_WORDS.get(kind, 'of the right type')}")
    return raw


_NODE_TYPES: dict[str, FieldType] = {"name": str, "addr": str, "port": str, "mtu": int, "rate": str,
                                     "queue": (int, type(None)), "frames": bool, "rails": list}
_RAIL_TYPES: dict[str, FieldType] = {"iface": str, "addr": str, "port": str, "mtu": int, "rate": str,
                                     "queue": (int, type(None)), "frames": bool}
_STATE_TYPES: dict[str, FieldType] = {"subnet": str, "bridge": str, "nodes": list, "created": list,
                                      "daemons": list, "files": list, "rails": int}


def _check_addr(addr: str, what: str) -> None:
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        raise _damaged(f"{what}'s address {addr[:40]!r} is not an IP address") from None


def _parse_node(entry: object, i: int, rails: int) -> LabNode:
    """Host i's entry (from 0): rail 0 in its own fields, rails 1.. under 'rails', eth1, eth2, ... in order."""
    n = _check_fields(entry, _NODE_TYPES, {"name", "addr", "port", "mtu", "rate"}, f"host {i + 1}")
    _check_addr(n["addr"], f"host {i + 1}")
    extra = n.get("rails", [])
    if len(extra) != rails - 1:
        raise _damaged(f"host {i + 1} has {len(extra) + 1} rails, the lab {rails}")
    parsed = []
    for r, raw_rail in enumerate(extra, start=1):
        what = f"host {i + 1} rail {r}"
        rail = _check_fields(raw_rail, _RAIL_TYPES, {"iface", "addr", "port", "mtu", "rate"}, what)
        if rail["iface"] != f"eth{r}":
            raise _damaged(f"{what} is {rail['iface'][:40]!r}, not eth{r}")
        _check_addr(rail["addr"], what)
        parsed.append(LabRail(**rail))
    return LabNode(**{**n, "rails": parsed})


def _parse(doc: object) -> LabState:
    """The file's JSON as a LabState, or a BadInput naming what is wrong (types and shape only)."""
    raw = _check_fields(doc, _STATE_TYPES, {"subnet", "bridge"}, "the file")
    try:
        ipaddress.ip_network(raw["subnet"])
    except ValueError:
        raise _damaged(f"subnet {raw['subnet'][:40]!r} is not a network") from None
    rails = raw.get("rails", 1)  # a file from before rails: one
    if not 1 <= rails <= MAX_RAILS:
        raise _damaged(f"rails {rails} is outside 1..{MAX_RAILS}")
    nodes = [_parse_node(n, i, rails) for i, n in enumerate(raw.get("nodes", []))]
    for item in raw.get("created", []):
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise _damaged("an entry of 'created' is not a [kind, name] pair")
    for d in raw.get("daemons", []):
        if not (isinstance(d, dict) and isinstance(d.get("name"), str) and _typed(d.get("pid"), int)
                and _typed(d.get("start"), (int, float))):
            raise _damaged("an entry of 'daemons' is not {name, pid, start}")
    if not all(isinstance(f, str) for f in raw.get("files", [])):
        raise _damaged("an entry of 'files' is not a path")
    return LabState(**{**raw, "nodes": nodes})


def _read() -> LabState | None:
    _check_dir()
    path = state_path()
    if not check_path(path, "the lab state file").lexists:
        return None
    try:
        if path.stat().st_size > STATE_MAX_BYTES:
            raise _damaged(f"{path.stat().st_size} bytes, more than a lab's state ever holds")
        text = path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise BadInput(f"the lab state file {path} is a folder, not a file: remove it (rm -r {path}) if no "
                       f"lab is up, or point COMMBENCH_LAB_DIR elsewhere") from None
    except UnicodeDecodeError:
        raise _damaged("not UTF-8 text") from None
    except OSError as exc:
        raise BadInput(f"cannot read the lab state file {path}: {exc.strerror}: fix its permissions or "
                       f"delete it") from None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        raise _damaged("not JSON: cut short or edited") from None
    return _parse(raw)


def foreign_entries(state: LabState) -> list[str]:
    """Every entry of `state` that names something this lab does not make, as text."""
    out = [f"bridge {state.bridge!r}"] if state.bridge != BRIDGE else []
    out += [f"host {n.name!r}" for n in state.nodes if not owns_resource("netns", n.name)]
    out += [f"link {r.port!r}" for n in state.nodes for r in n.links() if not owns_resource("link", r.port)]
    out += [f"{kind if kind in RESOURCE_KINDS else 'object'} {name!r}" for kind, name in state.created
            if not owns_resource(kind, name)]
    out += [f"process {str(d.get('name'))[:40]!r} (pid {d.get('pid')})" for d in state.daemons if not owns_daemon(d)]
    out += [f"file {f[:200]!r}" for f in state.files if not owns_path(f)]
    return out


def load_state() -> LabState | None:
    """The lab's state, checked; None if no lab is up. Damaged, or naming what is not the lab's:
    BadInput, one line."""
    state = _read()
    if state is None:
        return None
    foreign = foreign_entries(state)
    if foreign:
        raise BadInput(f"the lab state file {state_path()} lists {foreign[0]}, which this lab ({PREFIX}) does not "
                       f"make: 'commbench lab down' removes only the lab's own namespaces, links, daemons and "
                       f"files and skips the rest")
    return state


def load_for_down() -> tuple[LabState | None, list[str]]:
    """The state with only the lab's own entries, and what was left out (for `lab down`)."""
    state = _read()
    if state is None:
        return None, []
    skipped = foreign_entries(state)
    state.nodes = [n for n in state.nodes if owns_resource("netns", n.name)
                   and all(owns_resource("link", r.port) for r in n.links())]
    state.created = [[k, n] for k, n in state.created if owns_resource(k, n)]
    state.daemons = [d for d in state.daemons if owns_daemon(d)]
    state.files = [f for f in state.files if owns_path(f)]
    return state, skipped


def report_skipped(skipped: list[str]) -> None:
    """One line on stderr naming what `lab down` left alone because it was not the lab's."""
    if skipped:
        more = f" and {len(skipped) - 12} more" if len(skipped) > 12 else ""
        print(f"commbench: lab down left {len(skipped)} entries of {state_path()} alone, not made by this lab "
              f"({PREFIX}): {', '.join(skipped[:12])}{more}; remove them by hand if they are yours",
              file=sys.stderr, flush=True)


def _as_json(state: LabState) -> dict:
    """The file's content; a one-rail lab's file is what it was before rails (no 'rails' fields),
    so older commbench versions still read it."""
    doc = asdict(state)
    if state.rails == 1:
        doc.pop("rails")
        for n in doc["nodes"]:
            if not n["rails"]:
                n.pop("rails")
    return doc


def save_state(state: LabState) -> None:
    _check_dir()
    tmp = None
    try:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        # A temporary of its own (never a `state.tmp` that may be someone else's), renamed into place.
        fd, tmp = tempfile.mkstemp(prefix=".state.", suffix=".tmp", dir=STATE_DIR)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(_as_json(state), indent=2))
        os.replace(tmp, state_path())
    except OSError as exc:
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)
        raise RuntimeFailure(f"cannot write the lab state file {state_path()}: {exc.strerror}") from None


def require_root() -> None:
    if os.geteuid() != 0:
        raise BadInput("commbench lab needs root (it creates network namespaces, veths and qdiscs): "
                       "run it as root, e.g. with sudo")


def require_state() -> LabState:
    state = load_state()
    if state is None:
        raise BadInput("no lab is up: start one with 'commbench lab up --nodes 2'")
    return state
