"""The lab: an emulated cluster on one machine, as network namespaces on one bridge per rail (`--rails
K`), veth links with a tbf rate and MTU per rail; `up`, `set` (`--rail`), and `down`, which removes
exactly what `up` made.

N hosts are network namespaces, each with an `eth0` veth whose other end is a port of one Linux
bridge. Every link has a tbf rate (both directions: the host's eth0 and its bridge port) and an
MTU. Addresses come from a private subnet and exist only inside the namespaces: the bridge has
none, so nothing outside the lab can reach the hosts or be reached by them.

With `--rails K` every host has eth0..eth<K-1>, rail R of every host on bridge R with a subnet of
its own (the --subnet shifted by R network sizes): a rail-optimised fabric, where a rail's traffic
stays on that rail. Each rail has its own rate, MTU, queue and frame counting.

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
import tempfile
from pathlib import Path
from typing import Any

from commbench.core import units
from commbench.core.errors import BadInput, RuntimeFailure
from commbench.lab import nsexec
from commbench.lab import state as labstate
from commbench.lab.state import (MAX_RAILS, LabNode, LabRail, LabState, load_state, require_root,
                                 require_state, save_state, state_path)

DEFAULT_SUBNET = "10.231.0.0/24"
SWITCH_MTU = 9216
# What tc's tbf takes: a rate of at least 1 byte a second (below it tc says `the "rate" parameter is
# mandatory`), and a burst (here 2 ms of traffic, _shape) that fits 32 bits (above it `illegal value for
# "burst"`): 17.18 Tbit/s, 17tbit in tc's words. Measured with iproute2's tc on a veth.
MIN_RATE_BITS = 8.0
MAX_RATE_BITS = 17e12


def parse_rate(text: str, flag: str = "--rate") -> float:
    """'1gbit' -> 1e9 bits per second (tc's units: the text is handed to tc as written), within
    what tc's tbf accepts, or one line of bad input."""
    bits = units.parse_rate(text, "rate", tc=True)
    if not MIN_RATE_BITS <= bits <= MAX_RATE_BITS:
        side = "below 8bit (1 byte a second), the slowest" if bits < MIN_RATE_BITS else \
            f"above {MAX_RATE_BITS / 1e12:g}tbit, the fastest"
        raise BadInput(f"{flag} {text[:40]} is {side} rate tc's tbf can shape a link to: use e.g. 1gbit, 100gbit "
                       "or 400gbit")
    return bits


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


def _shape(netns: str, link: LabNode | LabRail, retune: bool = False) -> None:
    """Apply one rail's rate (tbf, both directions) and MTU; with `retune` (or where they are on)
    also its frame counting and receive steering. `link` is a host (its rail 0) or a further rail."""
    bits = parse_rate(link.rate)
    # burst: at least 2 ms of traffic and 32 full frames, so tbf itself never limits a TCP window
    burst = int(max(bits / 8 * 0.002, 32 * (link.mtu + 14)))
    if link.queue:
        # tbf splits a packet longer than its burst into frames, so that a queue of N bytes holds
        # frames, as a switch's buffer does (a whole 64 KiB GSO packet would never fit a tiny one)
        burst = min(burst, max(30000, 2 * (link.mtu + 14)))
    queue = ["limit", str(link.queue)] if link.queue else ["latency", "100ms"]
    tbf = ["root", "tbf", "rate", link.rate, "burst", str(burst), *queue]
    _ip("link", "set", "dev", link.iface, "mtu", str(link.mtu), netns=netns)
    # The bridge ports are the switch: jumbo-capable (9216, as switches are usually set), so
    # the hosts' own eth0 MTU decides, and a host may change it itself (sweep --mtu).
    _ip("link", "set", "dev", link.port, "mtu", str(max(SWITCH_MTU, link.mtu)))
    _tc("qdisc", "replace", "dev", link.iface, *tbf, netns=netns)
    _tc("qdisc", "replace", "dev", link.port, *tbf)
    if retune or link.frames:
        _offload(netns, link, segment=not link.frames)
    if retune or link.frames or link.queue:
        _steer(netns, link, on=bool(link.frames or link.queue))


def _offload(netns: str, link: LabNode | LabRail, segment: bool) -> None:
    """--frames: TCP segmentation offload off on both ends, so the kernel cuts each GSO packet
    into frames before veth counts it: eth0's tx_bytes then holds every frame's headers, as a
    NIC's counter does (veth counts a 64 KiB GSO packet once, with one set of headers)."""
    if not segment and shutil.which("ethtool") is None:
        raise BadInput("--frames needs ethtool (it turns TCP segmentation offload off): apt-get install ethtool")
    if shutil.which("ethtool") is None:
        return  # nothing was turned off without it
    state = "on" if segment else "off"
    for ns, dev in ((netns, link.iface), (None, link.port)):
        argv = (["ip", "netns", "exec", ns] if ns else []) + ["ethtool", "-K", dev, "tso", state]
        _run(argv, check=True)


def _steer(netns: str, link: LabNode | LabRail, on: bool) -> None:
    """Receive packet steering on both receiving ends of the link (all CPUs, by flow hash). Frames
    that tbf split off one packet may be sent from two CPUs; each CPU's receive backlog would
    then hand them to TCP out of order, and TCP retransmits what it takes for lost (SACK
    reordering): a trouble counter on a healthy link. Steering by flow keeps every flow's
    frames on one CPU, in order."""
    mask = f"{(1 << (os.cpu_count() or 1)) - 1:x}" if on else "0"
    for ns, dev in ((netns, link.iface), (None, link.port)):
        path = f"/sys/class/net/{dev}/queues/rx-0/rps_cpus"
        # `ip netns exec` mounts the namespace's own sysfs; the root namespace's is /sys itself
        argv = (["ip", "netns", "exec", ns] if ns else []) + ["tee", path]
        proc = subprocess.run(argv, input=mask + "\n", capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeFailure(f"cannot set {path} on {ns or 'the root namespace'}: {proc.stderr.strip()}")


def rail_subnets(subnet: str, rails: int, nodes: int) -> list:
    """Rail R's subnet: the --subnet shifted by R network sizes (10.231.0.0/24: rail 1 on 10.231.1.0/24)."""
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError:
        raise BadInput(f"--subnet {subnet!r} is not a network: use e.g. 10.231.0.0/24") from None
    if not net.is_private or net.num_addresses < nodes + 2:
        raise BadInput(f"--subnet {subnet} must be a private range with room for {nodes} hosts")
    nets = [net]
    for r in range(1, rails):
        first = int(net.network_address) + r * net.num_addresses
        try:
            shifted = type(net)((first, net.prefixlen))
        except ValueError:
            shifted = None  # past the end of the address space
        if shifted is None or not shifted.is_private:
            where = f"on {shifted}, not a private range" if shifted else "past the last address"
            raise BadInput(f"--subnet {subnet} with --rails {rails}: rail {r} would be {where} (rail R takes the "
                           f"--subnet shifted by R network sizes): pick a lower --subnet, e.g. 10.231.0.0/24, "
                           f"or fewer rails")
        nets.append(shifted)
    return nets


def _new_node(i: int, nets: list, rate: str, mtu: int, frames: bool) -> LabNode:
    """Host i (from 0) of a lab that is not made yet: its name, ports and one address per rail."""
    addrs = [str(net.network_address + i + 1) for net in nets]  # net.hosts()[i]: the subnet holds nodes + 2
    rails = [LabRail(f"eth{r}", addrs[r], labstate.port_name(i + 1, r), mtu, rate, frames=frames)
             for r in range(1, len(nets))]
    return LabNode(f"{labstate.PREFIX}node{i + 1}", addrs[0], labstate.port_name(i + 1, 0), mtu, rate, frames=frames,
                   rails=rails)


def up(nodes: int, rate: str = "1gbit", mtu: int = 1500, subnet: str = DEFAULT_SUBNET, frames: bool = False,
       rails: int = 1) -> LabState:
    # The arguments first: refused before root or the lab are looked at.
    if not re.fullmatch(r"[a-z][a-z0-9]{0,5}", labstate.PREFIX):
        raise BadInput(f"COMMBENCH_LAB_PREFIX={labstate.PREFIX!r} must be 1-6 lowercase letters/digits: e.g. cb")
    if not 2 <= nodes <= 64:
        raise BadInput(f"--nodes {nodes} is outside 2..64: a lab needs at least 2 hosts")
    if not 1 <= rails <= MAX_RAILS:
        raise BadInput(f"--rails {rails} is outside 1..{MAX_RAILS}: e.g. --rails 2 gives every host eth0 and eth1")
    parse_rate(rate)
    check_mtu(mtu)
    nets = rail_subnets(subnet, rails, nodes)
    require_root()
    if load_state() is not None:
        raise BadInput("a lab is already up: 'commbench lab status' shows it, 'commbench lab down' removes it")
    planned = [_new_node(i, nets, rate, mtu, frames) for i in range(nodes)]
    bridges = [labstate.bridge_name(r) for r in range(rails)]
    ports = [link.port for node in planned for link in node.links()]
    taken = [n.name for n in planned if _netns_exists(n.name)] + [p for p in bridges + ports if _link_exists(p)]
    if taken:
        raise BadInput(f"{taken[0]} already exists and was not made by this lab: remove it or pick another machine")

    state = LabState(subnet=str(nets[0]), bridge=labstate.BRIDGE, rails=rails)
    if not os.path.lexists(labstate.STATE_DIR):
        state.files.append(str(labstate.STATE_DIR))  # ours: down removes it, with whatever the lab put in it
    save_state(state)
    try:
        for bridge in bridges:
            state.created.append(["bridge", bridge])
            save_state(state)
            _ip("link", "add", bridge, "type", "bridge")
            _ip("link", "set", bridge, "up")
        for node in planned:
            state.created.append(["netns", node.name])
            state.created += [["link", link.port] for link in node.links()]
            state.nodes.append(node)
            save_state(state)
            _ip("netns", "add", node.name)
            _ip("link", "set", "lo", "up", netns=node.name)
            for r, link in enumerate(node.links()):
                _plug(node.name, link, bridges[r], nets[r].prefixlen)
        write_hosts_file(state)
    except BaseException:
        down()
        raise
    return state


def _plug(netns: str, link: LabNode | LabRail, bridge: str, prefixlen: int) -> None:
    """One rail of a host: the veth pair, its port on the rail's bridge, the address, the shaping."""
    _ip("link", "add", link.port, "type", "veth", "peer", "name", link.iface, "netns", netns)
    _ip("link", "set", link.port, "master", bridge)
    _ip("link", "set", link.port, "up")
    _ip("addr", "add", f"{link.addr}/{prefixlen}", "dev", link.iface, netns=netns)
    _ip("link", "set", link.iface, "up", netns=netns)
    _shape(netns, link)


def write_hosts_file(state: LabState) -> Path:
    """The lab's /etc/hosts and, beside it, its nsswitch.conf (lab/nsexec.py mounts both). Each is
    a new file, made exclusively and recorded once made: a `hosts` or `nsswitch.conf` already in
    the state folder (the user's, in a folder of their own) is neither written over nor removed by
    `lab down`; the lab's pair then goes in a new folder of its own inside the state folder."""
    folder = labstate.STATE_DIR
    if any(os.path.lexists(folder / name) for name in (labstate.HOSTS_NAME, nsexec.NSSWITCH_NAME)):
        folder = Path(tempfile.mkdtemp(prefix="lab-etc-", dir=folder))
        _record_file(state, folder)
    path = folder / labstate.HOSTS_NAME
    lines = ["127.0.0.1 localhost"] + [f"{n.addr} {n.name}" for n in state.nodes]
    switch = path.with_name(nsexec.NSSWITCH_NAME)
    for made, text in ((path, "\n".join(lines) + "\n"),
                       (switch, lab_nsswitch(_read_text(Path("/etc/nsswitch.conf"))))):
        try:
            fd = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise RuntimeFailure(f"cannot write the lab's {made.name} in {folder}: {exc.strerror} (it appeared "
                                 f"after the lab looked): 'commbench lab down', then up again") from None
        _record_file(state, made)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    return path


def _record_file(state: LabState, made: Path) -> None:
    if str(made) not in state.files:
        state.files.append(str(made))
        save_state(state)


def lab_nsswitch(machine: str | None) -> str:
    """This machine's nsswitch.conf with names looked up in the hosts file only. A lab host has no
    route to any DNS server: a lookup that reaches DNS fails (EAI_AGAIN) instead of answering "no
    name", and torch's TCPStore looks up every peer's v4-mapped address (::ffff:10.x, in no hosts
    file), printing "[c10d] The hostname of the client socket cannot be retrieved. err=-3" each time."""
    kept = [line for line in (machine or "").splitlines() if not line.strip().startswith("hosts:")]
    return "\n".join(kept + ["hosts: files"]) + "\n"


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def rail_index(state: LabState, rail: str) -> int:
    """--rail as this lab's rail number: eth1 or 1."""
    text = str(rail).strip()
    number = text[3:] if text.startswith("eth") else text
    if number.isdigit() and int(number) < state.rails and str(int(number)) == number:
        return int(number)
    names = "eth0" if state.rails == 1 else f"eth0..eth{state.rails - 1}"
    raise BadInput(f"--rail {rail!r} is not a rail of this lab: its hosts have {names} (--rails {state.rails}); "
                   f"pass one of them, e.g. --rail eth{state.rails - 1}")


def set_link(node: str | None = None, mtu: int | None = None, rate: str | None = None, queue: int | None = None,
             frames: bool | None = None, rail: str | None = None) -> LabState:
    """Change links live. queue: tbf's queue in bytes (0: back to 100 ms of traffic); frames: count
    frames as a NIC does (see _shape); rail: one rail (eth1 or 1) of the hosts, else every rail."""
    if mtu is None and rate is None and queue is None and frames is None:
        raise BadInput("lab set changes nothing: pass --mtu, --rate, --queue and/or --frames")
    if mtu is not None:
        check_mtu(mtu)
    if rate is not None:
        parse_rate(rate)
    if queue is not None and queue != 0 and not 1600 <= queue <= 1 << 30:
        raise BadInput(f"--queue {queue} must be 0 (the default queue) or 1600..1073741824 bytes: e.g. 40000")
    require_root()
    state = require_state()
    rails = [rail_index(state, rail)] if rail is not None else list(range(state.rails))
    targets = [state.node(node)] if node else state.nodes
    for n in targets:
        for link in (n.links()[r] for r in rails):
            link.mtu = mtu if mtu is not None else link.mtu
            link.rate = rate if rate is not None else link.rate
            link.queue = (queue or None) if queue is not None else link.queue
            link.frames = frames if frames is not None else link.frames
            _shape(n.name, link, retune=frames is not None or queue is not None)
    save_state(state)
    return state


def live_facts(state: LabState) -> list[dict]:
    """What the kernel says now, per host and rail (not what the state file remembers)."""
    out = []
    for n in state.nodes:
        links = {x.get("ifname"): x for x in json.loads(_ip("-j", "link", "show", netns=n.name).stdout or "[]")}
        qdiscs = json.loads(_tc("-j", "qdisc", "show", netns=n.name).stdout or "[]")
        for r, link in enumerate(n.links()):
            kernel = links.get(link.iface, {})
            tbf: dict[str, Any] = next((q for q in qdiscs if q.get("kind") == "tbf" and q.get("dev") == link.iface), {})
            options = tbf.get("options", {})
            rate_bps = options.get("rate")
            out.append({"host": n.name, "rail": r, "addr": link.addr, "iface": link.iface, "mtu": kernel.get("mtu"),
                        "state": kernel.get("operstate"),
                        "rate_bits": rate_bps * 8 if isinstance(rate_bps, (int, float)) else None,
                        "rate": link.rate, "queue": link.queue, **_tbf_queue(options)})
    return out


def _tbf_queue(options: dict) -> dict:
    """tbf's queue as `tc -j` shows it: `limit` in bytes when the queue holds less than a burst,
    else `lat`, the microseconds a full queue adds beyond the burst (limit / rate - burst / rate)."""
    rate, burst, lat = options.get("rate"), options.get("burst"), options.get("lat")
    limit = options.get("limit")
    if limit is None and rate is not None and burst is not None and lat is not None:
        limit = round(lat * rate / 1e6 + burst)
    return {"queue_bytes": limit, "queue_latency_us": lat}


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
    removed += labprocs.stop_on_hosts(state)  # a running `lab run`: named, stopped while the network is up
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
