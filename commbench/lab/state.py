"""The lab's state: which hosts exist, what `up` created (recorded before each creation), the
daemons it started; one JSON file per lab under STATE_DIR, written atomically."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from commbench.core.errors import BadInput

# One lab per (prefix, state folder); tests run their own labs side by side with other prefixes.
PREFIX = os.environ.get("COMMBENCH_LAB_PREFIX", "cb")
STATE_DIR = Path(os.environ.get("COMMBENCH_LAB_DIR", f"/run/commbench-lab-{PREFIX}"))
BRIDGE = f"{PREFIX}br0"
NS_IFACE = "eth0"


@dataclass
class LabNode:
    name: str  # namespace name and hostname
    addr: str  # address inside the namespace, no prefix length
    port: str  # the bridge-side veth in the root namespace
    mtu: int
    rate: str
    queue: int | None = None  # tbf's queue in bytes (lab set --queue); None: 100 ms of traffic
    frames: bool = False  # tbf splits every GSO packet, so eth0's counters count frames as a NIC does


@dataclass
class LabState:
    subnet: str
    bridge: str
    nodes: list[LabNode] = field(default_factory=list)
    # Resources in creation order: ("bridge"|"netns"|"link", name). down() removes them in reverse.
    created: list[list[str]] = field(default_factory=list)
    daemons: list[dict] = field(default_factory=list)  # {"name", "pid", "start"} for slurm/munge
    files: list[str] = field(default_factory=list)

    def node(self, name: str) -> LabNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise BadInput(f"no lab host {name!r}: the hosts are {', '.join(n.name for n in self.nodes)}")


def state_path() -> Path:
    return STATE_DIR / "state.json"


def load_state() -> LabState | None:
    path = state_path()
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    raw["nodes"] = [LabNode(**n) for n in raw["nodes"]]
    return LabState(**raw)


def save_state(state: LabState) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = state_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    os.replace(tmp, state_path())


def require_root() -> None:
    if os.geteuid() != 0:
        raise BadInput("commbench lab needs root (it creates network namespaces, veths and qdiscs): "
                       "run it as root, e.g. with sudo")


def require_state() -> LabState:
    state = load_state()
    if state is None:
        raise BadInput("no lab is up: start one with 'commbench lab up --nodes 2'")
    return state
