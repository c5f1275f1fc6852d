"""Where a run's network facts hold: each host's (and each rail's) link rate, MTU, interface and
link layer, and the one text that says where a value holds.

The facts come from the `net` column (per host: the traffic interface's facts and `host_net`'s
interfaces, core/linkrate.py for the effective rate). `where_text` says a fact over its places:
'1 Gbit/s on all 4 hosts', 'cbnode3 300 Mbit/s, the others 1 Gbit/s'. Compare's "what differs"
(analysis/points/runsdiffer.py, and through it the report's comparison) and a figure's run line
(analysis/points/runs.py: the plot subtitle) say where with it (issue #40).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from commbench.analysis.points.frames import json_cell, printable
from commbench.core.linkrate import LinkRate, effective_rate, host_rate

RATE, MTU, IFACE, LINK_LAYER = "link rate", "mtu", "iface", "link_layer"  # a fact as a "differs" line names it
FACTS = (RATE, MTU, IFACE, LINK_LAYER)
Place = tuple[str, str]  # (host, interface); the interface is "" for a fact of the host (its traffic interface)
Facts = dict[str, dict[Place, set[str]]]  # fact -> place -> the values it had over a side's runs


def side_facts(cells: Iterable[object]) -> Facts:
    """Each fact's values per place over a side's `net` cells (JSON text or parsed); a value that is
    not known is left out, so a fact nobody recorded has no places."""
    out: Facts = {f: {} for f in FACTS}
    for cell in cells:
        per_host = json_cell(cell) if isinstance(cell, str) else cell
        if not isinstance(per_host, dict):
            continue
        for host, facts in per_host.items():
            if isinstance(facts, dict):
                for fact, place, value in _host_facts(printable(str(host)), facts):
                    out[fact].setdefault(place, set()).add(value)
    return out


def _host_facts(host: str, facts: Mapping[str, Any]) -> list[tuple[str, Place, str]]:
    """(fact, place, value) of one host: the traffic interface's, then the other interfaces of note."""
    traffic = facts.get("iface")
    found = [(IFACE, (host, ""), printable(str(traffic)))] if traffic else []
    rate = host_rate(facts)
    found += _iface_facts(host, str(traffic or ""), rate, facts)
    host_net = facts.get("host_net")
    interfaces = host_net.get("interfaces") if isinstance(host_net, dict) else None
    for i in interfaces if isinstance(interfaces, list) else []:
        if isinstance(i, dict) and i.get("name") and i.get("name") != traffic and i.get("link_layer") != "loopback":
            found += _iface_facts(host, str(i["name"]), _rate(i), i)
    return found


def _rate(iface: Mapping[str, Any]) -> LinkRate:
    """An interface's effective rate, as host_rate gives the traffic interface's."""
    bits, source = effective_rate(iface)
    link = iface.get("speed_mbps")
    known = isinstance(link, (int, float)) and not isinstance(link, bool) and link > 0
    return LinkRate(bits, float(link) * 1e6 if known and link is not None else None, source)


def _iface_facts(host: str, name: str, rate: LinkRate, iface: Mapping[str, Any]) -> list[tuple[str, Place, str]]:
    place = (host, printable(name))
    out = [(RATE, place, rate.text())] if rate.bits is not None else []
    out += [(fact, place, printable(str(iface[key]))) for fact, key in ((MTU, "mtu"), (LINK_LAYER, "link_layer"))
            if iface.get(key) not in (None, "")]
    return out


def where_text(values: Mapping[str, str], noun: str = "hosts") -> str:
    """A fact over its places, {label: value} -> '1 Gbit/s on all 4 hosts', 'cbnode1 1 Gbit/s' (one
    place), 'cbnode3 300 Mbit/s, the others 1 Gbit/s'; the most common value is 'the others'."""
    if not values:
        return ""
    groups: dict[str, list[str]] = {}
    for label in sorted(values):
        groups.setdefault(values[label], []).append(label)
    if len(groups) == 1:
        value, labels = next(iter(groups.items()))
        return f"{value} on all {len(labels)} {noun}" if len(labels) > 1 else f"{labels[0]} {value}"
    common = max(groups, key=lambda v: (len(groups[v]), v))
    shown = [f"{_labels(labels)} {value}" for value, labels in sorted(groups.items(), key=lambda g: (len(g[1]), g[0]))
             if value != common]
    others = groups[common]
    return ", ".join(shown) + (f", the others {common}" if len(others) > 1 else f", {others[0]} {common}")


def _labels(labels: list[str]) -> str:
    """Host names as a hostlist ('cbnode[1,3]'); a host's rails ('cbnode3 eth1') one by one."""
    if any(" " in x for x in labels) or len(labels) == 1:
        return ", ".join(labels)
    try:
        import hostlist

        return str(hostlist.collect_hostlist(labels))
    except Exception:  # noqa: BLE001 - odd names python-hostlist refuses (its own error types): list them plainly
        return ",".join(labels)


def difference(fact: str, before: Facts, after: Facts) -> str | None:
    """'link rate: before 1 Gbit/s on all 4 hosts; after cbnode3 300 Mbit/s, the others 1 Gbit/s':
    the fact at the places where it changed, or None. Places known on both sides decide; sides
    that share no place differ when their values do (a value known on one side only is no change)."""
    b, a = before.get(fact, {}), after.get(fact, {})
    if not b or not a:
        return None
    shared = set(b) & set(a)
    changed = {p for p in shared if b[p] != a[p]}
    if shared and not changed:
        return None
    if not shared and {v for vs in b.values() for v in vs} == {v for vs in a.values() for v in vs}:
        return None
    ifaces = {p[1] for p in changed} if changed else {p[1] for p in [*b, *a]}
    scope_b = {p: v for p, v in b.items() if p[1] in ifaces}
    scope_a = {p: v for p, v in a.items() if p[1] in ifaces}
    rails = len(ifaces) > 1 or _several_ifaces(b) or _several_ifaces(a)
    if _uniform(scope_b) and _uniform(scope_a) and set(scope_b) == set(scope_a):  # the same everywhere
        return f"{fact}: before {_one(scope_b)}, after {_one(scope_a)}, {_everywhere(scope_b, rails)}"
    return f"{fact}: before {_side_text(scope_b, rails)}; after {_side_text(scope_a, rails)}"


def _everywhere(places: Mapping[Place, set[str]], rails: bool) -> str:
    """'on all 4 hosts', 'on eth1 of all 3 hosts', 'on all 6 rails', 'on cbnode1'."""
    hosts, ifaces = {p[0] for p in places}, {p[1] for p in places}
    if len(places) == 1:
        return f"on {_label(next(iter(places)), rails)}"
    if rails and len(ifaces) == 1:
        return f"on {next(iter(ifaces))} of all {len(hosts)} hosts"
    return f"on all {len(places)} {'rails' if rails else 'hosts'}"


def _several_ifaces(places: Mapping[Place, set[str]]) -> bool:
    per_host: dict[str, set[str]] = {}
    for host, iface in places:
        per_host.setdefault(host, set()).add(iface)
    return any(len(x) > 1 for x in per_host.values())


def _uniform(places: Mapping[Place, set[str]]) -> bool:
    return len({frozenset(v) for v in places.values()}) == 1


def _one(places: Mapping[Place, set[str]]) -> str:
    return _value(next(iter(places.values())))


def _value(values: set[str]) -> str:
    return " or ".join(sorted(values))


def _label(place: Place, rails: bool) -> str:
    return f"{place[0]} {place[1]}" if rails and place[1] else place[0]


def _side_text(places: Mapping[Place, set[str]], rails: bool) -> str:
    if _uniform(places) and len(places) > 1:
        return f"{_one(places)} {_everywhere(places, rails)}"
    return where_text({_label(p, rails): _value(v) for p, v in places.items()})
