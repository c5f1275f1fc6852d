"""doctor's rail checks: a rail that differs from the host's other rails, or from the same rail on
the other hosts (docs/DOCTOR.md, "Rails").

A rail is an interface that carries an IPv4 address and is not loopback (nor a software switch or
tunnel: a docker0 bridge is not a NIC), and, on RDMA hosts, each HCA port NCCL may use. Rails are
compared by what the facts hold: for an interface its effective rate (the link speed, or a root
tbf/htb shaper's rate where that is lower: a left-over `tc` shaper caps a NIC as surely as a link
that trained down), MTU, state and link layer; for an HCA port its link layer and, across hosts,
its rate. Within a host only NICs of one driver are compared (a 1 GbE management port beside the
RoCE rails is not a slow rail). The reference is the most common value; in a tie the faster,
larger-MTU, up one (a tie in link layer names nothing: a host may carry two networks on purpose).
What the within-host check named is not named again across hosts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from commbench.core.linkrate import effective_rate, rate_text

VIRTUAL_DRIVERS = ("bridge", "tun", "openvswitch", "wireguard", "vxlan", "dummy")
MAX_NAMES = 4  # hosts or rails listed in one message before "and N more"

_STATE_ORDER = {"up": 0, "no-carrier": 1, "down": 2}


def rails(facts: dict) -> list[dict]:
    """The host's interfaces that are rails, in the facts' order."""
    out = []
    for i in facts.get("interfaces") or []:
        ipv4 = [a for a in (i.get("addresses") or []) if ":" not in a]
        if ipv4 and i.get("link_layer") != "loopback" and i.get("name") != "lo" \
                and i.get("driver") not in VIRTUAL_DRIVERS:
            out.append(i)
    return out


# One property of a rail: its value (None: unknown, not compared), how a value reads, the order
# that breaks a tie for the reference (lowest first), and the hint for a rail that differs.
class _Prop:
    def __init__(self, key: str, value: Callable, text: Callable, prefer: Any, hint: Callable) -> None:
        self.key, self.value, self.text, self.prefer, self.hint = key, value, text, prefer, hint


def _rate_hint(name: str, iface: dict) -> str:
    _, source = effective_rate(iface)
    if source.endswith("shaper"):
        return (f"a shaper caps {name}: see `tc qdisc show dev {name}` and remove it if it is left over "
                f"(tc qdisc del dev {name} root); a slow rail paces every ring and every transfer striped over it")
    return (f"{name} trained down or is another NIC: check `ethtool {name}`, the cable, the transceiver and the "
            "switch port; a slow rail paces every ring and every transfer striped over it")


IFACE_PROPS = (
    _Prop("rate", lambda i: effective_rate(i)[0],
          lambda v, i=None: rate_text(v) + (f" ({effective_rate(i)[1]})" if i is not None else ""),
          lambda v: -v, _rate_hint),
    _Prop("mtu", lambda i: i.get("mtu"), lambda v, i=None: f"MTU {v}", lambda v: -v,
          lambda name, i: f"set the same MTU on every rail of every host and on the switch ports, e.g. "
                          f"ip link set dev {name} mtu 9000"),
    _Prop("state", lambda i: i.get("state"), lambda v, i=None: f"state {v}", lambda v: _STATE_ORDER.get(v, 9),
          lambda name, i: f"a rail that is not up carries nothing: check the cable and the switch port "
                          f"(ip link show {name})"),
    _Prop("link_layer", lambda i: i.get("link_layer"), lambda v, i=None: f"link layer {v}", None,
          lambda name, i: f"{name} is on another kind of network than the other rails: check its configured link "
                          "type (e.g. mlxconfig LINK_TYPE_P1) or leave it out of NCCL_SOCKET_IFNAME"),
)


def _port_layer(p: dict) -> str | None:
    return p.get("link_layer")


PORT_PROPS = (
    _Prop("link_layer", _port_layer,
          lambda v, p=None: "RoCE (Ethernet)" if v == "Ethernet" else str(v), None,
          lambda name, p: f"{name} runs another link layer than the other ports: check its configured link type "
                          f"(mlxconfig LINK_TYPE_P1) or exclude it: NCCL_IB_HCA=^={name}"),
    _Prop("rate", lambda p: p.get("rate_gbps") if p.get("state") == "ACTIVE" else None,
          lambda v, p=None: f"{v:g} Gb/s", lambda v: -v,
          lambda name, p: f"{name} trained down: check the cable, the transceiver and the switch port (ibstat)"),
)


def _reference(values: dict[str, object], prop: _Prop) -> object:
    """The most common value; in a tie the preferred one, or None (name nothing) where the
    property has no preference: one InfiniBand and one RoCE port may be two networks on purpose."""
    counts = Counter(values.values())
    top = max(counts.values())
    tied = [v for v in counts if counts[v] == top]
    if len(tied) > 1 and prop.prefer is None:
        return None
    return min(tied, key=prop.prefer) if len(tied) > 1 else tied[0]


def _names(names: list[str]) -> str:
    more = f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
    return ", ".join(names[:MAX_NAMES]) + more


def _port_name(p: dict) -> str:
    return f"{p['device']}:{p['port']}"


def _within(host: str, items: dict[str, dict], props: tuple, finding, check: str) -> tuple[list, set]:
    """Findings for the items of one host (one driver or all ports) that differ from the others,
    and the (name, property) pairs they named."""
    out: list = []
    named: set = set()
    if len(items) < 2:
        return out, named
    for prop in props:
        values = {n: prop.value(i) for n, i in items.items() if prop.value(i) is not None}
        if len(set(values.values())) < 2:
            continue
        ref = _reference(values, prop)
        if ref is None:
            continue
        same = [n for n, v in values.items() if v == ref]
        for name, v in values.items():
            if v != ref:
                named.add((name, prop.key))
                out.append(finding(check, host, f"{host} rail {name}: {prop.text(v, items[name])}, the other rails "
                                   f"{prop.text(ref)} ({_names(same)})", prop.hint(name, items[name])))
    return out, named


def _host_items(facts: dict, used_ports: Callable) -> tuple[list[dict[str, dict]], dict[str, dict]]:
    """The host's interface rails grouped by driver, and its usable HCA ports by name."""
    groups: dict[object, dict[str, dict]] = {}
    for i in rails(facts):
        groups.setdefault(i.get("driver"), {})[i["name"]] = i
    ports = {_port_name(p): p for p in used_ports(facts)}
    return list(groups.values()), ports


def check_host(facts: dict, finding, used_ports: Callable) -> list:
    return _check_host(facts, finding, used_ports)[0]


def _check_host(facts: dict, finding, used_ports: Callable) -> tuple[list, set]:
    host = facts["host"]
    groups, ports = _host_items(facts, used_ports)
    out, named = [], set()
    for items in groups:
        found, seen = _within(host, items, IFACE_PROPS, finding, "rail")
        out += found
        named |= seen
    found, seen = _within(host, ports, PORT_PROPS[:1], finding, "rail")  # port rates: check port-rate
    return out + found, named | seen


def check_across(hosts: list[dict], finding, used_ports: Callable) -> list:
    """Each rail (by name) against the same rail on the other hosts."""
    if len(hosts) < 2:
        return []
    out = []
    named = {h["host"]: _check_host(h, finding, used_ports)[1] for h in hosts}
    ifaces = {h["host"]: {i["name"]: i for i in rails(h)} for h in hosts}
    ports = {h["host"]: {_port_name(p): p for p in used_ports(h)} for h in hosts}
    traffic = {(h.get("traffic") or {}).get("iface") for h in hosts}
    for items, props in ((ifaces, IFACE_PROPS), (ports, PORT_PROPS)):
        for name in dict.fromkeys(n for per in items.values() for n in per):
            for prop in props:
                if prop.key == "mtu" and traffic == {name}:
                    continue  # the traffic interface's MTU: check mtu-mismatch names it
                out += _across_one(name, prop, items, named, finding)
    return out + _missing(ifaces, finding)


def _across_one(name: str, prop: _Prop, items: dict[str, dict], named: dict[str, set], finding) -> list:
    values = {h: prop.value(per[name]) for h, per in items.items()
              if name in per and prop.value(per[name]) is not None}
    if len(set(values.values())) < 2:
        return []
    ref = _reference(values, prop)
    if ref is None:
        return []
    same = [h for h, v in values.items() if v == ref]
    out = []
    for host, v in values.items():
        if v != ref and (name, prop.key) not in named[host]:
            item = items[host][name]
            out.append(finding("rail-mismatch", host, f"{host} rail {name}: {prop.text(v, item)}, the same rail on the "
                               f"other hosts {prop.text(ref)} ({_names(same)})", prop.hint(name, item)))
    return out


def _missing(ifaces: dict[str, dict], finding) -> list:
    """A rail most hosts have (an interface with an IPv4 address) that one host lacks."""
    out = []
    counts = Counter(n for per in ifaces.values() for n in per)
    for name, n in counts.items():
        if n * 2 <= len(ifaces):
            continue
        have = [h for h, per in ifaces.items() if name in per]
        for host, per in ifaces.items():
            if name not in per:
                out.append(finding("rail-mismatch", host, f"{host} has no rail {name} (no interface {name} with an "
                                   f"IPv4 address), the other hosts do ({_names(have)})",
                                   f"check that {name} exists on {host}, is up and has its address (ip addr show "
                                   f"{name}); NCCL and gloo cannot use a rail without one"))
    return out
