"""A link's effective rate: the link speed, or a root tbf/htb shaper's rate where that is lower.

A lab link is a 10 Gbit/s veth shaped to 1gbit: what it carries is 1 Gbit/s, and a shaper left
over on a real NIC caps it as surely as a link that trained down. So the rate a run's figure
subtitle, the report's network table and compare's "what differs" show is this one, with the link
speed beside it when a shaper is what caps it ("1 Gbit/s (shaped; link 10 Gbit/s)").

Input shapes: an interface's facts as net/netinfo.py writes them (`speed_mbps`, and `shaper`
{"kind": "tbf"|"htb", "rate_bits": N} where a root shaper caps it), and the `net` column of a
results row: {host: {"iface", "speed_mbps", ..., "host_net": {"interfaces": [facts, ...]}}}, where
the traffic interface's shaper is found by its name among `host_net`'s interfaces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

LINK_SPEED = "link speed"


def effective_rate(iface: Mapping[str, Any]) -> tuple[float | None, str]:
    """(bits per second, where the cap comes from): min(link speed, root shaper's rate)."""
    link = iface.get("speed_mbps")
    speed = float(link) * 1e6 if _positive(link) else None
    shaper = iface.get("shaper")
    if not isinstance(shaper, dict):
        shaper = {}
    shaped = shaper.get("rate_bits")
    if _positive(shaped) and (speed is None or shaped < speed):
        return float(shaped), f"{shaper.get('kind') or 'tc'} shaper"
    return speed, LINK_SPEED


def _positive(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and value == value


def rate_text(bits: float) -> str:
    """1e9 -> '1 Gbit/s', 8e8 -> '800 Mbit/s'."""
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.4g} {unit}"
    return f"{bits:g} bit/s"


@dataclass(frozen=True)
class LinkRate:
    bits: float | None       # what the link carries at most; None: unknown
    link_bits: float | None  # the link speed the kernel reports
    source: str              # LINK_SPEED, or "tbf shaper" / "htb shaper"

    @property
    def shaped(self) -> bool:
        return self.source != LINK_SPEED

    def text(self) -> str:
        """'10 Gbit/s', '1 Gbit/s (shaped; link 10 Gbit/s)'; '' when unknown."""
        if self.bits is None:
            return ""
        if not self.shaped:
            return rate_text(self.bits)
        link = f"; link {rate_text(self.link_bits)}" if self.link_bits else ""
        return f"{rate_text(self.bits)} (shaped{link})"


def host_rate(facts: Mapping[str, Any]) -> LinkRate:
    """The rate of one host's traffic interface, from its entry in a row's `net` column."""
    iface = dict(facts)
    if not isinstance(iface.get("shaper"), dict):
        host_net = facts.get("host_net")
        if not isinstance(host_net, dict):
            host_net = {}
        interfaces = host_net.get("interfaces")
        if not isinstance(interfaces, list):
            interfaces = []
        same = [i for i in interfaces if isinstance(i, dict) and i.get("name") == facts.get("iface")]
        if same and isinstance(same[0].get("shaper"), dict):
            iface["shaper"] = same[0]["shaper"]
    bits, source = effective_rate(iface)
    link = iface.get("speed_mbps")
    return LinkRate(bits, float(link) * 1e6 if _positive(link) else None, source)


def net_rates(net: object) -> dict[str, LinkRate]:
    """{host: LinkRate} of a `net` cell's hosts (parsed JSON); {} for anything else."""
    if not isinstance(net, dict):
        return {}
    return {str(host): host_rate(facts) for host, facts in net.items() if isinstance(facts, dict)}
