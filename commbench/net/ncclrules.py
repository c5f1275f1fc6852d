"""NCCL's own rules for reading a host's network facts (net/netinfo.py): its list syntax
(NCCL_SOCKET_IFNAME, NCCL_IB_HCA), the names GLOO_SOCKET_IFNAME must hold, and the RoCE GID index
NCCL picks on a port.

The rules follow NCCL's source (src/misc/utils.cc parseStringList/matchIfList, src/misc/socket.cc
findInterfaces, src/transport/net_ib ncclIbGetGidIndex) and its documentation
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html); docs/DOCTOR.md cites them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from collections.abc import Iterable
from typing import TypeGuard

# ---------------------------------------------------------------------------------------------
# NCCL's list syntax: NCCL_SOCKET_IFNAME, NCCL_IB_HCA
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcclList:
    """A parsed NCCL interface/HCA list: an optional leading ``^`` (exclude the listed names), then
    an optional ``=`` (names are exact, not prefixes), then comma-separated ``name[:port]`` items.
    ``^`` and ``=`` apply to the whole list, as in NCCL; ``=`` in the middle of the list is part of
    a name."""

    raw: str
    exclude: bool
    exact: bool
    items: tuple[tuple[str, int], ...]  # (name or prefix, port; -1 = any port)

    def matches(self, name: str, port: int = -1) -> bool:
        """Whether NCCL would use `name` (and `port`): matchIfList(...) ^ searchNot."""
        if not self.items:  # NCCL: an empty user list matches everything
            hit = True
        else:
            hit = any((name == p if self.exact else name.startswith(p)) and (q == -1 or port == -1 or q == port)
                      for p, q in self.items)
        return hit != self.exclude

    def item_matches(self, item: tuple[str, int], name: str, port: int = -1) -> bool:
        p, q = item
        return (name == p if self.exact else name.startswith(p)) and (q == -1 or port == -1 or q == port)


def parse_nccl_list(value: str) -> NcclList:
    raw = value
    exclude = value.startswith("^")
    if exclude:
        value = value[1:]
    exact = value.startswith("=")
    if exact:
        value = value[1:]
    items = []
    for entry in value.split(","):
        name, sep, rest = entry.partition(":")
        if not name:  # NCCL skips empty names (",," or ":1")
            continue
        if sep:
            digits = re.match(r"\s*[+-]?\d+", rest)
            port = int(digits.group()) if digits else (-1 if rest == "" else 0)  # atoi semantics
        else:
            port = -1
        items.append((name, port))
    return NcclList(raw, exclude, exact, tuple(items))


def socket_ifname_selects(value: str | None, interfaces: Iterable[dict]) -> list[str] | None:
    """The interfaces NCCL_SOCKET_IFNAME selects among those with an IP address, as NCCL's
    findInterfaces does; None when NCCL ignores the variable (unset, or shorter than 2 characters,
    socket.cc: ``if (env && strlen(env) > 1)``)."""
    if value is None or len(value) <= 1:
        return None
    spec = parse_nccl_list(value)
    return [i["name"] for i in interfaces if has_address(i) and spec.matches(i["name"])]


def gloo_ifname_missing(value: str | None, interfaces: Iterable[dict]) -> list[str]:
    """Names in GLOO_SOCKET_IFNAME that gloo cannot use. torch splits the value on commas and
    creates one gloo device per name; each name must be an exact interface name with an IP address,
    or init_process_group fails ("Unable to find address for: NAME"). No prefixes, no ``=``/``^``."""
    if not value:
        return []
    usable = {i["name"] for i in interfaces if has_address(i)}
    return [n for n in value.split(",") if n and n not in usable]


def has_address(iface: dict) -> bool:
    """Whether NCCL could use the interface: it has an address other than ::1 (or none were recorded)."""
    addrs = iface.get("addresses")
    if addrs is None:  # a recorded tree without `ip addr` output: unknown, assume usable
        return True
    return any(a != "::1" for a in addrs)  # NCCL skips IPv6 loopback addresses


def ib_hca_selects(value: str | None, ports: Iterable[dict]) -> list[dict]:
    """The RDMA ports NCCL's IB transport uses: ACTIVE ports with an IB or Ethernet link layer that
    NCCL_IB_HCA selects (net_ib: ``matchIfList(devName, portNum, ...) ^ searchNot``)."""
    spec = parse_nccl_list(value) if value is not None else None
    return [p for p in ports if p.get("state") == "ACTIVE" and p.get("link_layer") in ("InfiniBand", "Ethernet")
            and (spec is None or spec.matches(p["device"], p["port"]))]


# ---------------------------------------------------------------------------------------------
# RoCE GIDs and the index NCCL uses
# ---------------------------------------------------------------------------------------------


def gid_addr(gid: str) -> ipaddress.IPv6Address | None:
    """A RoCE GID as an IPv6 address, or None when it is not one."""
    try:
        return ipaddress.IPv6Address(gid)
    except ValueError:
        return None


def gid_family(gid: str) -> str:
    """AF_INET for IPv4-mapped GIDs (::ffff:a.b.c.d), else AF_INET6 (net_ib getGidAddrFamily)."""
    a = gid_addr(gid)
    if a is None:
        return "AF_INET6"
    p = a.packed
    mapped = p[:10] == b"\0" * 10 and p[10:12] == b"\xff\xff"
    mapped_mc = p[:4] == b"\xff\x0e\0\0" and p[4:10] == b"\0" * 6 and p[10:12] == b"\xff\xff"
    return "AF_INET" if mapped or mapped_mc else "AF_INET6"


def gid_valid(gid: str) -> bool:
    """net_ib validGid: configured (not all zero, not a bare fe80::) and not link-local."""
    a = gid_addr(gid)
    if a is None:
        return False
    p = a.packed
    trailer = p[4:] != b"\0" * 12
    if (p[:4] == b"\0" * 4 and not trailer) or (p[:4] == b"\xfe\x80\0\0" and not trailer):
        return False
    return not (p[:4] == b"\xfe\x80\0\0" and p[4:8] == b"\0" * 4)


def roce_version(gid_type: str | None) -> int | None:
    if not gid_type:
        return None
    if gid_type.startswith(("IB/RoCE v1", "RoCE v1")):
        return 1
    if gid_type.startswith("RoCE v2"):
        return 2
    return None


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    nums = re.findall(r"\d+", version)
    return tuple(int(n) for n in nums[:3]) if nums else None


def _gid_index_set(raw: str | None) -> TypeGuard[str]:
    """NCCL_IB_GID_INDEX names an index (an integer >= 0; anything else leaves the choice to NCCL)."""
    try:
        return raw is not None and int(raw) >= 0
    except ValueError:
        return False


def nccl_gid_index(port: dict, environ: dict, nccl_version: str | None = None) -> tuple[int, str]:
    """The GID index NCCL uses on a RoCE port, and how it got there.

    NCCL_IB_GID_INDEX >= 0 wins. Otherwise NCCL >= 2.21 picks one itself (net_ib ncclIbGetGidIndex /
    ncclUpdateGidIndex): starting at index 0 it walks the table and moves to a GID of the wanted
    address family (NCCL_IB_ADDR_FAMILY, default AF_INET) inside NCCL_IB_ADDR_RANGE, preferring
    the wanted RoCE version (NCCL_IB_ROCE_VERSION_NUM, default 2). Older NCCL used index 0.
    """
    raw = environ.get("NCCL_IB_GID_INDEX")
    if _gid_index_set(raw):
        return int(raw), f"NCCL_IB_GID_INDEX={raw}"
    v = _version_tuple(nccl_version)
    if v is not None and v < (2, 21):
        return 0, f"NCCL {nccl_version} default"
    family = "AF_INET6" if environ.get("NCCL_IB_ADDR_FAMILY") == "AF_INET6" else "AF_INET"
    try:
        want_ver = int(environ.get("NCCL_IB_ROCE_VERSION_NUM") or 2)
    except ValueError:
        want_ver = 2
    net = None
    rng = environ.get("NCCL_IB_ADDR_RANGE")
    if rng:
        try:
            net = ipaddress.ip_network(rng, strict=False)
        except ValueError:
            net = None
    table = {g["index"]: g for g in port.get("gids", [])}
    size = max(table, default=-1) + 1
    zero = "0000:0000:0000:0000:0000:0000:0000:0000"

    def in_range(gid: str) -> bool:
        if net is None:
            return True
        a = gid_addr(gid)
        if a is None:
            return False
        if net.version == 4:
            return ipaddress.IPv4Address(a.packed[12:]) in net
        return a in net

    cur = 0
    for cand in range(1, size):
        g = table.get(cur, {}).get("gid", zero)
        c = table.get(cand, {}).get("gid", zero)
        if gid_family(c) != gid_family(g) and gid_family(c) == family and in_range(c):
            cur = cand
            continue
        if gid_family(c) != family or not gid_valid(c) or not in_range(c):
            continue
        ver_cur = roce_version(table.get(cur, {}).get("type"))
        ver_cand = roce_version(table.get(cand, {}).get("type"))
        if (ver_cur != ver_cand or not gid_valid(g)) and ver_cand == want_ver:
            cur = cand
    how = "NCCL's automatic choice" + (f" (NCCL_IB_ADDR_FAMILY={family})" if family != "AF_INET" else "")
    return cur, how
