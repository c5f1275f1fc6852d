"""`commbench doctor`: the network setup checks, per host and across hosts.

Each check reads the facts netinfo.host_facts() collected and returns findings, each a one-line
message naming the host and the thing at fault, with a one-line hint. Under a launcher (torchrun,
srun, mpirun, `commbench lab run`) every rank gathers its host's facts, rank 0 collects them over a
gloo process group, compares the hosts, prints and decides; every rank exits with rank 0's code.

Exit codes: 0 healthy, 1 problems found, 2 bad input, 3 the hosts could not be gathered.
docs/DOCTOR.md lists the checks and the NCCL rules they follow.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from commbench.net import counters, doctorrails, doctorrdmacm, doctorwire, ncclrules, netinfo, wiresource
from commbench.net.doctorview import layer_name, port_name, report_human
from commbench.core.errors import EXIT_BAD_RESULT, EXIT_OK, BadInput, RuntimeFailure
from commbench.core.inputs import check_path, shown_path

ROCE_OVERHEAD = 96  # iboe_get_mtu(): GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4
IB_MTUS = (4096, 2048, 1024, 512, 256)


@dataclass
class Finding:
    check: str
    host: str
    message: str
    hint: str
    severity: str = "problem"  # "problem" (exit 1) or "note" (printed, exit 0)


def roce_rdma_mtu(netdev_mtu: int) -> int:
    """The RDMA MTU a RoCE port gets from its netdev's MTU (the kernel's iboe_get_mtu)."""
    room = netdev_mtu - ROCE_OVERHEAD
    return next((m for m in IB_MTUS if room >= m), 0)


def _usable_names(facts: dict) -> str:
    names = [i["name"] for i in facts["interfaces"] if ncclrules.has_address(i)]
    return ", ".join(names) or "none"


def _suggest_iface(facts: dict) -> str:
    for i in facts["interfaces"]:
        if i.get("link_layer") != "loopback" and i.get("state") == "up" and ncclrules.has_address(i):
            return i["name"]
    return "eth0"


# ---------------------------------------------------------------------------------------------
# Per-host checks
# ---------------------------------------------------------------------------------------------


def check_socket_ifname(facts: dict) -> list[Finding]:
    host, value = facts["host"], facts["env"].get("NCCL_SOCKET_IFNAME")
    if value is None or value == "":
        return []
    if len(value) == 1:
        return [Finding("socket-ifname", host, f"NCCL_SOCKET_IFNAME={value} is ignored by NCCL on {host} "
                        "(it reads the variable only when it has 2 or more characters)",
                        "set a real list, e.g. NCCL_SOCKET_IFNAME==" + _suggest_iface(facts), "note")]
    spec = ncclrules.parse_nccl_list(value)
    selected = ncclrules.socket_ifname_selects(value, facts["interfaces"]) or []
    hint = ("NCCL reads a comma list of name prefixes ('eth' matches eth0, eth1), '=' first makes them exact "
            f"('=eth0'), '^' first excludes ('^docker,lo'): e.g. NCCL_SOCKET_IFNAME=={_suggest_iface(facts)}")
    if not selected:
        no_addr = [i["name"] for i in facts["interfaces"] if spec.matches(i["name"]) and not ncclrules.has_address(i)]
        extra = f"; {', '.join(no_addr)} matches but has no IP address" if no_addr else ""
        return [Finding("socket-ifname", host, f"NCCL_SOCKET_IFNAME={value} matches no interface with an IP address "
                        f"on {host} (interfaces with an address: {_usable_names(facts)}){extra}", hint)]
    by_name = {i["name"]: i for i in facts["interfaces"]}
    if all(by_name[n].get("running") is False for n in selected):
        return [Finding("socket-ifname", host, f"NCCL_SOCKET_IFNAME={value} selects only {', '.join(selected)} on "
                        f"{host}, which is down (no carrier): NCCL skips interfaces that are not RUNNING", hint)]
    return []


def check_gloo_ifname(facts: dict) -> list[Finding]:
    host, value = facts["host"], facts["env"].get("GLOO_SOCKET_IFNAME")
    missing = ncclrules.gloo_ifname_missing(value, facts["interfaces"])
    if not missing:
        return []
    syntax = " (gloo has no '=' or '^' syntax: names are exact)" if any(m[:1] in "=^" for m in missing) else ""
    return [Finding("gloo-ifname", host, f"GLOO_SOCKET_IFNAME={value} names {', '.join(missing)}, which is not an "
                    f"interface with an IP address on {host} (interfaces with an address: {_usable_names(facts)})"
                    f"{syntax}",
                    "gloo takes exact interface names, comma-separated, and every one must exist with an address "
                    f"(torch fails with 'Unable to find address'): e.g. GLOO_SOCKET_IFNAME={_suggest_iface(facts)}")]


def _active_rdma(facts: dict) -> list[dict]:
    return [p for p in facts["rdma"]
            if p.get("state") == "ACTIVE" and p.get("link_layer") in ("InfiniBand", "Ethernet")]


def _ib_disabled(facts: dict) -> bool:
    try:
        return int(facts["env"].get("NCCL_IB_DISABLE", "0") or 0) != 0
    except ValueError:
        return False


def check_ib_disable(facts: dict) -> list[Finding]:
    host, value = facts["host"], facts["env"].get("NCCL_IB_DISABLE")
    if value is None:
        return []
    try:
        disabled = int(value) != 0
    except ValueError:
        return [Finding("ib-disable", host, f"NCCL_IB_DISABLE={value} is not a number on {host}: NCCL ignores it "
                        "and keeps IB/RoCE enabled", "set NCCL_IB_DISABLE=0 or 1, or unset it", "note")]
    active = _active_rdma(facts)
    if not disabled or not active:
        return []
    names = ", ".join(f"{port_name(p)} {layer_name(p)}" for p in active)
    return [Finding("ib-disable", host, f"NCCL_IB_DISABLE={value} while {len(active)} RDMA port(s) are ACTIVE on "
                    f"{host} ({names}): NCCL falls back to TCP sockets",
                    "unset NCCL_IB_DISABLE (or set it to 0) so that NCCL uses InfiniBand/RoCE")]


def _considered_ports(facts: dict) -> list[dict]:
    """The ports NCCL_IB_HCA lets NCCL consider, whatever their state."""
    value = facts["env"].get("NCCL_IB_HCA")
    if value is None:
        return list(facts["rdma"])
    spec = ncclrules.parse_nccl_list(value)
    return [p for p in facts["rdma"] if spec.matches(p["device"], p["port"])]


def _used_ports(facts: dict) -> list[dict]:
    """The ports NCCL's IB transport will use (none when NCCL_IB_DISABLE is set)."""
    if _ib_disabled(facts):
        return []
    return ncclrules.ib_hca_selects(facts["env"].get("NCCL_IB_HCA"), facts["rdma"])


def check_ib_hca(facts: dict) -> list[Finding]:
    host, value = facts["host"], facts["env"].get("NCCL_IB_HCA")
    if value is None:
        return []
    spec = ncclrules.parse_nccl_list(value)
    ports = facts["rdma"]
    have = ", ".join(port_name(p) for p in ports) or "none: /sys/class/infiniband is empty"
    out = []
    unmatched = [f"{n}:{q}" if q != -1 else n for n, q in spec.items
                 if not any(spec.item_matches((n, q), p["device"], p["port"]) for p in ports)]
    syntax = ("NCCL_IB_HCA is a comma list of device[:port] ('mlx5_0:1,mlx5_1'), prefixes unless '=' comes first "
              "('=mlx5_1'), '^' first excludes ('^=mlx5_1')")
    if unmatched and not spec.exclude:
        out.append(Finding("ib-hca", host, f"NCCL_IB_HCA={value} names {', '.join(unmatched)}, which does not exist on "
                           f"{host} (RDMA ports: {have})", f"{syntax}; use the names above"))
    elif unmatched:
        out.append(Finding("ib-hca", host, f"NCCL_IB_HCA={value} excludes {', '.join(unmatched)}, which does not exist "
                           f"on {host} (RDMA ports: {have})", "harmless, but check the name for a typo", "note"))
    active = _active_rdma(facts)
    if active and not _ib_disabled(facts) and not ncclrules.ib_hca_selects(value, ports):
        out.append(Finding("ib-hca", host, f"NCCL_IB_HCA={value} selects no ACTIVE RDMA port on {host}: "
                           f"NCCL falls back to TCP sockets (ACTIVE: {', '.join(port_name(p) for p in active)})",
                           f"{syntax}; e.g. NCCL_IB_HCA={','.join(port_name(p) for p in active)}"))
    return out


def check_port_state(facts: dict) -> list[Finding]:
    host = facts["host"]
    out = []
    for p in _considered_ports(facts):
        state, phys = p.get("state"), p.get("phys_state")
        if state == "ACTIVE" and phys in (None, "LinkUp"):
            continue
        if state is None and phys is None:
            continue
        what = f"{state or 'state unknown'}" + (f", phys_state {phys}" if phys else "")
        if state in ("INIT", "ARMED"):
            cause = "the link is up but no subnet manager has activated it: check opensm/UFM"
        elif phys == "Polling":
            cause = "no peer answers: check the cable and the switch port"
        elif phys == "Disabled":
            cause = "the port is disabled: check the switch port and the port's configuration"
        else:
            cause = "check the cable, the transceiver and the switch port (ibstat, ip link)"
        out.append(Finding("port-state", host,
                           f"{port_name(p)} ({layer_name(p)}) on {host} is not ACTIVE/LinkUp: {what}",
                           f"{cause}; if the port is unused, exclude it: NCCL_IB_HCA=^={port_name(p)}"))
    return out


def check_port_rate(facts: dict) -> list[Finding]:
    host = facts["host"]
    groups: dict[str, list[dict]] = defaultdict(list)
    for p in _considered_ports(facts):
        if p.get("state") == "ACTIVE" and p.get("rate_gbps"):
            groups[p.get("link_layer") or "?"].append(p)
    out = []
    for ports in groups.values():
        top = max(p["rate_gbps"] for p in ports)
        fast = [p for p in ports if p["rate_gbps"] == top]
        for p in ports:
            if p["rate_gbps"] < top:
                out.append(Finding("port-rate", host,
                                   f"{port_name(p)} ({layer_name(p)}) on {host} runs at {p['rate']}, "
                                   f"slower than its peers at {fast[0]['rate']} "
                                   f"({', '.join(port_name(q) for q in fast)})",
                                   "a slow port paces every ring through it: check the cable, the transceiver and the "
                                   f"switch port speed; if it is another network on purpose, exclude it: "
                                   f"NCCL_IB_HCA=^={port_name(p)}"))
    return out


def check_roce_gid(facts: dict) -> list[Finding]:
    host, env = facts["host"], facts["env"]
    try:
        want = int(env.get("NCCL_IB_ROCE_VERSION_NUM") or 2)
    except ValueError:
        want = 2
    out = []
    for p in _used_ports(facts):
        if p.get("link_layer") != "Ethernet":
            continue
        if not p.get("gid_types_known"):
            out.append(Finding("roce-gid", host, f"{port_name(p)} (RoCE) on {host}: the GID types are not readable "
                               "(no gid_attrs/types), so the RoCE version of NCCL's GID is not checked",
                               "run `show_gids` to see the GID table", "note"))
            continue
        idx, how = ncclrules.nccl_gid_index(p, env, facts.get("nccl_version"))
        table = {g["index"]: g for g in p["gids"]}
        entry = table.get(idx)
        v2 = [g for g in p["gids"] if ncclrules.roce_version(g.get("type")) == want and ncclrules.gid_valid(g["gid"])]
        v2_text = ", ".join(f"{g['index']} ({_gid_text(g['gid'])})" for g in v2)
        if v2 and all(ncclrules.gid_family(g["gid"]) == "AF_INET6" for g in v2):
            fix = (f"RoCE v{want} GIDs here: {v2_text}; set NCCL_IB_GID_INDEX={v2[0]['index']} "
                   "or NCCL_IB_ADDR_FAMILY=AF_INET6")
        elif v2:
            fix = f"RoCE v{want} GIDs here: {v2_text}; set NCCL_IB_GID_INDEX={v2[0]['index']}"
        else:
            fix = (f"this port has no routable RoCE v{want} GID: give its netdev ({p.get('netdev') or '?'}) an IP "
                   "address and check the default RoCE mode")
        where = f"{port_name(p)} (RoCE) on {host}: NCCL uses GID index {idx} ({how})"
        if entry is None:
            out.append(Finding("roce-gid", host, f"{where}, which is empty", fix))
        elif ncclrules.roce_version(entry.get("type")) != want:
            out.append(Finding("roce-gid", host, f"{where}, which is {entry.get('type') or 'of unknown type'} "
                               f"({_gid_text(entry['gid'])}), not RoCE v{want}", fix))
        elif not ncclrules.gid_valid(entry["gid"]):
            out.append(Finding("roce-gid", host, f"{where}, a link-local RoCE v{want} GID ({_gid_text(entry['gid'])}) "
                               "that does not route beyond the local link", fix))
    return out


def _gid_text(gid: str) -> str:
    a = ncclrules.gid_addr(gid)
    if a is None:
        return gid
    return str(a.ipv4_mapped) if a.ipv4_mapped else str(a)


def check_mtu(facts: dict) -> list[Finding]:
    host = facts["host"]
    by_name = {i["name"]: i for i in facts["interfaces"]}
    out = []
    for p in _used_ports(facts):
        if p.get("link_layer") == "Ethernet":
            nd = by_name.get(p.get("netdev") or "")
            if nd and nd.get("mtu"):
                rdma = roce_rdma_mtu(nd["mtu"])
                if rdma < 4096:
                    jumbo = "; jumbo frames recommended" if nd["mtu"] <= 1500 else ""
                    out.append(Finding("roce-mtu", host, f"{port_name(p)} (RoCE) on {host} runs over "
                                       f"{nd['name']} with MTU {nd['mtu']}: its RDMA MTU is at most "
                                       f"{rdma} bytes{jumbo}",
                                       f"set MTU 9000 (at least 4200 for 4096-byte RDMA frames) on {nd['name']} and on "
                                       f"every switch port in the path: ip link set dev {nd['name']} mtu 9000"))
            elif p.get("active_mtu") and p["active_mtu"] < 4096:
                out.append(Finding("roce-mtu", host, f"{port_name(p)} (RoCE) on {host} has active_mtu "
                                   f"{p['active_mtu']} (below 4096): its netdev's MTU is below 4200"
                                   + (" (1500?)" if p["active_mtu"] == 1024 else ""),
                                   f"set MTU 9000 on the port's netdev ({p.get('netdev') or 'see ibdev2netdev'}) "
                                   "and on the switch ports; jumbo frames recommended"))
    ib_linked = [] if _ib_disabled(facts) else [
        p for p in _considered_ports(facts)
        if p.get("link_layer") == "InfiniBand" and (p.get("state") == "ACTIVE" or p.get("phys_state") == "LinkUp")]
    for p in ib_linked:  # a port whose link is up has its MTU negotiated, even before the SM activates it
        if p.get("active_mtu") and p["active_mtu"] < 4096:
            if p.get("max_mtu") and p["max_mtu"] < 4096:
                hint = (f"the HCA itself stops at max_mtu {p['max_mtu']}: only a newer HCA reaches 4096-byte frames")
            else:
                hint = ("the subnet manager's partition MTU caps it: set mtu=5 (4096) for the partition in opensm's "
                        "partitions.conf or in UFM, then check again with ibv_devinfo")
            out.append(Finding("ib-mtu", host, f"{port_name(p)} (InfiniBand) on {host} has active_mtu "
                               f"{p['active_mtu']} (max_mtu {p.get('max_mtu') or '?'}): below 4096", hint))
    if facts.get("ibv_devinfo") in ("not installed", "not recorded") and ib_linked:
        out.append(Finding("ib-mtu", host, f"ibv_devinfo is not available on {host}: the active_mtu of its InfiniBand "
                           "ports is not checked", "install ibverbs-utils (Debian/Ubuntu) or libibverbs-utils",
                           "note"))
    return out


def check_counters(facts: dict) -> list[Finding]:
    """Trouble counters as they stand (net/doctorwire.py), and what moved while --watch looked."""
    host = facts["host"]
    out = doctorwire.findings(host, doctorwire.standing(doctorwire.from_json(facts.get("counters"))),
                              "since they were last cleared", Finding)
    watched = facts.get("watch")
    if watched:
        moved = [counters.Moved(**m) for m in watched["moved"]]
        out += doctorwire.findings(host, counters.trouble(moved), f"rose in {watched['seconds']:g} s", Finding)
    return out


def check_rails(facts: dict) -> list[Finding]:
    """A rail unlike the host's other rails (net/doctorrails.py)."""
    return doctorrails.check_host(facts, Finding, _used_ports)


def check_rdma_cm(facts: dict) -> list[Finding]:
    """The RDMA connection manager's modules and device (net/doctorrdmacm.py): notes."""
    return doctorrdmacm.check_host(facts, Finding)


HOST_CHECKS = (check_socket_ifname, check_gloo_ifname, check_ib_disable, check_ib_hca, check_port_state,
               check_port_rate, check_roce_gid, check_mtu, check_counters, check_rails, check_rdma_cm)


def check_host(facts: dict) -> list[Finding]:
    return [f for check in HOST_CHECKS for f in check(facts)]


# ---------------------------------------------------------------------------------------------
# Across hosts
# ---------------------------------------------------------------------------------------------


def _groups(values: Mapping[str, object]) -> list[tuple[object, list[str]]]:
    """{host: value} -> [(value, [hosts])], the most common value first."""
    by: dict[object, list[str]] = defaultdict(list)
    for host, v in values.items():
        by[v].append(host)
    return sorted(by.items(), key=lambda kv: (-len(kv[1]), str(kv[0])))


def _differs(check: str, what: str, values: Mapping[str, object], hint: str, fmt=str) -> list[Finding]:
    groups = _groups(values)
    if len(groups) < 2:
        return []
    odd = [h for _, hosts in groups[1:] for h in hosts]
    text = "; ".join(f"{fmt(v)} on {', '.join(hosts)}" for v, hosts in groups)
    return [Finding(check, ",".join(odd), f"{what} across hosts: {text}", hint)]


def check_across(hosts: list[dict]) -> list[Finding]:
    if len(hosts) < 2:
        return []
    out = []
    traffic = {h["host"]: (h.get("traffic") or {}) for h in hosts}
    mtus = {host: (t.get("iface"), t.get("mtu")) for host, t in traffic.items() if t.get("mtu")}
    if len(mtus) == len(hosts):
        out += _differs("mtu-mismatch", "MTU of the traffic interface differs", {h: v[1] for h, v in mtus.items()},
                        "a path runs at its smallest MTU and mismatched hosts drop or fragment large frames: set the "
                        "same MTU on every host and switch port, e.g. ip link set dev IFACE mtu 9000",
                        fmt=lambda m: f"MTU {m}")
        # name the interface per host in the message
        if out and out[-1].check == "mtu-mismatch":
            detail = ", ".join(f"{h} {mtus[h][0]}={mtus[h][1]}" for h in mtus)
            out[-1].message += f" ({detail})"
    rates = {}
    for h in hosts:
        used = [p for p in _used_ports(h)]
        rates[h["host"]] = tuple(sorted((p.get("rate_gbps") or 0 for p in used), reverse=True))
    if any(rates.values()):
        out += _differs("rate-mismatch", "ACTIVE RDMA ports and rates differ", rates,
                        "every host should bring the same ports at the same rate: check the ports named by "
                        "`commbench doctor` on the odd hosts (ibstat), their cables and switch ports",
                        fmt=_rate_text)
    states = {h["host"]: tuple(sorted(f"{port_name(p)}={p.get('state')}" for p in _considered_ports(h)))
              for h in hosts}
    if any(states.values()):
        out += _differs("state-mismatch", "RDMA port states differ", states,
                        "a port down on one host only is a cable, transceiver or switch port: see its port-state "
                        "finding", fmt=lambda s: " ".join(s) or "no ports")
    versions = {h["host"]: h.get("nccl_version") for h in hosts}
    if any(versions.values()):
        out += _differs("nccl-version", "NCCL version differs", versions,
                        "run the same NCCL everywhere (the same container image or nvidia-nccl wheel)",
                        fmt=lambda v: v or "none")
    return out + doctorrails.check_across(hosts, Finding, _used_ports)


def _rate_text(rates: tuple) -> str:
    if not rates:
        return "no ACTIVE RDMA port"
    counts: dict[float, int] = defaultdict(int)
    for r in rates:
        counts[r] += 1
    return " + ".join(f"{n}x {r:g} Gb/s" if r else f"{n}x unknown rate" for r, n in counts.items())


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def exit_code(findings: list[Finding]) -> int:
    return EXIT_BAD_RESULT if any(f.severity == "problem" for f in findings) else EXIT_OK


def report_json(hosts: list[dict], findings: list[Finding]) -> str:
    code = exit_code(findings)
    return json.dumps({"healthy": code == EXIT_OK, "exit_code": code, "hosts": hosts,
                       "findings": [asdict(f) for f in findings]}, indent=2, default=str)


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def _traffic(facts: dict, master_addr: str | None, live: bool) -> dict | None:
    """The interface the collectives use and its MTU (for the cross-host MTU comparison)."""
    from commbench.net.envinfo import iface_facts, traffic_iface

    if live:
        iface = traffic_iface(master_addr)
        return iface_facts(iface) if iface else None
    names = {i["name"]: i for i in facts["interfaces"]}
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        first = (facts["env"].get(var) or "").split(",")[0].lstrip("=")
        if first in names:
            return {"iface": first, "mtu": names[first].get("mtu"), "link_layer": names[first].get("link_layer")}
    return None


def evaluate(hosts: list[dict]) -> list[Finding]:
    findings = [f for h in hosts for f in check_host(h)]
    return findings + check_across(hosts)


def _emit(hosts: list[dict], findings: list[Finding], as_json: bool, verbose: bool = False) -> int:
    if as_json:
        print(report_json(hosts, findings))
    else:
        report_human(hosts, findings, verbose=verbose)
    return exit_code(findings)


def _live_counters(facts: dict, watch_s: float | None) -> None:
    """This host's counters as they stand; with --watch, also what moved meanwhile."""
    ifaces = [i["name"] for i in facts["interfaces"] if i.get("link_layer") != "loopback" and ncclrules.has_address(i)]
    ifaces += [p["netdev"] for p in facts["rdma"] if p.get("netdev")]
    ports = wiresource.ib_ports()
    try:
        sampler = wiresource.LiveSampler(list(dict.fromkeys(ifaces)), ports)
    except Exception:  # noqa: BLE001 - no netlink here: RDMA sysfs and perfquery still tell
        facts["counters"] = doctorwire.to_json({**wiresource.read_ib(ports),
                                                **wiresource.perfquery_reading(ports, netinfo.run_command)})
        return
    try:
        reading = {**sampler.read(), **wiresource.perfquery_reading(ports, netinfo.run_command)}
        facts["counters"] = doctorwire.to_json(reading)
        if watch_s:
            moved = doctorwire.watch(sampler, watch_s)
            facts["watch"] = {"seconds": watch_s, "moved": [asdict(m) for m in moved]}
    finally:
        sampler.close()


def run(as_json: bool = False, roots: list[str] | None = None, timeout: float = 60.0,
        watch_s: float | None = None, verbose: bool = False) -> int:
    """`commbench doctor`: returns the exit code (the same on every rank)."""
    from commbench.core import launch

    if roots and watch_s:
        raise BadInput("--watch reads this host's live counters; a recorded tree (--root) has none to watch: "
                       "drop one of them")
    if roots:
        hosts = []
        for root in roots:
            if not check_path(root, "--root").is_dir:  # never raises: a name too long is one line
                raise BadInput(f"--root {shown_path(root)} is not a directory: give a recorded sysfs tree "
                               "(a folder with class/net and class/infiniband, see tests/data/netinfo)")
            facts = netinfo.host_facts(root=root)
            facts["traffic"] = _traffic(facts, None, live=False)
            facts["counters"] = doctorwire.to_json(wiresource.recorded_reading(Path(root)))
            hosts.append(facts)
        return _emit(hosts, evaluate(hosts), as_json, verbose)

    env = launch.detect()
    facts = netinfo.host_facts()
    facts["traffic"] = _traffic(facts, env.master_addr if env else None, live=True)
    _live_counters(facts, watch_s)
    if env is None or env.world_size == 1:
        return _emit([facts], evaluate([facts]), as_json, verbose)
    return _gathered(env, facts, as_json, timeout, verbose)


def _gathered(env, facts: dict, as_json: bool, timeout: float, verbose: bool) -> int:
    """Every rank sends its host's facts to rank 0 over gloo; rank 0 decides; all exit alike."""
    from datetime import timedelta

    import torch.distributed as dist

    # doctor's own rendezvous must not depend on the setting it checks
    if ncclrules.gloo_ifname_missing(os.environ.get("GLOO_SOCKET_IFNAME"), facts["interfaces"]):
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://{env.master_addr}:{env.master_port}", rank=env.rank,
                                world_size=env.world_size, timeout=timedelta(seconds=timeout))
    except (RuntimeError, ValueError) as exc:
        raise RuntimeFailure(f"rank {env.rank} on {facts['host']} could not reach the other hosts at "
                             f"{env.master_addr}:{env.master_port}: {str(exc).splitlines()[0]} (this host's own "
                             "findings: run `commbench doctor` without a launcher)") from None
    try:
        everyone: list = [None] * env.world_size
        dist.all_gather_object(everyone, facts)
        code = EXIT_OK
        if env.rank == 0:
            hosts, seen = [], set()
            for f in everyone:
                if f["host"] not in seen:  # several ranks per host report the same host
                    seen.add(f["host"])
                    hosts.append(f)
            code = _emit(hosts, evaluate(hosts), as_json, verbose)
            sys.stdout.flush()
        box = [code]
        dist.broadcast_object_list(box, src=0)
        return int(box[0])
    finally:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the process ends anyway
            pass
