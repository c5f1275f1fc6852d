"""Several ranks a host, each on its own interface (issue #38 part 4): `--iface eth0,eth1` gives
local rank i the i-th name (core/ifaces.py, applied by cli/launcher.py), `lab run --ranks-per-host
N` numbers ranks block-wise and tells each its host and local rank (lab/ranklaunch.py)."""

from __future__ import annotations

import os

import pytest

from commbench.cli import launcher
from commbench.cli.app import main
from commbench.core import ifaces
from commbench.core.errors import BadInput
from commbench.core.launch import RankEnv
from commbench.harness import arrival


@pytest.mark.parametrize("value, local_world, expected", [
    ("eth0,eth1", 2, ["eth0", "eth1"]),
    ("eth0,eth1", 4, ["eth0", "eth0", "eth1", "eth1"]),  # shorter: shared block-wise, as GPUs share a NIC
    ("eth0,eth1,eth2,eth3", 4, ["eth0", "eth1", "eth2", "eth3"]),
    ("eth0, eth1", 2, ["eth0", "eth1"]),
    ("eth0", 3, ["eth0", "eth0", "eth0"]),  # one name: every rank, as before
    ("^docker", 2, ["^docker", "^docker"]),  # one value is passed on as it is (NCCL's syntax included)
])
def test_local_rank_i_takes_the_i_th_interface(value, local_world, expected):
    assert [ifaces.for_rank(value, r, local_world) for r in range(local_world)] == expected


@pytest.mark.parametrize("value, local_world, told, text", [
    ("eth0,eth1,eth2", 2, True, "--iface eth0,eth1,eth2 names 3 interfaces for 2 rank(s) on this host (lab): "
                                "local rank i takes the i-th, so give at most 2, e.g. --iface eth0,eth1"),
    ("eth0,eth1", 1, True, "give at most 1, e.g. --iface eth0, or start 2 ranks a host"),
    ("eth0,eth1", 2, False, "--iface eth0,eth1 gives local rank i the i-th interface, but lab does not say which "
                            "local rank this is (no LOCAL_RANK and LOCAL_WORLD_SIZE): set them, or give one "
                            "interface, e.g. --iface eth0"),
    ("eth0,,eth1", 3, True, "--iface eth0,,eth1 has an empty name"),
    ("eth0,^eth1", 2, True, "'^eth1', which is not an interface name"),
])
def test_a_list_the_ranks_cannot_take_is_bad_input(value, local_world, told, text):
    with pytest.raises(BadInput) as caught:
        ifaces.for_rank(value, 0, local_world, told, "lab")
    assert text in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.fixture(autouse=True)
def _interfaces_restored(monkeypatch):
    """A rank sets its own interface in os.environ, and the options put the list there: put back
    after each test, whatever it set (setenv then delenv records a name's absence for the undo)."""
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
        if not os.environ[name]:
            monkeypatch.delenv(name)


@pytest.mark.parametrize("environ, told", [
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, True),
    ({"LOCAL_RANK": "1"}, False),  # torchrun-style without the count: detect() would default it
    ({"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "2(x2)"}, True),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, True),
    ({"MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}, True),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}, False),
    ({"RANK": "0", "WORLD_SIZE": "4", "MASTER_ADDR": "h"}, False),
])
def test_which_launchers_tell_the_local_ranks(environ, told):
    assert ifaces.local_ranks_told(environ) is told


def test_the_rank_environment_names_one_interface_and_with_nccl_the_hca_behind_it():
    ports = [{"device": "mlx5_0", "port": 1, "netdev": "eth0"}, {"device": "mlx5_1", "port": 1, "netdev": "eth1"}]
    assert ifaces.rank_environ("eth1", "gloo", ports) == {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "eth1"}
    assert ifaces.rank_environ("eth1", "nccl", ports)["NCCL_IB_HCA"] == "=mlx5_1:1"
    assert "NCCL_IB_HCA" not in ifaces.rank_environ("eth1", "nccl", ports, {"NCCL_IB_HCA": "mlx5_0"})  # the user's
    assert "NCCL_IB_HCA" not in ifaces.rank_environ("eth2", "nccl", ports)  # no RDMA port behind it


def test_a_launched_rank_sets_its_own_interface_of_the_list(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0,eth1")  # as run_fields set it while the options were read
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0,eth1")
    launcher._own_iface("eth0,eth1", "gloo", RankEnv("lab", 3, 4, 1, 2, "10.0.0.1", 29400), told=True)
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth1" and os.environ["NCCL_SOCKET_IFNAME"] == "eth1"
    launcher._own_iface("eth0", "gloo", RankEnv("lab", 2, 4, 0, 2, "10.0.0.1", 29400), told=False)  # one name
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth1"  # left as the options set it


def test_a_spawned_local_rank_takes_its_interface_before_the_rank_runs(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    seen = []
    code = launcher._on_own_iface(lambda env: seen.append(os.environ["GLOO_SOCKET_IFNAME"]) or 0, "eth0,eth1",
                                  "gloo", RankEnv("local", 1, 2, 1, 2, "127.0.0.1", 1))
    assert (code, seen) == (0, ["eth1"])


@pytest.mark.parametrize("extra, text", [
    ({}, "--iface lo,lo gives local rank i the i-th interface, but torchrun does not say which local rank this is"),
    ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, "--iface lo,lo names 2 interfaces for 1 rank(s) on this host"),
])
def test_sweep_under_a_launcher_refuses_a_list_in_one_line(monkeypatch, capsys, extra, text, tmp_path):
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "COMMBENCH_LAUNCHER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511",
                        **extra}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--backend", "gloo", "--iface", "lo,lo", "-b", "1K", "-e", "1K", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert text in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _lab(n: int):
    from commbench.lab.state import LabNode, LabState

    return LabState("10.9.0.0/24", "xbr", [LabNode(f"xn{i}", f"10.9.0.{i}", f"xv{i}", 1500, "1gbit")
                                           for i in range(1, n + 1)])


def test_lab_run_numbers_several_ranks_a_host_block_wise():
    from commbench.lab.ranklaunch import rank_env

    state = _lab(2)
    envs = [rank_env(state, r, 29400, per_host=2) for r in range(4)]
    assert [(e["RANK"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"], e["WORLD_SIZE"]) for e in envs] == [
        ("0", "0", "2", "4"), ("1", "1", "2", "4"), ("2", "0", "2", "4"), ("3", "1", "2", "4")]
    assert {e["COMMBENCH_RANK_HOSTS"] for e in envs} == {"xn1,xn1,xn2,xn2"}
    assert {e["MASTER_ADDR"] for e in envs} == {"10.9.0.1"}
    # the list takes precedence over the lab's hosts file (whose r-th host holds rank r at one a host)
    assert arrival.launcher_hosts("lab", 4, envs[0]) == {0: "xn1", 1: "xn1", 2: "xn2", 3: "xn2"}
    assert ifaces.local_ranks_told(envs[3])
    assert rank_env(state, 1)["LOCAL_WORLD_SIZE"] == "1"  # one a host: as before


@pytest.mark.parametrize("value, text", [("0", "--ranks-per-host 0 is outside 1..64"),
                                         ("65", "--ranks-per-host 65 is outside 1..64")])
def test_lab_run_refuses_a_rank_count_it_cannot_place(capsys, value, text):
    with pytest.raises(SystemExit) as exit_info:
        main(["lab", "run", "--ranks-per-host", value, "--", "true"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and text in err and "Traceback" not in err


def test_the_wire_counters_cover_every_interface_of_an_iface_list():
    from types import SimpleNamespace

    from commbench.harness.settingpasses import axis_interfaces

    assert axis_interfaces(SimpleNamespace(axes=[], iface="eth0,eth1")) == ["eth0", "eth1"]
    assert axis_interfaces(SimpleNamespace(axes=[], iface="eth0")) == []  # the reading rank's own already


def test_a_list_longer_than_nproc_is_refused_before_any_rank_starts(monkeypatch, capsys, tmp_path):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "SLURM_PROCID",
                 "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--backend", "gloo", "--nproc", "2", "--iface", "lo,lo,lo", "-b", "1K", "-e", "1K",
              "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.strip() == ("commbench: --iface lo,lo,lo names 3 interfaces for 2 rank(s) on this host (--nproc 2): "
                           "local rank i takes the i-th, so give at most 2, e.g. --iface lo,lo, or --nproc 3")
    assert not list(tmp_path.iterdir())
