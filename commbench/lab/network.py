"""The lab: an emulated cluster on one machine.

N hosts are network namespaces, each with an `eth0` veth whose other end is a port of one Linux
bridge. Every link has a tbf rate (both directions: the host's eth0 and its bridge port) and an
MTU. Addresses come from a private subnet and exist only inside the namespaces: the bridge has
none, so nothing outside the lab can reach the hosts or be reached by them.

Everything `up` creates is recorded in a state file *before* it is created, so `down` removes
exactly that, also after a crash, and never anything it did not make.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import os
import subprocess
from pathlib import Path

from commbench.core.errors import BadInput, RuntimeFailure
from commbench.lab import state as labstate
from commbench.lab.state import NS_IFACE, LabNode, LabState, load_state, require_root, require_state, save_state, state_path

DEFAULT_SUBNET = "10.231.0.0/24"
SWITCH_MTU = 9216
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit)$", re.IGNORECASE)
_RATE_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_rate(text: str) -> float:
    """'1gbit' -> 1e9 bits per second (tc's units)."""
    m = _RATE.match(str(text).strip())
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"rate {text!r} is not a tc rate: use e.g. 100mbit, 1gbit, 800mbit")
    return float(m.group(1)) * _RATE_BITS[m.group(2).lower()]


def check_mtu(mtu: int) -> int:
    if not 576 <= mtu <= 65535:
        raise BadInput(f"--mtu {mtu} is outside 576..65535: use e.g. 1500 or 9000")
    return mtu


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip"] + (["-n", netns] if netns else []) + list(args)
    return _run(argv, check)


def _tc(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["tc"] + (["-n", netns] if netns else []) + list(args)
    return _run(argv, check)


def _run(argv: list[str], check: bool) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeFailure(f"{' '.join(argv)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _link_exists(name: str) -> bool:
    return _ip("link", "show", "dev", name, check=False).returncode == 0


def _netns_exists(name: str) -> bool:
    return (Path("/var/run/netns") / name).exists()


def node_names(n: int) -> list[str]:
    return [f"{labstate.PREFIX}node{i + 1}" for i in range(n)]


def _shape(node: LabNode, state: LabState, retune: bool = False) -> None:
    """Apply the node's rate (tbf, both directions) and MTU; with `retune` (or where they are on)
    also its frame counting and receive steering."""
    bits = parse_rate(node.rate)
    # burst: at least 2 ms of traffic and 32 full frames, so tbf itself never limits a TCP window
    burst = int(max(bits / 8 * 0.002, 32 * (node.mtu + 14)))
    if node.queue:
        # tbf splits a packet longer than its burst into frames, so that a queue of N bytes holds
        # frames, as a switch's buffer does (a whole 64 KiB GSO packet would never fit a tiny one)
        burst = min(burst, max(30000, 2 * (node.mtu + 14)))
    queue = ["limit", str(node.queue)] if node.queue else ["latency", "100ms"]
    tbf = ["root", "tbf", "rate", node.rate, "burst", str(burst), *queue]
    _ip("link", "set", "dev", NS_IFACE, "mtu", str(node.mtu), netns=node.name)
    # The bridge ports are the switch: jumbo-capable (9216, as switches are usually set), so
    # the hosts' own eth0 MTU decides, and a host may change it itself (sweep --mtu).
    _ip("link", "set", "dev", node.port, "mtu", str(max(SWITCH_MTU, node.mtu)))
    _tc("qdisc", "replace", "dev", NS_IFACE, *tbf, netns=node.name)
    _tc("qdisc", "replace", "dev", node.port, *tbf)
    if retune or node.frames:
        _offload(node, segment=not node.frames)
    if retune or node.frames or node.queue:
        _steer(node, on=bool(node.frames or node.queue))


def _offload(node: LabNode, segment: bool) -> None:
    """--frames: TCP segmentation offload off on both ends, so the kernel cuts each GSO packet
    into frames before veth counts it: eth0's tx_bytes then holds every frame's headers, as a
    NIC's counter does (veth counts a 64 KiB GSO packet once, with one set of headers)."""
    if not segment and shutil.which("ethtool") is None:
        raise BadInput("--frames needs ethtool (it turns TCP segmentation offload off): apt-get install ethtool")
    if shutil.which("ethtool") is None:
        return  # nothing was turned off without it
    state = "on" if segment else "off"
    for netns, dev in ((node.name, NS_IFACE), (None, node.port)):
        argv = (["ip", "netns", "exec", netns] if netns else []) + ["ethtool", "-K", dev, "tso", state]
        _run(argv, check=True)


def _steer(node: LabNode, on: bool) -> None:
    """Receive packet steering on both receiving ends of the link (all CPUs, by flow hash). Frames
    that tbf split off one packet may be sent from two CPUs; each CPU's receive backlog would
    then hand them to TCP out of order, and TCP retransmits what it takes for lost (SACK
    reordering): a trouble counter on a healthy link. Steering by flow keeps every flow's
    frames on one CPU, in order."""
    mask = f"{(1 << (os.cpu_count() or 1)) - 1:x}" if on else "0"
    for netns, dev in ((node.name, NS_IFACE), (None, node.port)):
        path = f"/sys/class/net/{dev}/queues/rx-0/rps_cpus"
        # `ip netns exec` mounts the namespace's own sysfs; the root namespace's is /sys itself
        argv = (["ip", "netns", "exec", netns] if netns else []) + ["tee", path]
        proc = subprocess.run(argv, input=mask + "\n", capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeFailure(f"cannot set {path} on {netns or 'the root namespace'}: {proc.stderr.strip()}")


def up(nodes: int, rate: str = "1gbit", mtu: int = 1500, subnet: str = DEFAULT_SUBNET, frames: bool = False) -> LabState:
    require_root()
    if load_state() is not None:
        raise BadInput("a lab is already up: 'commbench lab status' shows it, 'commbench lab down' removes it")
    if not re.fullmatch(r"[a-z][a-z0-9]{0,5}", labstate.PREFIX):
        raise BadInput(f"COMMBENCH_LAB_PREFIX={labstate.PREFIX!r} must be 1-6 lowercase letters/digits: e.g. cb")
    if not 2 <= nodes <= 64:
        raise BadInput(f"--nodes {nodes} is outside 2..64: a lab needs at least 2 hosts")
    parse_rate(rate)
    check_mtu(mtu)
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError:
        raise BadInput(f"--subnet {subnet!r} is not a network: use e.g. 10.231.0.0/24") from None
    if not net.is_private or net.num_addresses < nodes + 2:
        raise BadInput(f"--subnet {subnet} must be a private range with room for {nodes} hosts")
    names = node_names(nodes)
    ports = [f"{labstate.PREFIX}veth{i + 1}" for i in range(nodes)]
    taken = [n for n in names if _netns_exists(n)] + [p for p in [labstate.BRIDGE] + ports if _link_exists(p)]
    if taken:
        raise BadInput(f"{taken[0]} already exists and was not made by this lab: remove it or pick another machine")

    hosts = list(net.hosts())
    state = LabState(subnet=str(net), bridge=labstate.BRIDGE)
    if not labstate.STATE_DIR.exists():
        state.files.append(str(labstate.STATE_DIR))  # ours: down removes it, with whatever the lab put in it
    save_state(state)
    try:
        state.created.append(["bridge", labstate.BRIDGE])
        save_state(state)
        _ip("link", "add", labstate.BRIDGE, "type", "bridge")
        _ip("link", "set", labstate.BRIDGE, "up")
        for i, name in enumerate(names):
            node = LabNode(name, str(hosts[i]), ports[i], mtu, rate, frames=frames)
            state.created.append(["netns", name])
            state.created.append(["link", node.port])
            state.nodes.append(node)
            save_state(state)
            _ip("netns", "add", name)
            _ip("link", "add", node.port, "type", "veth", "peer", "name", NS_IFACE, "netns", name)
            _ip("link", "set", node.port, "master", labstate.BRIDGE)
            _ip("link", "set", node.port, "up")
            _ip("link", "set", "lo", "up", netns=name)
            _ip("addr", "add", f"{node.addr}/{net.prefixlen}", "dev", NS_IFACE, netns=name)
            _ip("link", "set", NS_IFACE, "up", netns=name)
            _shape(node, state)
    except BaseException:
        down()
        raise
    write_hosts_file(state)
    return state


def write_hosts_file(state: LabState) -> Path:
    path = labstate.STATE_DIR / "hosts"
    lines = ["127.0.0.1 localhost"] + [f"{n.addr} {n.name}" for n in state.nodes]
    path.write_text("\n".join(lines) + "\n")
    if str(path) not in state.files:
        state.files.append(str(path))
        save_state(state)
    return path


def set_link(node: str | None = None, mtu: int | None = None, rate: str | None = None, queue: int | None = None,
             frames: bool | None = None) -> LabState:
    """Change links live. queue: tbf's queue in bytes (0: back to 100 ms of traffic); frames: count
    frames as a NIC does (see _shape)."""
    require_root()
    state = require_state()
    if mtu is None and rate is None and queue is None and frames is None:
        raise BadInput("lab set changes nothing: pass --mtu, --rate, --queue and/or --frames")
    if mtu is not None:
        check_mtu(mtu)
    if rate is not None:
        parse_rate(rate)
    if queue is not None and queue != 0 and not 1600 <= queue <= 1 << 30:
        raise BadInput(f"--queue {queue} must be 0 (the default queue) or 1600..1073741824 bytes: e.g. 4000")
    targets = [state.node(node)] if node else state.nodes
    for n in targets:
        n.mtu = mtu if mtu is not None else n.mtu
        n.rate = rate if rate is not None else n.rate
        n.queue = (queue or None) if queue is not None else n.queue
        n.frames = frames if frames is not None else n.frames
        _shape(n, state, retune=frames is not None or queue is not None)
    save_state(state)
    return state


def live_facts(state: LabState) -> list[dict]:
    """What the kernel says now, per host (not what the state file remembers)."""
    out = []
    for n in state.nodes:
        link = json.loads(_ip("-j", "link", "show", "dev", NS_IFACE, netns=n.name).stdout or "[{}]")[0]
        qdisc = json.loads(_tc("-j", "qdisc", "show", "dev", NS_IFACE, netns=n.name).stdout or "[]")
        tbf = next((q for q in qdisc if q.get("kind") == "tbf"), {})
        rate_bps = tbf.get("options", {}).get("rate")
        out.append({"host": n.name, "addr": n.addr, "iface": NS_IFACE, "mtu": link.get("mtu"),
                    "state": link.get("operstate"), "rate_bits": rate_bps * 8 if isinstance(rate_bps, (int, float)) else None,
                    "rate": n.rate})
    return out


def down() -> list[str]:
    """Remove what the state file says `up` made (daemons first); return what was removed. Only the
    lab's own entries count (labstate.load_for_down): a namespace or link without the lab's prefix,
    a file outside its state folder, a process that is not its daemon is left alone, said on stderr."""
    require_root()
    state, skipped = labstate.load_for_down()
    if state is None:
        return []
    removed = []
    from commbench.lab import processes as labprocs
    from commbench.lab import slurm as labslurm

    labslurm.cancel_jobs(state)  # a job step outlives its slurmd: end the jobs while slurmctld runs
    removed += labprocs.stop_recorded(state)
    for kind, name in reversed(state.created):
        if not labstate.owns_resource(kind, name):
            continue  # load_for_down dropped it already; never delete what the lab does not make
        if kind == "netns" and _netns_exists(name):
            _ip("netns", "del", name, check=False)
            removed.append(f"netns {name}")
        elif kind in ("link", "bridge") and _link_exists(name):
            _ip("link", "del", name, check=False)
            removed.append(f"{kind} {name}")
    state_path().unlink(missing_ok=True)
    for f in reversed(state.files):
        labstate.remove_path(f)
    labstate.report_skipped(skipped)
    return removed
