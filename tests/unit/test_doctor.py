"""`commbench doctor` on recorded hosts (tests/data/netinfo, README there names each source) and
NCCL's matching rules, table-tested. No GPU, no HCA, no processes: the checks read recorded facts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from commbench.net import doctor
from commbench.net import ncclrules, netinfo
from commbench.cli.app import main

DATA = Path(__file__).resolve().parent.parent / "data" / "netinfo"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """The checks read NCCL_*/GLOO_* from the environment: start from none."""
    import os

    for name in list(os.environ):
        if name.startswith(("NCCL_", "GLOO_")):
            monkeypatch.delenv(name)


def run_doctor(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["doctor", *args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def roots(*names: str) -> list[str]:
    return [arg for n in names for arg in ("--root", str(DATA / n))]


def problems(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("PROBLEM")]


# ------------------------------------------------------------------ NCCL's list syntax, table-tested

IFACES = [{"name": n, "addresses": ["10.0.0.1"]} for n in ("eth0", "eth1", "ib0", "docker0", "lo", "ens1f0")]


@pytest.mark.parametrize("value, selected", [
    ("eth", ["eth0", "eth1"]),                      # prefixes
    ("=eth0", ["eth0"]),                            # '=' first: exact names
    ("=eth0,eth1", ["eth0", "eth1"]),               # '=' applies to the whole list
    ("=eth", []),                                   # exact: no interface is called 'eth'
    ("eth0,=eth1", ["eth0"]),                       # '=' after the first item is part of a name
    ("eth,ib", ["eth0", "eth1", "ib0"]),
    ("ens", ["ens1f0"]),
    ("^docker", ["eth0", "eth1", "ib0", "lo", "ens1f0"]),          # '^' first: exclude prefixes
    ("^=docker0", ["eth0", "eth1", "ib0", "lo", "ens1f0"]),        # '^=': exclude exact names
    ("^=docker", ["eth0", "eth1", "ib0", "docker0", "lo", "ens1f0"]),
    ("^docker,lo", ["eth0", "eth1", "ib0", "ens1f0"]),
    ("=^eth0", []),                                 # '^' only counts first
    ("eth0:1", ["eth0"]),                           # a port is parsed and ignored for interfaces
    ("ib9", []),
    (",,eth1,", ["eth1"]),                          # empty items are skipped
    ("e", None),                                    # NCCL reads the variable only with 2+ characters
    ("^", None),
    ("", None),
    (None, None),
])
def test_nccl_socket_ifname_semantics(value, selected):
    assert ncclrules.socket_ifname_selects(value, IFACES) == selected


def test_nccl_socket_ifname_needs_an_address():
    ifaces = [{"name": "eth0", "addresses": []}, {"name": "eth1", "addresses": ["::1"]},
              {"name": "eth2", "addresses": ["fe80::1"]}, {"name": "eth3", "addresses": None}]
    # no address, IPv6 loopback only: skipped as NCCL does; None (not recorded) counts as usable
    assert ncclrules.socket_ifname_selects("eth", ifaces) == ["eth2", "eth3"]


PORTS = [{"device": d, "port": p, "state": s, "link_layer": "InfiniBand"} for d, p, s in
         [("mlx5_0", 1, "ACTIVE"), ("mlx5_0", 2, "ACTIVE"), ("mlx5_1", 1, "ACTIVE"), ("mlx5_10", 1, "ACTIVE"),
          ("mlx5_2", 1, "DOWN")]]


@pytest.mark.parametrize("value, selected", [
    (None, ["mlx5_0:1", "mlx5_0:2", "mlx5_1:1", "mlx5_10:1"]),     # only ACTIVE ports
    ("", ["mlx5_0:1", "mlx5_0:2", "mlx5_1:1", "mlx5_10:1"]),       # an empty list matches all
    ("mlx5_0:1,mlx5_1", ["mlx5_0:1", "mlx5_1:1", "mlx5_10:1"]),    # the NCCL docs' example: prefix mlx5_1 hits mlx5_10
    ("=mlx5_0:1,mlx5_1", ["mlx5_0:1", "mlx5_1:1"]),                # '=' makes every item exact
    ("mlx5_0:2", ["mlx5_0:2"]),
    ("mlx5", ["mlx5_0:1", "mlx5_0:2", "mlx5_1:1", "mlx5_10:1"]),
    ("^mlx5_1", ["mlx5_0:1", "mlx5_0:2"]),                         # exclusion by prefix
    ("^=mlx5_1", ["mlx5_0:1", "mlx5_0:2", "mlx5_10:1"]),           # exact exclusion
    ("^=mlx5_0:1", ["mlx5_0:2", "mlx5_1:1", "mlx5_10:1"]),         # exclude one port
    ("=mlx5_2", []),                                               # named but not ACTIVE
    ("^", []),                                                     # exclude an empty list: nothing left
    ("=mlx5_0:x", []),                                             # atoi('x') = port 0: no such port
    ("=mlx5_0:", ["mlx5_0:1", "mlx5_0:2"]),                        # an empty port means any port
])
def test_nccl_ib_hca_semantics(value, selected):
    got = [f"{p['device']}:{p['port']}" for p in ncclrules.ib_hca_selects(value, PORTS)]
    assert got == selected


def test_parse_nccl_list():
    spec = ncclrules.parse_nccl_list("^=mlx5_0:1,mlx5_1,,:2")
    assert (spec.exclude, spec.exact, spec.items) == (True, True, (("mlx5_0", 1), ("mlx5_1", -1)))


@pytest.mark.parametrize("value, missing", [
    ("eth0", []), ("eth0,ib0", []), ("eth0,", []), ("ib9", ["ib9"]), ("eth0,ib9", ["ib9"]),
    ("eth", ["eth"]),         # gloo has no prefixes
    ("=eth0", ["=eth0"]),     # nor '=' or '^'
    ("", []), (None, []),
])
def test_gloo_socket_ifname_semantics(value, missing):
    assert ncclrules.gloo_ifname_missing(value, IFACES) == missing


@pytest.mark.parametrize("mtu, rdma", [(1500, 1024), (2200, 2048), (4200, 4096), (9000, 4096), (4000, 2048)])
def test_roce_rdma_mtu_follows_the_kernel(mtu, rdma):
    assert doctor.roce_rdma_mtu(mtu) == rdma


# ------------------------------------------------------------------ the checks, on recorded hosts

def test_healthy_recorded_host_exits_0(capsys):
    code, out, _ = run_doctor(capsys, *roots("roce_v2_gids"))
    assert code == 0 and problems(out) == []
    assert "doctor: healthy (1 host(s) checked)" in out


def test_socket_ifname_matches_no_interface(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib9")
    code, out, _ = run_doctor(capsys, *roots("roce_mtu1500_cx6dx"))
    assert code == 1
    assert ("PROBLEM [socket-ifname] NCCL_SOCKET_IFNAME=ib9 matches no interface with an IP address on node75 "
            "(interfaces with an address: lo, p1p1)") in out
    assert "NCCL_SOCKET_IFNAME==p1p1" in out  # the hint names a real interface


def test_socket_ifname_that_matches_is_fine(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ens")
    code, out, _ = run_doctor(capsys, *roots("roce_v2_gids"))
    assert code == 0 and "socket-ifname" not in out


def test_socket_ifname_of_one_character_is_ignored_by_nccl(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "p")
    code, out, _ = run_doctor(capsys, *roots("roce_v2_gids"))
    assert code == 0
    assert "note [socket-ifname] NCCL_SOCKET_IFNAME=p is ignored by NCCL on roce_v2_gids" in out


def test_gloo_socket_ifname_names_a_missing_interface(capsys, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "p1p1,ib0")
    code, out, _ = run_doctor(capsys, *roots("roce_mtu1500_cx6dx"))
    assert code == 1
    assert ("PROBLEM [gloo-ifname] GLOO_SOCKET_IFNAME=p1p1,ib0 names ib0, which is not an interface with an IP "
            "address on node75") in out


def test_ib_disable_with_active_ports(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_IB_DISABLE", "1")
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_3port"))
    assert code == 1
    assert ("PROBLEM [ib-disable] NCCL_IB_DISABLE=1 while 3 RDMA port(s) are ACTIVE on ib_hdr_3port "
            "(mlx5_0:1 InfiniBand, mlx5_1:1 InfiniBand, mlx5_2:1 InfiniBand): NCCL falls back to TCP sockets") in out
    monkeypatch.setenv("NCCL_IB_DISABLE", "0")
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_3port"))
    assert code == 0 and "ib-disable" not in out


def test_ib_hca_names_a_device_that_does_not_exist(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0:1,mlx5_3")
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_3port"))
    assert code == 1
    assert ("PROBLEM [ib-hca] NCCL_IB_HCA=mlx5_0:1,mlx5_3 names mlx5_3, which does not exist on ib_hdr_3port "
            "(RDMA ports: mlx5_0:1, mlx5_1:1, mlx5_2:1)") in out


def test_ib_hca_names_a_port_that_does_not_exist(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "=mlx5_0:2")
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_3port"))
    assert code == 1
    assert "NCCL_IB_HCA==mlx5_0:2 names mlx5_0:2, which does not exist on ib_hdr_3port" in out
    assert "NCCL_IB_HCA==mlx5_0:2 selects no ACTIVE RDMA port on ib_hdr_3port: NCCL falls back to TCP sockets" in out


def test_ib_hca_selecting_only_a_down_port_falls_back_to_sockets(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "=mlx5_1")
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_port_down"))
    assert code == 1
    assert ("PROBLEM [ib-hca] NCCL_IB_HCA==mlx5_1 selects no ACTIVE RDMA port on ib_hdr_port_down: NCCL falls back "
            "to TCP sockets (ACTIVE: mlx5_0:1)") in out


def test_ib_hca_excluding_a_missing_device_is_only_a_note(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "^=mlx5_9")
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_3port"))
    assert code == 0
    assert "note [ib-hca] NCCL_IB_HCA=^=mlx5_9 excludes mlx5_9, which does not exist on ib_hdr_3port" in out


def test_port_down(capsys):
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_port_down"))
    assert code == 1
    assert problems(out) == ["PROBLEM [port-state] mlx5_1:1 (InfiniBand) on ib_hdr_port_down is not ACTIVE/LinkUp: "
                             "DOWN, phys_state Disabled"]
    assert "NCCL_IB_HCA=^=mlx5_1:1" in out  # the hint: exclude an unused port


def test_port_excluded_by_ib_hca_is_not_reported(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "^=mlx5_1")
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_port_down"))
    assert code == 0 and "port-state" not in out


def test_port_in_init_and_polling(capsys):
    code, out, _ = run_doctor(capsys, *roots("ib_sdr_init_mthca"))
    assert code == 1
    assert ("PROBLEM [port-state] mthca0:1 (InfiniBand) on ib_sdr_init_mthca is not ACTIVE/LinkUp: INIT, "
            "phys_state LinkUp") in out
    assert "no subnet manager has activated it" in out
    assert ("PROBLEM [port-state] mthca0:2 (InfiniBand) on ib_sdr_init_mthca is not ACTIVE/LinkUp: DOWN, "
            "phys_state Polling") in out


def test_port_slower_than_its_peers(capsys):
    code, out, _ = run_doctor(capsys, *roots("roce_rates_h20"))
    assert code == 1
    assert problems(out) == ["PROBLEM [port-rate] mlx5_0:1 (RoCE) on roce_rates_h20 runs at 200 Gb/sec (4X HDR), "
                             "slower than its peers at 400 Gb/sec (4X NDR) (mlx5_1:1, mlx5_2:1)"]


def test_roce_gid_automatic_choice_is_roce_v2(capsys):
    facts = netinfo.host_facts(root=DATA / "roce_v2_gids")
    port = facts["rdma"][0]
    assert ncclrules.nccl_gid_index(port, {}) == (3, "NCCL's automatic choice")
    assert ncclrules.nccl_gid_index(port, {"NCCL_IB_ROCE_VERSION_NUM": "1"})[0] == 2
    assert ncclrules.nccl_gid_index(port, {"NCCL_IB_ADDR_RANGE": "11.0.0.0/24"})[0] == 3
    assert ncclrules.nccl_gid_index(port, {"NCCL_IB_ADDR_RANGE": "10.0.0.0/8"})[0] == 0
    assert ncclrules.nccl_gid_index(port, {"NCCL_IB_GID_INDEX": "1"}) == (1, "NCCL_IB_GID_INDEX=1")
    assert ncclrules.nccl_gid_index(port, {}, nccl_version="2.18.5")[0] == 0  # before 2.21: index 0


@pytest.mark.parametrize("index, says", [
    ("2", "NCCL uses GID index 2 (NCCL_IB_GID_INDEX=2), which is IB/RoCE v1 (11.0.0.72), not RoCE v2"),
    ("1", "NCCL uses GID index 1 (NCCL_IB_GID_INDEX=1), a link-local RoCE v2 GID (fe80::a288:c2ff:fe5b:3ec)"),
    ("7", "NCCL uses GID index 7 (NCCL_IB_GID_INDEX=7), which is empty"),
])
def test_roce_port_without_roce_v2_gid_at_nccl_index(capsys, monkeypatch, index, says):
    monkeypatch.setenv("NCCL_IB_GID_INDEX", index)
    code, out, _ = run_doctor(capsys, *roots("roce_v2_gids"))
    assert code == 1
    assert f"PROBLEM [roce-gid] mlx5_0:1 (RoCE) on roce_v2_gids: {says}" in out
    assert "set NCCL_IB_GID_INDEX=3" in out


def test_roce_gid_index_0_of_old_nccl(capsys, tmp_path):
    host = tmp_path / "old-nccl"
    shutil.copytree(DATA / "roce_v2_gids", host)
    (host / "nccl_version").write_text("2.18.5\n")
    code, out, _ = run_doctor(capsys, "--root", str(host))
    assert code == 1
    assert ("mlx5_0:1 (RoCE) on old-nccl: NCCL uses GID index 0 (NCCL 2.18.5 default), which is IB/RoCE v1 "
            "(fe80::a288:c2ff:fe5b:3ec), not RoCE v2") in out


def test_roce_ipv6_only_gids(capsys, monkeypatch):
    code, out, _ = run_doctor(capsys, *roots("roce_v6_only"))
    assert code == 1
    assert ("PROBLEM [roce-gid] rocep105s0:1 (RoCE) on roce_v6_only: NCCL uses GID index 0 (NCCL's automatic "
            "choice), a link-local RoCE v2 GID (fe80::690:81ff:fe39:e3e8) that does not route") in out
    assert "NCCL_IB_ADDR_FAMILY=AF_INET6" in out
    monkeypatch.setenv("NCCL_IB_ADDR_FAMILY", "AF_INET6")
    code, out, _ = run_doctor(capsys, *roots("roce_v6_only"))
    assert code == 0


def test_mtu_1500_on_roce_netdev(capsys):
    code, out, _ = run_doctor(capsys, *roots("roce_mtu1500_cx6dx"))
    assert code == 1
    assert ("PROBLEM [roce-mtu] mlx5_0:1 (RoCE) on node75 runs over p1p1 with MTU 1500: its RDMA MTU is at most "
            "1024 bytes; jumbo frames recommended") in out
    assert "ip link set dev p1p1 mtu 9000" in out


def test_roce_active_mtu_from_ibv_devinfo(capsys):
    code, out, _ = run_doctor(capsys, *roots("ibv_devinfo_mixed"))
    assert code == 1
    assert ("PROBLEM [roce-mtu] mlx5_0:1 (RoCE) on ibv_devinfo_mixed has active_mtu 1024 (below 4096): its "
            "netdev's MTU is below 4200 (1500?)") in out
    assert "PROBLEM [port-state] mlx5_1:1 (RoCE) on ibv_devinfo_mixed is not ACTIVE/LinkUp: DOWN" in out
    assert "mlx5_2" not in "\n".join(problems(out))  # InfiniBand at 4096: fine


def test_ib_active_mtu_below_4096(capsys):
    code, out, _ = run_doctor(capsys, *roots("ib_sdr_init_mthca"))
    assert code == 1
    assert ("PROBLEM [ib-mtu] mthca0:1 (InfiniBand) on ib_sdr_init_mthca has active_mtu 2048 (max_mtu 2048): "
            "below 4096") in out
    assert "the HCA itself stops at max_mtu 2048" in out
    assert "mthca0:2 (InfiniBand) on ib_sdr_init_mthca has active_mtu" not in out  # link down: its MTU means nothing


def test_ib_mtu_not_checked_without_ibv_devinfo_is_a_note(capsys):
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_3port"))
    assert code == 0
    assert "note [ib-mtu] ibv_devinfo is not available on ib_hdr_3port" in out


# ------------------------------------------------------------------ across hosts

def test_hosts_with_different_ports_and_states(capsys):
    code, out, _ = run_doctor(capsys, *roots("ib_hdr_3port", "ib_hdr_port_down"))
    assert code == 1
    assert ("PROBLEM [rate-mismatch] ACTIVE RDMA ports and rates differ across hosts: "
            "3x 200 Gb/s on ib_hdr_3port; 1x 200 Gb/s on ib_hdr_port_down") in out
    assert ("PROBLEM [state-mismatch] RDMA port states differ across hosts: "
            "mlx5_0:1=ACTIVE mlx5_1:1=ACTIVE mlx5_2:1=ACTIVE on ib_hdr_3port; "
            "mlx5_0:1=ACTIVE mlx5_1:1=DOWN on ib_hdr_port_down") in out
    assert "doctor: 3 problem(s) on ib_hdr_port_down (2 host(s) checked)" in out


def test_traffic_mtu_differs_across_hosts():
    a = netinfo.host_facts(root=DATA / "roce_mtu1500_cx6dx")
    b = json.loads(json.dumps(a))
    b["host"] = "node76"
    a["traffic"] = {"iface": "p1p1", "mtu": 1500}
    b["traffic"] = {"iface": "p1p1", "mtu": 9000}
    found = [f for f in doctor.check_across([a, b]) if f.check == "mtu-mismatch"]
    assert [f.message for f in found] == ["MTU of the traffic interface differs across hosts: MTU 1500 on node75; "
                                          "MTU 9000 on node76 (node75 p1p1=1500, node76 p1p1=9000)"]
    assert found[0].host == "node76"


def test_nccl_version_differs_across_hosts(capsys, tmp_path):
    for name, version in (("a", "2.21.5"), ("b", "2.18.3")):
        shutil.copytree(DATA / "ib_hdr_3port", tmp_path / name)
        (tmp_path / name / "nccl_version").write_text(version + "\n")
    code, out, _ = run_doctor(capsys, "--root", str(tmp_path / "a"), "--root", str(tmp_path / "b"))
    assert code == 1
    assert "PROBLEM [nccl-version] NCCL version differs across hosts: 2.18.3 on b; 2.21.5 on a" in out


# ------------------------------------------------------------------ output and input

def test_json_output_parses(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib9")
    code, out, _ = run_doctor(capsys, "--json", *roots("roce_mtu1500_cx6dx", "gpu_8xh100_topo"))
    doc = json.loads(out)
    assert code == doc["exit_code"] == 1 and doc["healthy"] is False
    assert [h["host"] for h in doc["hosts"]] == ["node75", "gpu_8xh100_topo"]
    checks = {(f["check"], f["host"]) for f in doc["findings"]}
    assert ("socket-ifname", "node75") in checks and ("roce-mtu", "node75") in checks
    node75 = doc["hosts"][0]
    assert {i["name"]: i["mtu"] for i in node75["interfaces"]} == {"lo": 65536, "p1p1": 1500, "p1p2": 1500}
    assert node75["interfaces"][1]["addresses"] == ["192.168.56.106", "fe80::9e63:c0ff:fec5:47a4"]
    assert node75["rdma"][0]["netdev"] == "p1p1"
    topo = doc["hosts"][1]["topology"]
    assert topo["nearest_nic"]["GPU5"] == {"link": "PIX", "nics": ["mlx5_5"]}
    assert topo["affinity"]["GPU4"] == {"cpu": "48-95,144-191", "numa": "1"}


def test_bad_root_is_bad_input(capsys, tmp_path):
    code, out, err = run_doctor(capsys, "--root", str(tmp_path / "missing"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "is not a directory" in err


def test_root_that_is_a_file_is_bad_input(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = run_doctor(capsys, "--root", str(f))
    assert code == 2 and err.startswith("commbench: --root") and len(err.strip().splitlines()) == 1


def test_live_host_without_launcher(capsys, monkeypatch):
    monkeypatch.setattr(netinfo, "nccl_version", lambda: None)
    code, out, _ = run_doctor(capsys, "--json")
    doc = json.loads(out)
    assert code == doc["exit_code"] == 0
    lo = next(i for i in doc["hosts"][0]["interfaces"] if i["name"] == "lo")
    assert lo["state"] == "up" and "127.0.0.1" in lo["addresses"] and lo["link_layer"] == "loopback"


# ------------------------------------------------------------------ parsers

def test_parse_ibv_devinfo():
    got = netinfo.parse_ibv_devinfo((DATA / "ibv_devinfo_mixed" / "commands" / "ibv_devinfo.txt").read_text())
    assert got == {
        ("mlx5_0", 1): {"state": "ACTIVE", "max_mtu": 4096, "active_mtu": 1024, "link_layer": "Ethernet"},
        ("mlx5_1", 1): {"state": "DOWN", "max_mtu": 4096, "active_mtu": 1024, "link_layer": "Ethernet"},
        ("mlx5_2", 1): {"state": "ACTIVE", "max_mtu": 4096, "active_mtu": 4096, "link_layer": "InfiniBand"},
    }


def test_parse_nvidia_smi_list_with_mig():
    gpus = netinfo.parse_nvidia_smi_list((DATA / "gpu_a100_mig" / "commands" / "nvidia-smi_-L.txt").read_text())
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert {g["name"] for g in gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert [m["profile"] for m in gpus[0]["mig"]] == ["1g.20gb"] * 4 and gpus[1]["mig"] == []


def test_parse_topo_matrix():
    topo = netinfo.parse_topo_matrix((DATA / "gpu_8xh100_topo" / "commands" / "nvidia-smi_topo_-m.txt").read_text())
    assert topo["columns"][:9] == [f"GPU{i}" for i in range(8)] + ["mlx5_0"]
    assert topo["matrix"]["GPU0"]["GPU1"] == "NV18" and topo["matrix"]["GPU0"]["mlx5_4"] == "SYS"
    assert topo["matrix"]["mlx5_7"]["GPU7"] == "PIX"
    assert {g: n["nics"][0] for g, n in topo["nearest_nic"].items()} == {f"GPU{i}": f"mlx5_{i}" for i in range(8)}


def test_parse_topo_matrix_of_a_real_h200_with_ansi_header():
    text = (DATA / "gpu_1xh200" / "commands" / "nvidia-smi_topo_-m.txt").read_text()
    assert "\x1b[4m" in text
    topo = netinfo.parse_topo_matrix(text)
    assert topo["columns"] == ["GPU0"] and topo["matrix"] == {"GPU0": {"GPU0": "X"}}
    assert topo["affinity"] == {"GPU0": {"cpu": "0-15", "numa": "0"}} and topo["nearest_nic"] == {}
    facts = netinfo.host_facts(root=DATA / "gpu_1xh200")
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H200"] and facts["nccl_version"] == "2.28.9"


def test_rdma_ports_from_sysfs():
    ports = netinfo.host_facts(root=DATA / "ib_hdr_port_down")["rdma"]
    assert [(p["device"], p["port"], p["state"], p["phys_state"], p["rate_gbps"], p["link_layer"]) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp", 200.0, "InfiniBand"), ("mlx5_1", 1, "DOWN", "Disabled", 10.0, "InfiniBand")]
    gids = netinfo.host_facts(root=DATA / "roce_v2_gids")["rdma"][1]["gids"]
    assert [(g["index"], g["type"], g["ndev"]) for g in gids] == [
        (0, "IB/RoCE v1", "ens2np0"), (1, "RoCE v2", "ens2np0"),
        (2, "IB/RoCE v1", "ens2np0"), (3, "RoCE v2", "ens2np0")]


# ------------------------------------------------------------------ the sweep's warning and the results' summary

def test_sweep_warning_line(capsys, monkeypatch):
    from commbench.cli.launcher import warn_socket_ifname

    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib9")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    warn_socket_ifname(None)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith("commbench: warning: NCCL_SOCKET_IFNAME=ib9 matches no interface with an address on ")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    warn_socket_ifname(None)
    assert capsys.readouterr().err == ""


def test_host_summary_is_json_and_names_the_traffic_interface(monkeypatch):
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0")
    summary = netinfo.host_summary("lo")
    json.dumps(summary)
    assert [i["name"] for i in summary["interfaces"] if i["name"] == "lo"] == ["lo"]
    assert summary["env"] == {"NCCL_IB_HCA": "mlx5_0"}
    assert set(summary) == {"interfaces", "rdma", "env", "ibv_devinfo"}
