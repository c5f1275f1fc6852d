"""The rails of `commbench pairs --per-rail`: which interfaces every host has, and the check that a
rail named with --rails is on every host.

A rail is an interface name with an IPv4 address (loopback aside) on every participating host: on
a multi-rail cluster eth0..ethK-1 (or one NIC per GPU), each on a subnet of its own, so a transfer
bound to the interface (harness/pairgroup.py) goes over that rail to the peer's address on it.
Rails are matched by name: a host whose interfaces are named otherwise has none of the others'
rails, and the run says which host lacks which rail.
"""

from __future__ import annotations

import ipaddress

import psutil

from commbench.core.errors import BadInput


def local_rails() -> dict[str, str]:
    """This host's interfaces with an IPv4 address: name -> address (loopback too: --rails lo may
    name it; the default leaves it out). Down or without carrier counts too: a rail that is down on
    one host is measured, fails there and is named, not left out of the run. psutil reads the
    calling process's network namespace (a lab host's own interfaces)."""
    out: dict[str, str] = {}
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        for a in addrs:
            if a.family.name == "AF_INET":
                out[name] = a.address
                break
    return out


def choose(per_rank: list[dict[str, str]], hosts: list[str], players: list[int],
           wanted: list[str] | None) -> list[str]:
    """The rails to measure: `wanted` (each on every participating host, else BadInput naming the
    host that lacks it), or every rail that all participating hosts have, in name order."""
    have = {hosts[r]: set(per_rank[r]) for r in players}
    if wanted:
        for rail in wanted:
            missing = sorted(h for h, names in have.items() if rail not in names)
            if missing:
                present = ", ".join(sorted(have[missing[0]])) or "none"
                raise BadInput(f"--rails {rail}: host {missing[0]} has no interface {rail} with an IPv4 address "
                               f"(it has: {present}); name rails that every host has")
        return list(wanted)
    routed = [{n for n in per_rank[r] if not _loopback(per_rank[r][n])} for r in players]
    common = sorted(set.intersection(*routed)) if routed else []
    if not common:
        listed = "; ".join(f"{hosts[r]}: {', '.join(sorted(n)) or 'none'}" for r, n in zip(players, routed))
        raise BadInput(f"--per-rail found no interface with an IPv4 address on every host ({listed}): "
                       "name the rails with --rails")
    return common


def partial(per_rank: list[dict[str, str]], hosts: list[str], players: list[int], chosen: list[str]) -> list[str]:
    """Rails that some participating hosts have but not all (not measured), one text each:
    "eth2 (on n1, n2 only)"."""
    on: dict[str, set[str]] = {}
    for r in players:
        for name, addr in per_rank[r].items():
            if not _loopback(addr):
                on.setdefault(name, set()).add(hosts[r])
    every = {hosts[r] for r in players}
    return [f"{name} (on {', '.join(sorted(h))} only)" for name, h in sorted(on.items())
            if name not in chosen and h != every]


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def parse(text: str | None) -> list[str] | None:
    """--rails eth0,eth1 -> ["eth0", "eth1"]; names checked as interface names (at most 15 bytes,
    no '/', ':' or whitespace), none twice."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",")]
    for n in names:
        if not n or len(n.encode()) > 15 or any(c in n for c in "/:,") or any(c.isspace() for c in n) \
                or not n.isprintable() or n in (".", ".."):
            shown = n.encode("unicode_escape").decode()
            raise BadInput(f"--rails {shown!r} is not an interface name: pass names such as eth0,eth1")
    if len(set(names)) != len(names):
        raise BadInput(f"--rails {text}: a rail is named twice; name each once")
    return names
