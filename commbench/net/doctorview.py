"""`commbench doctor`'s human report: the findings first, each with its fix, then one line per host (its
full facts with --verbose), then the verdict (issue #40: with 4 hosts, 36 lines of facts came before the
one PROBLEM line)."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

from commbench.core.progress import draw_bar
from commbench.core.safetext import escaped, escaped_tree
from commbench.net import counters, doctorwire, ncclrules


def port_name(p: dict) -> str:
    return f"{p['device']}:{p['port']}"


def layer_name(p: dict) -> str:
    return "RoCE" if p.get("link_layer") == "Ethernet" else (p.get("link_layer") or "unknown link layer")


def safe_for_terminal(hosts: list[dict], findings: list[Any]) -> tuple[list[dict], list[Any]]:
    """Every string that came from the environment, sysfs or a recorded tree (variable values,
    interface names, tool output), and every message quoting one, with its control characters
    shown as escapes (core/safetext.py): an escape sequence in NCCL_SOCKET_IFNAME must not reach
    the terminal. The JSON report needs none of this: json.dumps escapes them itself."""
    safe = [replace(f, check=escaped(f.check), host=escaped(f.host), message=escaped(f.message),
                    hint=escaped(f.hint)) for f in findings]
    return escaped_tree(hosts), safe


def _console(file):
    from rich.console import Console

    # markup and emoji off: '[red]' or ':x:' in a value is text, never a style or a glyph
    # Under a launcher (mpirun's pseudo-terminal) or CI, plain text: styles would be escape bytes in a log.
    styled = draw_bar("auto", bool(getattr(file, "isatty", lambda: False)()))
    return Console(file=file, width=max(120, Console(file=file).width), highlight=False, soft_wrap=True,
                   markup=False, emoji=False, force_terminal=styled)


def report_human(hosts: list[dict], findings: list[Any], file=None, verbose: bool = False) -> None:
    """Findings (problems, then notes), then each host in one line or, with `verbose`, in full, then
    the verdict line."""
    hosts, findings = safe_for_terminal(hosts, findings)
    file = file or sys.stdout
    console = _console(file)
    problems = [f for f in findings if f.severity == "problem"]
    notes = [f for f in findings if f.severity != "problem"]
    for f in problems + notes:
        print(f"{'PROBLEM' if f.severity == 'problem' else 'note'} [{f.check}] {f.message}", file=file)
        print(f"    hint: {f.hint}", file=file)
    if findings:
        print(file=file)
    file.flush()
    for h in hosts:
        (_host_facts if verbose else _host_line)(console, h)
    file.flush()
    if problems:
        where = sorted({h for f in problems for h in f.host.split(",")})
        print(f"doctor: {len(problems)} problem(s) on {', '.join(where)} ({len(hosts)} host(s) checked)", file=file)
    else:
        print(f"doctor: healthy ({len(hosts)} host(s) checked" + (f", {len(notes)} note(s))" if notes else ")")
              + ("" if notes else ": no problem found"), file=file)
    if not verbose:
        print("(each host's interfaces, RDMA ports, GPUs and NCCL/GLOO settings in full: --verbose)", file=file)
    file.flush()


def _host_line(console, h: dict) -> None:
    """One line: the host, where its facts came from, NCCL, the traffic interface, RDMA, GPUs."""
    from rich.text import Text

    up = [i["name"] for i in h["interfaces"] if i.get("state") == "up" and i.get("link_layer") != "loopback"]
    tr = h.get("traffic") or {}
    traffic = f"; traffic {tr.get('iface')} MTU {tr.get('mtu')}" if tr.get("iface") else ""
    active = sum(p.get("state") == "ACTIVE" for p in h["rdma"])
    rdma = f"RDMA {active}/{len(h['rdma'])} ports ACTIVE" if h["rdma"] else "no RDMA"
    gpus = len(h.get("gpus") or []) or len((h.get("topology") or {}).get("nearest_nic") or {})
    console.print(Text.assemble((h["host"], "bold"), f"  {h['source']}; NCCL {h.get('nccl_version') or 'not found'}; "
                                f"up: {', '.join(up) or 'none'}{traffic}; {rdma}; GPUs {gpus}"))


def rdma_cm_text(got: dict) -> str:
    """'modules rdma_cm, rdma_ucm loaded; /dev/infiniband/rdma_cm present' (net/doctorrdmacm.py's facts)."""
    modules, dev = got.get("modules"), got.get("dev")
    cm = [m for m in ("rdma_cm", "rdma_ucm") if modules is not None and m in modules]
    loaded = "modules unknown" if modules is None else (f"modules {', '.join(cm)} loaded" if cm else "not loaded")
    node = "unknown" if dev is None else ("present" if "rdma_cm" in dev else "missing")
    return f"{loaded}; /dev/infiniband/rdma_cm {node}"


def _host_facts(console, h: dict) -> None:
    from rich.text import Text

    console.print(Text.assemble((h["host"], "bold"), f"  ({h['source']}; NCCL {h.get('nccl_version') or 'not found'})"))
    _interfaces(console, h)
    _rdma(console, h)
    console.print(f"ibv_devinfo: {h.get('ibv_devinfo')}")
    console.print(f"RDMA connection manager: {rdma_cm_text(h.get('rdma_cm') or {})}")
    _gpus(console, h)
    env = h.get("env") or {}
    console.print("NCCL/GLOO environment: " + (" ".join(f"{k}={v}" for k, v in env.items()) or "none set"))
    if h.get("traffic"):
        tr = h["traffic"]
        console.print(f"traffic interface: {tr.get('iface')} MTU {tr.get('mtu')}")
    if h.get("watch"):
        seen = doctorwire.watch_summary([counters.Moved(**m) for m in h["watch"]["moved"]], h["watch"]["seconds"])
        console.print(f"watched {h['watch']['seconds']:g} s: " + ("; ".join(seen) or "no traffic"))
    console.print()


def _interfaces(console, h: dict) -> None:
    from rich.table import Table

    t = Table("interface", "state", "MTU", "speed", "driver", "addresses", box=None, pad_edge=False)
    for i in h["interfaces"]:
        t.add_row(i["name"], i.get("state") or "?", str(i.get("mtu") or "?"),
                  f"{i['speed_mbps']} Mb/s" if i.get("speed_mbps") else "-", i.get("driver") or "-",
                  ", ".join(i["addresses"]) if i.get("addresses") is not None else "(not recorded)")
    console.print(t)


def _rdma(console, h: dict) -> None:
    from rich.table import Table

    if not h["rdma"]:
        console.print("RDMA: no devices in /sys/class/infiniband")
        return
    t = Table("RDMA port", "state", "phys", "rate", "layer", "netdev", "active_mtu", "RoCE v2 GIDs",
              box=None, pad_edge=False)
    for p in h["rdma"]:
        v2 = [str(g["index"]) for g in p["gids"] if ncclrules.roce_version(g.get("type")) == 2]
        t.add_row(port_name(p), p.get("state") or "?", p.get("phys_state") or "?", p.get("rate") or "?",
                  layer_name(p), p.get("netdev") or "-", str(p.get("active_mtu") or "-"),
                  ",".join(v2) if p.get("link_layer") == "Ethernet" else "-")
    console.print(t)


def _gpus(console, h: dict) -> None:
    near = (h.get("topology") or {}).get("nearest_nic") or {}
    if h.get("gpus"):
        names = sorted({g["name"] for g in h["gpus"]})
        console.print(f"GPUs: {len(h['gpus'])} x {', '.join(names)}")
    elif near:
        console.print(f"GPUs: {len(near)} (from nvidia-smi topo -m)")
    else:
        console.print("GPUs: none found (nvidia-smi not installed or no GPU)")
    for gpu, n in near.items():
        console.print(f"  {gpu}: nearest NIC {', '.join(n['nics'])} ({n['link']})")
