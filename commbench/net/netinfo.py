"""Network facts of one host: interfaces, RDMA ports, GPUs and their topology, the NCCL/GLOO environment.

Where the facts come from:

- interfaces: the kernel, for the calling process's network namespace (psutil's getifaddrs and
  ioctls; an ethtool ioctl for the driver). /sys/class/net shows the namespace that mounted /sys,
  which inside a lab host (or a container sharing the host's /sys) is the wrong one, so it is
  read only from a recorded tree (``root=DIR``).
- RDMA ports: /sys/class/infiniband (state, phys_state, rate, link_layer, the GID table with its
  RoCE types and netdevs) and, when installed, ``ibv_devinfo`` (active_mtu).
- GPUs: ``nvidia-smi -L`` and ``nvidia-smi topo -m`` when installed.

Commands run as argv lists with a timeout, never through a shell. A recorded tree is a folder laid
out like /sys (``class/net/IF/...``, ``class/infiniband/DEV/ports/N/...``) with the outputs of the
commands in ``commands/`` (tests/data/netinfo/README.md describes the layout).

NCCL's own rules for reading these facts (its list syntax, the GID index it picks) are
net/ncclrules.py's.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path
from collections.abc import Callable, Mapping

from commbench.core.pump import capture
from commbench.net import doctorrdmacm
from commbench.net.ncclrules import gloo_ifname_missing, has_address, roce_version, socket_ifname_selects
from commbench.net.envinfo import ARPHRD, env_snapshot

SYSFS = Path("/sys")
COMMAND_TIMEOUT = 10.0
COMMAND_OUTPUT_CAP = 8 * 1024 * 1024  # ibv_devinfo -v of many ports is under 1 MiB

# ---------------------------------------------------------------------------------------------
# Interfaces
# ---------------------------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _driver(name: str) -> str | None:
    """The interface's driver from the ETHTOOL_GDRVINFO ioctl (netns-aware, like `ethtool -i`)."""
    import array
    import fcntl
    import struct

    buf = array.array("B", struct.pack("I", 0x00000003) + b"\0" * 192)  # struct ethtool_drvinfo
    addr, _ = buf.buffer_info()
    ifr = struct.pack("16sP", name.encode()[:15], addr)
    ifr += b"\0" * (40 - len(ifr))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), 0x8946, ifr)  # SIOCETHTOOL
    except OSError:
        return None
    driver = bytes(buf[4:36]).split(b"\0", 1)[0].decode(errors="replace")
    return driver or None


def live_interfaces() -> list[dict]:
    import psutil

    from commbench.net.envinfo import hw_type
    from commbench.net.rtnetlink import interface_shapers

    addrs = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    shapers = interface_shapers()
    out = []
    for name in sorted(set(addrs) | set(stats)):
        st = stats.get(name)
        flags = set((getattr(st, "flags", "") or "").split(",")) if st else set()
        up = bool(st and st.isup)
        running = "running" in flags if flags else None
        state = "down" if not up else ("up" if running in (True, None) else "no-carrier")
        kind = hw_type(name)
        ips, mac = [], None
        for a in addrs.get(name, []):
            if a.family == socket.AF_INET:
                ips.append(a.address)
            elif a.family == socket.AF_INET6:
                ips.append(a.address.split("%")[0])
            elif a.family == getattr(psutil, "AF_LINK", 17):
                mac = a.address
        out.append({
            "name": name, "state": state, "running": running, "mtu": st.mtu if st else None,
            "speed_mbps": st.speed if st and st.speed and st.speed > 0 else None,
            "driver": _driver(name), "link_layer": ARPHRD.get(kind or "", kind), "mac": mac, "addresses": ips,
            "shaper": shapers.get(name),  # a root tbf/htb caps the rate below the link speed (doctorrails)
        })
    return out


_IP_LINK = re.compile(r"^\d+:\s+([^:@\s]+)(?:@\S+)?:\s+<([^>]*)>.*?\bmtu\s+(\d+)(?:.*?\bstate\s+(\S+))?")


def parse_ip_addr(text: str) -> dict[str, dict]:
    """`ip addr` text output -> {name: {flags, mtu, state, addresses}}."""
    out: dict[str, dict] = {}
    cur = None
    for line in text.splitlines():
        m = _IP_LINK.match(line.strip())
        if m:
            cur = out.setdefault(m.group(1), {"flags": m.group(2).split(","), "mtu": int(m.group(3)),
                                              "state": (m.group(4) or "").lower() or None, "addresses": []})
            continue
        m = re.match(r"\s*inet6?\s+([0-9a-fA-F.:]+)(?:/\d+)?", line)
        if m and cur is not None:
            cur["addresses"].append(m.group(1))
    return out


def recorded_interfaces(root: Path) -> list[dict]:
    base = root / "class" / "net"
    ip = parse_ip_addr(_read(root / "commands" / "ip_addr.txt") or "")
    names = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
    out = []
    for name in names:
        d = base / name
        oper = _read(d / "operstate")
        mtu = _read(d / "mtu")
        speed = _read(d / "speed")
        kind = _read(d / "type")
        uevent = _read(d / "device" / "uevent") or ""
        drv = re.search(r"^DRIVER=(\S+)", uevent, re.M)
        rec = ip.get(name)
        flags = set(rec["flags"]) if rec else set()
        running: bool | None  # None: sysfs says nothing of the link's state
        if rec and "UP" in flags:
            carrier = "LOWER_UP" in flags or oper in ("up", "unknown")
            state, running = ("up", True) if carrier else ("no-carrier", False)
        elif rec:
            state, running = "down", False
        else:
            state = {"up": "up", "unknown": "up", "down": "down", "lowerlayerdown": "no-carrier",
                     "dormant": "no-carrier"}.get(oper or "", oper or "unknown")
            running = state == "up" if oper else None
        out.append({
            "name": name, "state": state, "running": running,
            "mtu": int(mtu) if mtu and mtu.isdigit() else (rec["mtu"] if rec else None),
            "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None,
            "driver": drv.group(1) if drv else None, "link_layer": ARPHRD.get(kind or "", kind),
            "mac": _read(d / "address"), "addresses": rec["addresses"] if rec else None,
        })
    return out


# ---------------------------------------------------------------------------------------------
# RDMA ports
# ---------------------------------------------------------------------------------------------

_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def _state_word(text: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'."""
    if text is None:
        return None
    return text.split(":", 1)[1].strip() if ":" in text else text.strip()


def rate_gbps(rate: str | None) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(m.group(1)) if m else None


def rdma_ports(sysfs: Path) -> list[dict]:
    """Every port of every device under SYSFS/class/infiniband."""
    base = sysfs / "class" / "infiniband"
    if not base.is_dir():
        return []
    ports = []
    for dev in sorted(base.iterdir(), key=lambda p: _natural(p.name)):
        pdir = dev / "ports"
        if not pdir.is_dir():
            continue
        for port in sorted((p for p in pdir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
            ports.append(_read_port(dev.name, port))
    return ports


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _read_port(device: str, port: Path) -> dict:
    gids = []
    types_dir = port / "gid_attrs" / "types"
    gdir = port / "gids"
    if gdir.is_dir():
        for g in sorted((p for p in gdir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
            value = _read(g)
            if not value or value == _ZERO_GID:
                continue  # empty slot (its types/ndevs files answer EINVAL)
            i = int(g.name)
            gids.append({"index": i, "gid": value, "type": _read(types_dir / g.name),
                         "ndev": _read(port / "gid_attrs" / "ndevs" / g.name)})
    ndev = next((g["ndev"] for g in gids if g.get("ndev")), None) or _read(port / "gid_attrs" / "ndevs" / "0")
    if ndev is None:
        net = port.parent.parent / "device" / "net"
        if net.is_dir():
            names = sorted(p.name for p in net.iterdir())
            ndev = names[0] if names else None
    rate = _read(port / "rate")
    return {
        "device": device, "port": int(port.name), "state": _state_word(_read(port / "state")),
        "phys_state": _state_word(_read(port / "phys_state")), "rate": rate, "rate_gbps": rate_gbps(rate),
        "link_layer": _read(port / "link_layer"), "netdev": ndev, "gid_types_known": types_dir.is_dir(),
        "gids": gids, "active_mtu": None, "max_mtu": None,
    }


def parse_ibv_devinfo(text: str) -> dict[tuple[str, int], dict]:
    """`ibv_devinfo` (or -v) text -> {(device, port): {state, active_mtu, max_mtu, link_layer}}."""
    out: dict[tuple[str, int], dict] = {}
    dev = None
    cur = None
    for line in text.splitlines():
        m = re.match(r"\s*([A-Za-z_][\w ]*?):\s*(.*?)\s*$", line)
        if not m:
            continue
        key, value = m.group(1).strip(), m.group(2)
        if key == "hca_id":
            dev, cur = value, None
        elif key == "port" and dev is not None and value.isdigit():
            cur = out.setdefault((dev, int(value)), {})
        elif cur is not None and key in ("state", "active_mtu", "max_mtu", "link_layer", "phys_state"):
            if key.endswith("mtu"):
                num = re.match(r"(\d+)", value)
                cur[key] = int(num.group(1)) if num else None
            elif key == "state":
                cur[key] = value.split()[0].removeprefix("PORT_") if value else None
            else:
                cur[key] = value
    return out


def merge_ibv(ports: list[dict], ibv: dict[tuple[str, int], dict]) -> list[dict]:
    """Add ibv_devinfo's MTUs to the sysfs ports; ports only ibv_devinfo knows are added too."""
    seen = set()
    for p in ports:
        info = ibv.get((p["device"], p["port"]))
        if info:
            seen.add((p["device"], p["port"]))
            p["active_mtu"] = info.get("active_mtu")
            p["max_mtu"] = info.get("max_mtu")
            if p.get("state") is None and info.get("state"):
                p["state"] = info["state"]
            if p.get("link_layer") is None and info.get("link_layer"):
                p["link_layer"] = info["link_layer"]
    for (dev, num), info in ibv.items():
        if (dev, num) not in seen:
            ports.append({"device": dev, "port": num, "state": info.get("state"), "phys_state": None,
                          "rate": None, "rate_gbps": None, "link_layer": info.get("link_layer"), "netdev": None,
                          "gid_types_known": False, "gids": [], "active_mtu": info.get("active_mtu"),
                          "max_mtu": info.get("max_mtu")})
    return ports


# ---------------------------------------------------------------------------------------------
# GPUs
# ---------------------------------------------------------------------------------------------


def parse_nvidia_smi_list(text: str) -> list[dict]:
    """`nvidia-smi -L` -> [{index, name, uuid, mig: [...]}]."""
    gpus: list[dict] = []
    for line in text.splitlines():
        m = re.match(r"\s*GPU (\d+): (.+?) \(UUID: ([^)]+)\)", line)
        if m:
            gpus.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3), "mig": []})
            continue
        m = re.match(r"\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)]+)\)", line)
        if m and gpus:
            gpus[-1]["mig"].append({"profile": m.group(1), "index": int(m.group(2)), "uuid": m.group(3)})
    return gpus


_LINK_RANK = {"X": -1, "PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}


def parse_topo_matrix(text: str) -> dict | None:
    """`nvidia-smi topo -m` -> the GPU/NIC matrix, CPU/NUMA affinity and each GPU's nearest NICs."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if header_at is None:
        return None
    header = lines[header_at].split()
    cols = []
    for tok in header:
        if tok == "CPU":
            break
        cols.append(tok)
    legend = {}
    for line in lines:
        m = re.match(r"\s*(NIC\d+):\s*(\S+)\s*$", line)
        if m:
            legend[m.group(1)] = m.group(2)
    matrix: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict] = {}
    for line in lines[header_at + 1:]:
        toks = line.split()
        if not toks or toks[0] not in cols:
            if toks[:1] == ["Legend:"]:
                break
            continue
        row = toks[0]
        cells = toks[1:1 + len(cols)]
        matrix[row] = dict(zip(cols, cells))
        rest = toks[1 + len(cols):]
        if rest and row.startswith("GPU"):
            affinity[row] = {"cpu": rest[0], "numa": rest[1] if len(rest) > 1 else None}
    name = {c: legend.get(c, c) for c in cols}
    gpus = [c for c in cols if c.startswith("GPU")]
    nics = [c for c in cols if not c.startswith("GPU")]
    nearest = {}
    for g in gpus:
        seen = [(name[n], matrix.get(g, {}).get(n)) for n in nics]
        links = [(n, link) for n, link in seen if link is not None and link in _LINK_RANK]
        if links:
            best = min(_LINK_RANK[link] for _, link in links)
            nearest[g] = {"link": next(link for _, link in links if _LINK_RANK[link] == best),
                          "nics": [n for n, link in links if _LINK_RANK[link] == best]}
    return {"columns": [name[c] for c in cols], "matrix": {name.get(r, r): {name[c]: v for c, v in row.items()}
                                                             for r, row in matrix.items()},
            "affinity": affinity, "nearest_nic": nearest}


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------

Runner = Callable[[list[str], float], "str | None"]


def run_command(argv: list[str], timeout: float = COMMAND_TIMEOUT) -> str | None:
    """stdout of `argv` (no shell, on core/pump.py), or None when it is not installed, fails, times
    out or prints more than COMMAND_OUTPUT_CAP (stopped there: no fact comes from a cut output)."""
    if shutil.which(argv[0]) is None:
        return None
    got = capture(argv, timeout=timeout, limit=COMMAND_OUTPUT_CAP)
    return got.text if got is not None and got.ok else None


def _recorded_command(root: Path, name: str) -> str | None:
    return _read(root / "commands" / name)


# ---------------------------------------------------------------------------------------------
# NCCL version
# ---------------------------------------------------------------------------------------------


def nccl_version() -> str | None:
    """The NCCL this Python environment would load: the nvidia-nccl wheel torch depends on, else
    torch's own (CUDA builds only)."""
    from importlib import metadata

    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:
        import torch

        if torch.version.cuda is None:
            return None
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - no torch, or a build without NCCL
        return None


# ---------------------------------------------------------------------------------------------
# One host
# ---------------------------------------------------------------------------------------------


def nccl_env(environ: dict | None = None) -> dict[str, str]:
    """The NCCL_* / GLOO_* part of the environment snapshot (envinfo.env_snapshot, the one filter:
    values of known settings only, other names as '<not recorded>', credential-like names never)."""
    return {k: v for k, v in env_snapshot(environ).items() if k.startswith(("NCCL_", "GLOO_"))}


def host_facts(root: str | Path | None = None, environ: dict | None = None, gpus: bool = True,
               run: Runner = run_command, timeout: float = COMMAND_TIMEOUT, nccl: str | None | bool = True) -> dict:
    """Everything doctor knows about this host, JSON-able.

    root: a recorded tree (no live reading, no commands: their recorded outputs are used).
    gpus: also ask nvidia-smi (skipped by the cheap summary stored with results).
    nccl: True to detect the NCCL version, or the version string (or None) to use.
    """
    environ = dict(os.environ if environ is None else environ)
    if root is not None:
        root = Path(root)
        host = _read(root / "hostname") or root.name
        interfaces = recorded_interfaces(root)
        ports = rdma_ports(root)
        ibv_text = _recorded_command(root, "ibv_devinfo.txt")
        smi_l = _recorded_command(root, "nvidia-smi_-L.txt") if gpus else None
        smi_topo = _recorded_command(root, "nvidia-smi_topo_-m.txt") if gpus else None
        source = f"recorded {root}"
        ibv_state = "recorded" if ibv_text is not None else "not recorded"
    else:
        host = socket.gethostname()
        interfaces = live_interfaces()
        ports = rdma_ports(SYSFS)
        installed = shutil.which("ibv_devinfo") is not None
        ibv_text = run(["ibv_devinfo"], timeout) if installed else None
        ibv_state = ("ran" if ibv_text is not None else "failed") if installed else "not installed"
        smi_l = run(["nvidia-smi", "-L"], timeout) if gpus else None
        smi_topo = run(["nvidia-smi", "topo", "-m"], timeout) if gpus and smi_l else None
        source = "live"
    if ibv_text:
        ports = merge_ibv(ports, parse_ibv_devinfo(ibv_text))
    if nccl is True:
        version = nccl_version() if root is None else _read(root / "nccl_version")
    else:
        version = nccl or None
    return {
        "host": host, "source": source, "interfaces": interfaces, "rdma": ports, "ibv_devinfo": ibv_state,
        "gpus": parse_nvidia_smi_list(smi_l) if smi_l else None,
        "topology": parse_topo_matrix(smi_topo) if smi_topo else None,
        "env": nccl_env(environ), "nccl_version": version,
        "rdma_cm": doctorrdmacm.facts(root, root if root is not None else SYSFS),
    }


def host_summary(iface: str | None = None, environ: dict | None = None) -> dict:
    """The per-host network facts stored with every result row (the `net` column's per_host entry):
    interfaces of note, RDMA ports, the NCCL/GLOO environment. Cheap: sysfs, psutil and at most
    ibv_devinfo with a short timeout (no nvidia-smi)."""
    try:
        facts = host_facts(environ=environ, gpus=False, timeout=1.5, nccl=None)
    except Exception as exc:  # noqa: BLE001 - never fail a measurement over its metadata
        return {"error": f"{type(exc).__name__}: {exc}"}
    env = facts["env"]
    wanted = {iface} | {p["netdev"] for p in facts["rdma"] if p.get("netdev")}
    for var in ("NCCL_SOCKET_IFNAME",):
        picked = socket_ifname_selects(env.get(var), facts["interfaces"])
        wanted |= set(picked or [])
    wanted |= {n for n in (env.get("GLOO_SOCKET_IFNAME") or "").split(",") if n}
    keys = ("name", "state", "mtu", "speed_mbps", "driver", "link_layer", "addresses")
    # a root shaper is what caps a lab link (and a left-over tc on a NIC): core/linkrate.py reads it
    ifaces = [{k: i.get(k) for k in keys} | ({"shaper": i["shaper"]} if i.get("shaper") else {})
              for i in facts["interfaces"]
              if i["name"] in wanted or (i.get("addresses") and i.get("link_layer") != "loopback")]
    ports = [{k: p.get(k) for k in ("device", "port", "state", "phys_state", "rate", "link_layer", "netdev",
                                    "active_mtu")}
             | {"roce_v2_gids": [g["index"] for g in p["gids"] if roce_version(g.get("type")) == 2]}
             for p in facts["rdma"]]
    return {"interfaces": ifaces, "rdma": ports, "env": env, "ibv_devinfo": facts["ibv_devinfo"]}


def socket_ifname_warnings(environ: Mapping[str, str] | None = None, interfaces: list[dict] | None = None) -> list[str]:
    """One line per NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME that matches no usable interface here."""
    environ = os.environ if environ is None else environ
    interfaces = live_interfaces() if interfaces is None else interfaces
    have = ", ".join(i["name"] for i in interfaces if has_address(i)) or "none"
    lines = []
    nccl = environ.get("NCCL_SOCKET_IFNAME")
    if socket_ifname_selects(nccl, interfaces) == []:
        lines.append(f"NCCL_SOCKET_IFNAME={nccl} matches no interface with an address on {socket.gethostname()} "
                     f"(have: {have})")
    missing = gloo_ifname_missing(environ.get("GLOO_SOCKET_IFNAME"), interfaces)
    if missing:
        lines.append(f"GLOO_SOCKET_IFNAME={environ.get('GLOO_SOCKET_IFNAME')} names {', '.join(missing)}, "
                     f"which is not an interface with an address on {socket.gethostname()} (have: {have})")
    return lines
