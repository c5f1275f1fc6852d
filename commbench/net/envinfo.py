"""What was true about the environment during a run: an allow-listed environment snapshot and
the interface that carried the traffic. Secrets never leave this module: only names on the
allow-list are kept, and names that look like credentials are dropped even then.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

ALLOWED_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "FI_", "CUDA_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_",
                    "MASTER_", "OMP_NUM_THREADS")
ALLOWED_NAMES = {
    "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
    "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_ID",
    "SLURM_CLUSTER_NAME", "SLURM_JOB_PARTITION",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
}
_SECRETISH = re.compile(r"(TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE|AUTH|(^|_)KEY$)", re.IGNORECASE)

# /sys/class/net/IF/type values (include/uapi/linux/if_arp.h)
ARPHRD = {"1": "ethernet", "32": "infiniband", "772": "loopback"}


def env_snapshot(environ: dict | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    kept = {}
    for name, value in environ.items():
        if _SECRETISH.search(name):
            continue
        if name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES):
            kept[name] = value
    return dict(sorted(kept.items()))


def _iface_for_address(local_ip: str) -> str | None:
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == local_ip for a in addrs):
            return name
    return None


def traffic_iface(master_addr: str | None, environ: dict | None = None) -> str | None:
    """The interface the collectives use: the one named by GLOO/NCCL_SOCKET_IFNAME, else the
    one the kernel routes MASTER_ADDR through (a UDP connect picks the route; nothing is sent)."""
    import psutil

    environ = os.environ if environ is None else environ
    here = psutil.net_if_stats()  # this network namespace's interfaces (/sys/class/net may show another)
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        value = environ.get(var, "")
        first = value.split(",")[0].lstrip("=")
        if first and not first.startswith("^") and first in here:
            return first
    if not master_addr:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master_addr, 9))
            local_ip = s.getsockname()[0]
    except OSError:
        return None
    return _iface_for_address(local_ip)


def hw_type(iface: str) -> str | None:
    """The interface's ARPHRD type ('1' ethernet, '32' infiniband, '772' loopback) from the
    SIOCGIFHWADDR ioctl, for this process's network namespace; None if there is no such interface."""
    import fcntl
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            res = fcntl.ioctl(s.fileno(), 0x8927, struct.pack("256s", iface.encode()[:15]))  # SIOCGIFHWADDR
    except OSError:
        return None
    return str(struct.unpack("H", res[16:18])[0])


def _live_link(iface: str) -> dict:
    """MTU, type, speed and state from the kernel for the calling process's network namespace
    (sysfs shows the namespace that mounted it, which inside a lab host is the wrong one)."""
    import psutil

    stats = psutil.net_if_stats().get(iface)
    arphrd = hw_type(iface)
    return {
        "mtu": stats.mtu if stats else None,
        "type": arphrd,
        "speed": str(stats.speed) if stats else None,
        "operstate": ("up" if stats.isup else "down") if stats else None,
    }


def iface_facts(iface: str | None, sysfs: Path | None = None) -> dict:
    """MTU, link layer, speed and state of one interface: live from the kernel, or read from a
    recorded sysfs tree (a folder laid out like /sys/class/net) when `sysfs` is given."""
    if not iface:
        return {"iface": None, "mtu": None, "link_layer": None}

    if sysfs is None:
        live = _live_link(iface)
        read = live.get
    else:
        def read(name: str) -> str | None:
            try:
                return (sysfs / iface / name).read_text().strip()
            except OSError:
                return None

    mtu = read("mtu")
    speed = read("speed")
    kind = read("type")
    return {
        "iface": iface,
        "mtu": int(mtu) if mtu is not None and str(mtu).isdigit() else None,
        "link_layer": ARPHRD.get(kind or "", kind),
        "speed_mbps": int(speed) if speed and str(speed).lstrip("-").isdigit() and int(speed) > 0 else None,
        "operstate": read("operstate"),
    }
