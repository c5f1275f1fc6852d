"""doctor's rail checks (net/doctorrails.py) on facts dicts: a rail unlike the host's other rails,
or unlike the same rail on the other hosts, is named, with where its rate cap comes from.

The interface dicts have the shape netinfo.live_interfaces() returns; the lab ones are what it
returned inside a `lab up --rails 2` host (veth, speed 10000 Mb/s, a root tbf at the lab's rate;
tests/integration/test_lab_rails.py checks the same on the real lab). The RDMA ports carry the
fields netinfo.rdma_ports() reads from sysfs."""

from __future__ import annotations

import copy

import pytest

from commbench.net import doctor, doctorrails


def iface(name: str, addr: str | None, rate: str | None = "1gbit", speed: int | None = 10000, mtu: int = 1500,
          state: str = "up", driver: str | None = "veth", link_layer: str = "ethernet") -> dict:
    bits = {"1gbit": 1e9, "200mbit": 2e8, "100gbit": 1e11}.get(rate) if rate else None
    return {"name": name, "state": state, "running": state == "up", "mtu": mtu, "speed_mbps": speed,
            "driver": driver, "link_layer": link_layer, "mac": "02:00:00:00:00:01",
            "addresses": [addr, "fe80::1"] if addr else ["fe80::1"],
            "shaper": {"kind": "tbf", "rate_bits": int(bits)} if bits else None}


def host(name: str, *interfaces: dict, rdma: list | None = None) -> dict:
    lo = {"name": "lo", "state": "up", "running": True, "mtu": 65536, "speed_mbps": None, "driver": None,
          "link_layer": "loopback", "mac": None, "addresses": ["127.0.0.1", "::1"], "shaper": None}
    return {"host": name, "source": "live", "interfaces": [*interfaces, lo], "rdma": rdma or [],
            "ibv_devinfo": "not installed", "gpus": None, "topology": None, "env": {}, "nccl_version": None,
            "traffic": {"iface": "eth0", "mtu": 1500, "link_layer": "ethernet"}}


def lab(n: int = 4, **slow) -> list[dict]:
    """n lab hosts with eth0 and eth1 at 1gbit; slow={"crlnode3": "eth1"} sets that rail to 200mbit."""
    hosts = []
    for i in range(1, n + 1):
        name = f"crlnode{i}"
        rails = [iface(f"eth{r}", f"10.242.{r}.{i}", "200mbit" if slow.get(name) == f"eth{r}" else "1gbit")
                 for r in (0, 1)]
        hosts.append(host(name, *rails))
    return hosts


def problems(hosts: list[dict]) -> list[tuple[str, str, str]]:
    return [(f.check, f.host, f.message) for f in doctor.evaluate(hosts) if f.severity == "problem"]


def test_a_healthy_multi_rail_lab_has_no_finding():
    assert doctor.evaluate(lab()) == []


def test_one_slow_rail_of_one_host_is_named_once_with_its_shaper():
    found = doctor.evaluate(lab(crlnode3="eth1"))
    assert [(f.check, f.host, f.message) for f in found] == [
        ("rail", "crlnode3", "crlnode3 rail eth1: 200 Mbit/s (tbf shaper), the other rails 1 Gbit/s (eth0)")]
    assert "tc qdisc show dev eth1" in found[0].hint and doctor.exit_code(found) == 1


def test_a_whole_slow_host_is_named_per_rail_against_the_other_hosts():
    hosts = lab()
    for i in hosts[1]["interfaces"][:2]:
        i["shaper"]["rate_bits"] = 200_000_000
    assert problems(hosts) == [
        ("rail-mismatch", "crlnode2", "crlnode2 rail eth0: 200 Mbit/s (tbf shaper), the same rail on the other hosts "
                                      "1 Gbit/s (crlnode1, crlnode3, crlnode4)"),
        ("rail-mismatch", "crlnode2", "crlnode2 rail eth1: 200 Mbit/s (tbf shaper), the same rail on the other hosts "
                                      "1 Gbit/s (crlnode1, crlnode3, crlnode4)")]


def test_the_rate_is_the_link_speed_where_no_shaper_is_lower():
    a = host("a", iface("ens1", "10.0.0.1", None, speed=100000, driver="mlx5_core"),
             iface("ens2", "10.0.1.1", None, speed=25000, driver="mlx5_core"),
             iface("ens3", "10.0.2.1", "100gbit", speed=200000, driver="mlx5_core"))  # shaper above nothing lower
    assert [(f.message, "ethtool ens2" in f.hint) for f in doctor.evaluate([a])] == [
        ("a rail ens2: 25 Gbit/s (link speed), the other rails 100 Gbit/s (ens1, ens3)", True)]
    assert doctorrails.effective_rate(a["interfaces"][2]) == (1e11, "tbf shaper")
    assert doctorrails.effective_rate(a["interfaces"][0]) == (1e11, "link speed")
    assert doctorrails.effective_rate(iface("x", "10.0.0.1", None, speed=None)) == (None, "link speed")


def test_mtu_state_and_link_layer_within_a_host():
    a = host("a", iface("eth0", "10.0.0.1"), iface("eth1", "10.0.1.1", mtu=9000), iface("eth2", "10.0.2.1"),
             iface("eth3", "10.0.3.1", state="no-carrier", speed=None))
    assert problems([a]) == [("rail", "a", "a rail eth1: MTU 9000, the other rails MTU 1500 (eth0, eth2, eth3)"),
                             ("rail", "a",
                              "a rail eth3: state no-carrier, the other rails state up (eth0, eth1, eth2)")]
    ib = host("b", *[iface(f"ib{r}", f"10.1.{r}.1", None, speed=400000, driver="mlx5_core", link_layer="infiniband")
                     for r in range(3)], iface("ib3", "10.1.3.1", None, speed=400000, driver="mlx5_core"))
    assert problems([ib]) == [("rail", "b", "b rail ib3: link layer ethernet, the other rails link layer infiniband "
                                            "(ib0, ib1, ib2)")]


def test_two_rails_that_tie_name_the_slower_and_the_smaller_mtu():
    a = host("a", iface("eth0", "10.0.0.1", "200mbit", mtu=9000), iface("eth1", "10.0.1.1"))
    assert [m for _, _, m in problems([a])] == ["a rail eth0: 200 Mbit/s (tbf shaper), the other rails 1 Gbit/s (eth1)",
                                               "a rail eth1: MTU 1500, the other rails MTU 9000 (eth0)"]


def test_what_is_not_a_rail_is_not_compared():
    a = host("a", iface("eth0", "10.0.0.1", None, speed=100000, driver="mlx5_core"),
             iface("eth1", "10.0.1.1", None, speed=100000, driver="mlx5_core"),
             iface("eno1", "192.168.0.5", None, speed=1000, driver="igb"),  # the management port: another NIC
             iface("docker0", "172.17.0.1", None, speed=None, mtu=1500, driver="bridge"),
             iface("eth2", None, None, speed=10, driver="mlx5_core"))  # no IPv4 address: not a rail
    assert [i["name"] for i in doctorrails.rails(a)] == ["eth0", "eth1", "eno1"]
    assert doctor.evaluate([a]) == []


def test_a_rail_a_host_lacks_is_named_and_a_traffic_mtu_is_left_to_mtu_mismatch():
    hosts = lab(3)
    hosts[2]["interfaces"][1]["addresses"] = ["fe80::1"]  # eth1 lost its IPv4 address
    assert problems(hosts) == [("rail-mismatch", "crlnode3", "crlnode3 has no rail eth1 (no interface eth1 with an "
                                                             "IPv4 address), the other hosts do (crlnode1, crlnode2)")]
    hosts = lab(2)
    for i in hosts[1]["interfaces"][:2]:
        i["mtu"] = 9000
    hosts[1]["traffic"]["mtu"] = 9000
    checks = [(c, m) for c, _, m in problems(hosts)]
    assert [c for c, _ in checks] == ["mtu-mismatch", "rail-mismatch"]  # eth0: mtu-mismatch; eth1: the rail check
    assert checks[1][1] == "crlnode1 rail eth1: MTU 1500, the same rail on the other hosts MTU 9000 (crlnode2)"


def port(dev: str, layer: str, rate: float = 400.0, state: str = "ACTIVE") -> dict:
    return {"device": dev, "port": 1, "state": state, "phys_state": "LinkUp", "rate": f"{rate:g} Gb/sec (4X NDR)",
            "rate_gbps": rate, "link_layer": layer, "netdev": None, "gids": [], "gid_types_known": True}


def test_hca_ports_one_on_ethernet_among_infiniband_and_a_port_slower_than_elsewhere():
    ports = [port(f"mlx5_{d}", "InfiniBand") for d in range(3)] + [port("mlx5_3", "Ethernet")]
    a = host("a", iface("eth0", "10.0.0.1"), rdma=ports)
    assert [p for p in problems([a]) if p[0] == "rail"] == [
        ("rail", "a", "a rail mlx5_3:1: RoCE (Ethernet), the other rails InfiniBand (mlx5_0:1, mlx5_1:1, mlx5_2:1)")]
    mixed = host("m", iface("eth0", "10.0.0.1"), rdma=[port("mlx5_0", "Ethernet"), port("mlx5_1", "InfiniBand")])
    # one of each: two networks on purpose, nothing to name
    assert [p for p in problems([mixed]) if p[0] == "rail"] == []
    hosts = [host(h, iface("eth0", f"10.0.0.{i}"), rdma=[port("mlx5_0", "InfiniBand"), port("mlx5_1", "InfiniBand")])
             for i, h in enumerate("abc", start=1)]
    hosts[1]["rdma"] = [port("mlx5_0", "InfiniBand", 200.0), port("mlx5_1", "InfiniBand", 200.0)]
    rails = [m for c, _, m in problems(hosts) if c.startswith("rail")]
    assert rails == ["b rail mlx5_0:1: 200 Gb/s, the same rail on the other hosts 400 Gb/s (a, c)",
                     "b rail mlx5_1:1: 200 Gb/s, the same rail on the other hosts 400 Gb/s (a, c)"]


def test_many_hosts_are_listed_up_to_four():
    hosts = lab(8)
    for i in hosts[7]["interfaces"][:2]:
        i["shaper"]["rate_bits"] = 200_000_000
    msgs = [m for _, _, m in problems(hosts)]
    assert len(msgs) == 2 and msgs[0] == ("crlnode8 rail eth0: 200 Mbit/s (tbf shaper), the same rail on the other "
                                          "hosts 1 Gbit/s (crlnode1, crlnode2, crlnode3, crlnode4 and 3 more)")


@pytest.mark.parametrize("bits, text", [(2e8, "200 Mbit/s"), (1e9, "1 Gbit/s"), (4e11, "400 Gbit/s"),
                                        (1.5e9, "1.5 Gbit/s"), (5e4, "50 kbit/s"), (12, "12 bit/s")])
def test_rate_text(bits, text):
    assert doctorrails.rate_text(bits) == text


def test_facts_without_shaper_or_interfaces_fields_are_fine():
    old = copy.deepcopy(lab(2))
    for h in old:
        for i in h["interfaces"]:
            i.pop("shaper")  # facts from a recorded tree, or from before the field existed
    assert doctor.evaluate(old) == []
    assert doctorrails.rails({"host": "x"}) == []
