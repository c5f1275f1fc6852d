"""doctor's RDMA connection manager check (the debugging guide's `systemctl status rdma_cm` step):
on a host with RDMA devices, the rdma_cm and rdma_ucm kernel modules and /dev/infiniband/rdma_cm.

NCCL's IB transport does not need the connection manager (it exchanges queue pairs over its own
sockets), so a missing one is a note, not a problem: what needs it is `ib_write_bw -R`, UCX's and
Open MPI's rdmacm, NVMe-oF and iSER, which an operator often runs beside NCCL to prove a link.

Facts come from /proc/modules (or `lsmod` output recorded as commands/lsmod.txt), /sys/module,
the device names under /dev/infiniband (recorded as commands/ls_dev_infiniband.txt) and the
device folders under class/infiniband (tests/data/netinfo/README.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

MODULES = ("ib_core", "rdma_cm", "rdma_ucm", "ib_uverbs")  # the ones this check reads
DEV = Path("/dev/infiniband")
PROC_MODULES = Path("/proc/modules")


def _module_names(text: str | None) -> set[str] | None:
    """Module names of /proc/modules or `lsmod` text (its header skipped); None when unknown."""
    if text is None:
        return None
    names = {line.split()[0] for line in text.splitlines() if line.strip()}
    return names - {"Module"}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def facts(root: Path | None, sysfs: Path) -> dict:
    """{"devices": RDMA device names, "modules": the MODULES loaded (None: unknown), "dev": the
    names under /dev/infiniband (None: unknown)} of this host (root None) or a recorded tree."""
    base = sysfs / "class" / "infiniband"
    devices = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    if root is not None:
        loaded = _module_names(_read(root / "commands" / "lsmod.txt"))
        listing = _read(root / "commands" / "ls_dev_infiniband.txt")
        dev = sorted(listing.split()) if listing is not None else None
    else:
        loaded = _module_names(_read(PROC_MODULES))
        if loaded is not None:  # built into the kernel: no line in /proc/modules, a folder in /sys/module
            loaded |= {m for m in MODULES if (sysfs / "module" / m).is_dir()}
        dev = sorted(p.name for p in DEV.iterdir()) if DEV.is_dir() else ([] if devices else None)
    modules = sorted(m for m in MODULES if m in loaded) if loaded is not None else None
    return {"devices": devices, "modules": modules, "dev": dev}


def check_host(host_facts: dict, finding: Callable[..., object]) -> list:
    """Notes for a host with RDMA devices (or an RDMA stack loaded) whose connection manager is not usable."""
    got = host_facts.get("rdma_cm") or {}
    host, modules, dev = host_facts["host"], got.get("modules"), got.get("dev")
    rdma_host = bool(got.get("devices") or host_facts.get("rdma") or (modules and "ib_core" in modules))
    if not rdma_host:
        return []
    why = ("NCCL does not need it, but `ib_write_bw -R`, UCX/Open MPI rdmacm, NVMe-oF and iSER do")
    out = []
    if modules is not None and not {"rdma_cm", "rdma_ucm"} <= set(modules):
        missing = ", ".join(m for m in ("rdma_cm", "rdma_ucm") if m not in modules)
        out.append(finding("rdma-cm", host, f"the RDMA connection manager's kernel module(s) {missing} are not "
                           f"loaded on {host} ({why})",
                           "modprobe rdma_cm rdma_ucm, and load them at boot (rdma-core's "
                           "/etc/rdma/modules/rdma.conf, or `systemctl status rdma-load-modules@rdma`; "
                           "MLNX_OFED: `systemctl status openibd`)", "note"))
    if dev is not None and "rdma_cm" not in dev and (modules is None or "rdma_ucm" in modules):
        out.append(finding("rdma-cm", host, f"/dev/infiniband/rdma_cm is missing on {host} ({why})",
                           "in a container, pass the device (docker --device=/dev/infiniband/rdma_cm, or the "
                           "Kubernetes RDMA device plugin); on the host, check udev and `modprobe rdma_ucm`", "note"))
    return out
