"""Change a host's interface for a sweep axis (MTU), through the kernel of the calling process's
network namespace (ioctl: no subprocess, no shell), and put it back afterwards."""

from __future__ import annotations

import fcntl
import socket
import struct

from commbench.core.errors import BadInput, RuntimeFailure

SIOCGIFMTU = 0x8921
SIOCSIFMTU = 0x8922


def _ifreq(iface: str, value: int = 0) -> bytes:
    return struct.pack("16si", iface.encode()[:15], value) + b"\0" * 20


def get_mtu(iface: str) -> int:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            res = fcntl.ioctl(s.fileno(), SIOCGIFMTU, _ifreq(iface))
    except OSError as exc:
        raise BadInput(f"interface {iface!r} does not exist on {socket.gethostname()} ({exc.strerror}): "
                       "pass --iface with the interface that carries the traffic") from None
    return struct.unpack("16si", res[:20])[1]


def set_mtu(iface: str, mtu: int) -> None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), SIOCSIFMTU, _ifreq(iface, mtu))
    except PermissionError:
        raise BadInput(f"setting the MTU of {iface} needs root (CAP_NET_ADMIN): run as root, or drop --mtu") from None
    except OSError as exc:
        raise RuntimeFailure(f"cannot set MTU {mtu} on {iface} of {socket.gethostname()}: {exc.strerror} "
                             "(the driver or the peer may not allow it)") from None
