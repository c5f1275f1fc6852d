"""What ran where, one line per run: the run's first row, its name, ranks, hosts, backend, device
and network, as figure titles and the report show them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.analysis.points import hostfacts
from commbench.analysis.points.frames import as_list, json_cell, present, printable, short
from commbench.core.linkrate import net_rates, rate_text

if TYPE_CHECKING:
    import pandas as pd


def placement_name(in_place: object) -> str:
    return "in-place" if bool(in_place) else "out-of-place"


def compact_hosts(hosts: object) -> str:
    hosts = [str(h) for h in as_list(hosts)]
    if not hosts:
        return "?"
    try:
        import hostlist

        return hostlist.collect_hostlist(hosts)
    except Exception:  # noqa: BLE001 - odd names python-hostlist refuses (its own error types): list them plainly
        return ",".join(hosts)


def run_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The first row of every run, in the order the runs appear: the run's metadata."""
    if len(df) == 0:
        return []
    firsts = df.drop_duplicates(subset=["run_id"], keep="first")
    return [dict(r) for _, r in firsts.iterrows()]


def describe_run(row: dict[str, Any]) -> str:
    """One line saying what ran where: ranks, hosts, backend, device, network."""
    world: Any = row.get("world_size")  # a cell: a number, or missing (present() says which)
    nnodes: Any = row.get("nnodes")
    hosts = short(compact_hosts(row.get("hosts")), 48)
    parts = []
    ranks = f"{int(world)} ranks" if present(world) else "? ranks"
    if present(nnodes):
        n = int(nnodes)
        if present(row.get("ranks_per_node")) and n > 1:
            ranks += f" = {n} nodes × {int(row['ranks_per_node'])}"
        else:
            ranks += f" on {n} node{'s' if n != 1 else ''}"
    parts.append(f"{ranks} ({hosts})")
    if present(row.get("backend")):
        parts.append(str(row["backend"]))
    device_name, device = row.get("device_name"), row.get("device")
    if present(device_name) and present(device) and str(device_name) != str(device):
        parts.append(f"{device} {device_name}")
    elif present(device_name) or present(device):
        parts.append(str(device_name if present(device_name) else device))
    net = []
    if present(row.get("iface")):
        net.append(str(row["iface"]))
    net.append(f"MTU {int(row['mtu'])}" if present(row.get("mtu")) else "MTU ?")
    if present(row.get("link_layer")):
        net.append(str(row["link_layer"]))
    speeds = _link_speeds(row.get("net"))
    if speeds:
        net.append(speeds)
    parts.append(" ".join(net))
    return " · ".join(parts)


def _link_speeds(net_json: object) -> str:
    per_host = json_cell(net_json) if isinstance(net_json, str) else {}  # bounded nesting, never raises
    if not isinstance(per_host, dict):
        return ""
    # the effective rate: a shaped lab link says 1 Gbit/s, not its veth's 10 Gbit/s
    by_host = {host: r for host, r in net_rates(per_host).items() if r.bits is not None}
    rates = set(by_host.values())
    if len(rates) == 1:
        rate = next(iter(rates))
        return rate.text() if rate.shaped else f"{rate.text()} link"
    # hosts apart: which is which, each host's rate alone (a title has no room for each one's link speed)
    return hostfacts.where_text({printable(h): rate_text(r.bits or 0) for h, r in by_host.items()})


def run_name(row: dict) -> str:
    label = row.get("label")
    return str(label) if present(label) else str(row.get("run_id"))


def missing(value: Any) -> bool:
    """None, NaN, pandas NA/NaT; never true for containers."""
    if value is None:
        return True
    try:
        import pandas as pd

        answer = pd.isna(value)
    except (TypeError, ValueError):
        return False
    return answer if isinstance(answer, bool) else bool(answer) if getattr(answer, "ndim", 1) == 0 else False


def runs_named(df: pd.DataFrame) -> dict[str, str]:
    rows = run_rows(df)
    names: dict[str, str] = {}
    labels = [str(r.get("label") or "") for r in rows]
    for r, label in zip(rows, labels):
        names[str(r["run_id"])] = label if label and labels.count(label) == 1 else (
            f"{label} ({r['run_id']})" if label else str(r["run_id"]))
    return names
