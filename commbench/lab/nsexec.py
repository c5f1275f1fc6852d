"""Start a process inside a lab host: its network namespace, its own hostname and, for daemons
that resolve names, its own /etc/hosts. Done in the child before exec (ctypes: setns, unshare,
sethostname, mount), so no shell and no helper binary is involved.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

NETNS_DIR = Path("/var/run/netns")
NSSWITCH_NAME = "nsswitch.conf"  # beside the lab's hosts file: names from that file only (lab/network.py)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter(netns: str, hostname: str | None = None, hosts_file: str | None = None) -> None:
    """Move the calling process into `netns`; optionally give it its own UTS (hostname) and
    mount namespace with `hosts_file` bind-mounted over /etc/hosts, and the nsswitch.conf beside
    it (where the lab wrote one) over /etc/nsswitch.conf."""
    libc = _libc()
    fd = os.open(NETNS_DIR / netns, os.O_RDONLY)
    try:
        _check(libc.setns(fd, CLONE_NEWNET), f"setns {netns}")
    finally:
        os.close(fd)
    flags = (CLONE_NEWUTS if hostname else 0) | (CLONE_NEWNS if hosts_file else 0)
    if flags:
        _check(libc.unshare(flags), "unshare")
    if hostname:
        name = hostname.encode()
        _check(libc.sethostname(name, len(name)), "sethostname")
    if hosts_file:
        # Keep the bind mount private to this namespace, then put the lab's hosts file in place.
        _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
        _check(libc.mount(hosts_file.encode(), b"/etc/hosts", None, MS_BIND, None), "bind-mount hosts")
        switch = Path(hosts_file).with_name(NSSWITCH_NAME)
        if switch.is_file() and Path("/etc/nsswitch.conf").exists():
            _check(libc.mount(str(switch).encode(), b"/etc/nsswitch.conf", None, MS_BIND, None),
                   "bind-mount nsswitch.conf")


def popen(argv: list[str], netns: str, hostname: str | None = None, hosts_file: str | None = None,
          **kwargs) -> subprocess.Popen:
    """subprocess.Popen(argv) inside a lab host."""
    def preexec() -> None:
        enter(netns, hostname, hosts_file)

    return subprocess.Popen(argv, preexec_fn=preexec, **kwargs)  # noqa: PLW1509 (no threads here)
