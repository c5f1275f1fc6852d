"""Taking counter snapshots: live on this host, or from a recorded tree (tests/data/counters).

Live, everything is read without a subprocess, so that a snapshot costs well under a millisecond
(benchmarks/wire_cost.py): the interface's link statistics and its root qdisc over rtnetlink
(net/rtnetlink.py; the same numbers as /sys/class/net/IF/statistics and `tc -s qdisc`, but for
this process's network namespace, which sysfs may not show), the driver's `ethtool -S` statistics
over the ETHTOOL_GSTATS ioctl (pyroute2), TCP's MIB from /proc/net/snmp (per namespace) and the RDMA ports' sysfs
counters and hw_counters. `perfquery` is a command and needs the IB management stack: doctor runs
it where it exists; a snapshot around a point reads the same counters from sysfs.
"""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

from commbench.net import counters as ct
from commbench.net.counters import Reading
from commbench.net.rtnetlink import Rtnl

SYSFS_IB = Path("/sys/class/infiniband")
PROC_SNMP = Path("/proc/net/snmp")
PROC_NETSTAT = Path("/proc/net/netstat")
_PERFQUERY_LINE = re.compile(r"^\s*([A-Za-z0-9]+):\.*\s*(0x[0-9a-fA-F]+|\d+)\s*$")
_ETHTOOL_LINE = re.compile(r"^\s*([^:\s][^:]*?):\s*(-?\d+)\s*$")


def parse_snmp(text: str, table: str = "Tcp") -> dict[str, int]:
    """/proc/net/snmp's Tcp lines (a header line of names, then a line of values); table="TcpExt"
    for /proc/net/netstat's."""
    rows = [line.split() for line in text.splitlines() if line.startswith(f"{table}:")]
    if len(rows) < 2:
        return {}
    return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:]) if v.lstrip("-").isdigit()}


def tcp_mib(snmp: str, netstat: str) -> dict[str, int]:
    """The table's TCP counters from /proc/net/snmp (Tcp) and /proc/net/netstat (TcpExt)."""
    return ct.kept(ct.TCP, {**parse_snmp(netstat, "TcpExt"), **parse_snmp(snmp)})


def parse_perfquery(text: str) -> dict[str, int]:
    """`perfquery` / `perfquery -x` output: `SymbolErrorCounter:..........0` lines."""
    out = {}
    for line in text.splitlines():
        m = _PERFQUERY_LINE.match(line)
        if m:
            out[m.group(1)] = int(m.group(2), 0)
    return out


def parse_ethtool(text: str) -> dict[str, int]:
    """`ethtool -S IF` output: `     name: value` lines under `NIC statistics:`."""
    out = {}
    for line in text.splitlines():
        m = _ETHTOOL_LINE.match(line)
        if m and not line.strip().endswith("statistics:"):
            out[m.group(1).strip()] = int(m.group(2))
    return out


def _int_files(folder: Path, source: str) -> dict[str, int]:
    values: dict[str, int] = {}
    if not folder.is_dir():
        return values
    for f in folder.iterdir():
        if ct.lookup(source, f.name) is None or not f.is_file():  # a FIFO in a recorded tree would block
            continue
        try:
            values[f.name] = int(f.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a counter the driver cannot read now (some hw_counters return EINVAL)
    return values


def ib_ports(sysfs: Path = SYSFS_IB) -> list[tuple[str, str]]:
    """(device, port) of every RDMA port under a sysfs tree."""
    if not sysfs.is_dir():
        return []
    return sorted((d.name, p.name) for d in sysfs.iterdir() for p in (d / "ports").glob("*") if p.is_dir())


def read_ib(ports: list[tuple[str, str]], sysfs: Path = SYSFS_IB) -> Reading:
    out: Reading = {}
    for dev, port in ports:
        base = sysfs / dev / "ports" / port
        out[(ct.IB, f"{dev}/{port}")] = _int_files(base / "counters", ct.IB)
        hw = _int_files(base / "hw_counters", ct.IB_HW)
        if hw:
            out[(ct.IB_HW, f"{dev}/{port}")] = hw
    return out


class LiveSampler:
    """Reads the chosen interfaces and ports of this host, again and again, cheaply: the netlink
    socket, interface indexes and ethtool handles are opened once."""

    def __init__(self, ifaces: list[str], ports: list[tuple[str, str]] | None = None, ethtool: bool = True,
                 tcp: bool = True):
        self.rtnl = Rtnl()
        self.index = {}
        for name in ifaces:
            try:
                self.index[name] = socket.if_nametoindex(name)  # this namespace's interface
            except OSError:
                continue
        self.ports = ib_ports() if ports is None else ports
        self.tcp = tcp
        self.ethtool = {name: h for name in self.index if (h := _ethtool_handle(name)) is not None} if ethtool else {}

    def read(self) -> Reading:
        out: Reading = {}
        for name, index in self.index.items():
            out[(ct.NETDEV, name)] = self._link(index)
            out[(ct.QDISC, name)] = self._qdisc(index)
        for name, handle in self.ethtool.items():
            out[(ct.ETHTOOL, name)] = _ethtool_values(handle)
        if self.tcp:
            try:
                out[(ct.TCP, "tcp")] = tcp_mib(PROC_SNMP.read_text(), PROC_NETSTAT.read_text())
            except OSError:
                pass
        out.update(read_ib(self.ports))
        return out

    def _link(self, index: int) -> dict[str, int]:
        return ct.kept(ct.NETDEV, self.rtnl.link_stats(index))

    def _qdisc(self, index: int) -> dict[str, int]:
        # the root qdisc only: a child's drops are counted in its root's too
        return ct.kept(ct.QDISC, self.rtnl.root_qdisc_stats(index))

    def close(self) -> None:
        self.rtnl.close()
        for handle in self.ethtool.values():
            try:
                handle.close()
            except Exception:  # noqa: BLE001 - closing a socket cannot matter here
                pass


def _ethtool_handle(name: str):
    """An ethtool ioctl handle for a driver with statistics of the table (veth, lo: none)."""
    try:
        from pyroute2.ethtool.ioctl import IoctlEthtool

        handle = IoctlEthtool(name)
        if _ethtool_values(handle):
            return handle
        handle.close()
    except Exception:  # noqa: BLE001 - no ETHTOOL_GSTATS on this driver, or no permission
        pass
    return None


def _ethtool_values(handle) -> dict[str, int]:
    try:
        return ct.kept(ct.ETHTOOL, {str(k): int(v) for k, v in handle.get_statistics()})
    except Exception:  # noqa: BLE001 - the driver stopped answering (device removed)
        return {}


def recorded_reading(root: Path) -> Reading:
    """A recorded host's counters (tests/data/counters/README.md): sysfs statistics and port counters,
    `perfquery` and `ethtool -S` outputs, /proc/net/snmp."""
    root = Path(root)
    out: Reading = {}
    for iface in sorted((root / "class" / "net").glob("*")):
        values = {**_int_files(iface / "statistics", ct.NETDEV), **_int_files(iface, ct.NETDEV)}  # carrier_down_count
        if values:
            out[(ct.NETDEV, iface.name)] = values
    out.update({k: v for k, v in read_ib(ib_ports(root / "class" / "infiniband"), root / "class" / "infiniband").items()
                if v})
    commands = root / "commands"
    for f in sorted(commands.glob("perfquery_*.txt")):
        m = re.fullmatch(r"perfquery_(.+)_(\d+)\.txt", f.name)
        if m and f.is_file():
            out[(ct.PERFQUERY, f"{m.group(1)}/{m.group(2)}")] = ct.kept(ct.PERFQUERY, parse_perfquery(f.read_text()))
    for f in sorted(p for p in commands.glob("ethtool_-S_*.txt") if p.is_file()):
        out[(ct.ETHTOOL, f.name[len("ethtool_-S_"):-4])] = ct.kept(ct.ETHTOOL, parse_ethtool(f.read_text()))
    snmp = root / "proc" / "net" / "snmp"
    if snmp.is_file():
        netstat = root / "proc" / "net" / "netstat"
        out[(ct.TCP, "tcp")] = tcp_mib(snmp.read_text(), netstat.read_text() if netstat.is_file() else "")
    return out


def perfquery_reading(ports: list[tuple[str, str]], run) -> Reading:
    """`perfquery -C DEV -P PORT` (the error counters) and `perfquery -x` (the 64-bit data
    counters, which win) for each port, where the tool exists (doctor, live)."""
    if shutil.which("perfquery") is None:
        return {}
    out: Reading = {}
    for dev, port in ports:
        values: dict[str, int] = {}
        for extended in ([], ["-x"]):
            text = run(["perfquery", *extended, "-C", dev, "-P", port])
            values.update(ct.kept(ct.PERFQUERY, parse_perfquery(text or "")))
        if values:
            out[(ct.PERFQUERY, f"{dev}/{port}")] = values
    return out
