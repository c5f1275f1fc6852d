"""commbench.net.envinfo: the allow-listed environment snapshot and interface facts from sysfs."""

from pathlib import Path

import pytest

from commbench.net.envinfo import env_snapshot, iface_facts, traffic_iface

ENV = {
    "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0", "GLOO_SOCKET_IFNAME": "eth0",
    "UCX_TLS": "rc", "FI_PROVIDER": "efa", "CUDA_VISIBLE_DEVICES": "0,1", "TORCH_NCCL_BLOCKING_WAIT": "1",
    "SLURM_JOB_ID": "12345", "SLURM_PROCID": "3", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
    "OMPI_COMM_WORLD_RANK": "1", "RANK": "1", "WORLD_SIZE": "4", "OMP_NUM_THREADS": "8",
    # secrets, also under allowed prefixes
    "AWS_SECRET_ACCESS_KEY": "s3cr3t", "HF_TOKEN": "hf_x", "DB_PASSWORD": "pw", "NCCL_IB_SECRET_TOKEN": "t",
    "MASTER_PASSWD": "pw", "CUDA_API_KEY": "k", "SLURM_AUTH_TOKEN": "t", "GITHUB_TOKEN": "g",
    # unrelated
    "HOME": "/root", "PATH": "/usr/bin", "SLURM_JOB_ACCOUNT": "acct", "SSH_AUTH_SOCK": "/tmp/agent", "USER": "me",
}


def test_env_snapshot_keeps_the_allow_list_only():
    snap = env_snapshot(ENV)
    assert snap == {
        "CUDA_VISIBLE_DEVICES": "0,1", "FI_PROVIDER": "efa", "GLOO_SOCKET_IFNAME": "eth0", "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0",
        "OMPI_COMM_WORLD_RANK": "1", "OMP_NUM_THREADS": "8", "RANK": "1", "SLURM_JOB_ID": "12345",
        "SLURM_PROCID": "3", "TORCH_NCCL_BLOCKING_WAIT": "1", "UCX_TLS": "rc", "WORLD_SIZE": "4",
    }
    assert list(snap) == sorted(snap)


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "DB_PASSWORD", "NCCL_IB_SECRET_TOKEN",
                                  "MASTER_PASSWD", "CUDA_API_KEY", "HOME", "PATH", "SSH_AUTH_SOCK"])
@pytest.mark.failure(
    row="secrets-environment-aws-secret-access",
    section="Security",
    failure="secrets in the environment (AWS_SECRET_ACCESS_KEY, HF_TOKEN, DB_PASSWORD, and NCCL_IB_SECRET_TOKEN "
            "under an allowed prefix)",
    does="the environment snapshot keeps an allow-list and drops credential-like names even there; through a real "
         "2-rank sweep, `plot`, `report` (HTML and Markdown) and `compare --format json`, the values appear in no "
         "file (raw bytes and decoded parquet cells) and on no output, while an allowed variable is recorded",
)
def test_env_snapshot_drops_secrets_and_unrelated_names(name):
    assert name not in env_snapshot(ENV)
    assert ENV[name] not in env_snapshot({name: ENV[name]}).values()


def test_env_snapshot_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("NCCL_IB_SECRET_TOKEN", "never")
    snap = env_snapshot()
    assert snap["NCCL_ALGO"] == "Ring"
    assert "NCCL_IB_SECRET_TOKEN" not in snap


def _iface(root: Path, name: str, **files: str) -> None:
    d = root / name
    d.mkdir(parents=True)
    for key, value in files.items():
        (d / key).write_text(value + "\n")  # sysfs values end with a newline


def test_iface_facts_from_a_recorded_sysfs_tree(tmp_path):
    _iface(tmp_path, "eth0", mtu="9000", type="1", speed="25000", operstate="up")
    _iface(tmp_path, "ib0", mtu="2044", type="32", speed="200000", operstate="up")
    _iface(tmp_path, "lo", mtu="65536", type="772", operstate="unknown")  # no speed file
    _iface(tmp_path, "veth1", mtu="1500", type="1", speed="-1", operstate="down")
    _iface(tmp_path, "gre0", mtu="1476", type="778", speed="garbage")
    assert iface_facts("eth0", tmp_path) == {"iface": "eth0", "mtu": 9000, "link_layer": "ethernet",
                                             "speed_mbps": 25000, "operstate": "up"}
    assert iface_facts("ib0", tmp_path) == {"iface": "ib0", "mtu": 2044, "link_layer": "infiniband",
                                            "speed_mbps": 200000, "operstate": "up"}
    assert iface_facts("lo", tmp_path) == {"iface": "lo", "mtu": 65536, "link_layer": "loopback",
                                           "speed_mbps": None, "operstate": "unknown"}
    assert iface_facts("veth1", tmp_path)["speed_mbps"] is None
    assert iface_facts("veth1", tmp_path)["operstate"] == "down"
    gre = iface_facts("gre0", tmp_path)
    assert (gre["link_layer"], gre["speed_mbps"], gre["operstate"]) == ("778", None, None)


def test_iface_facts_for_missing_or_no_interface(tmp_path):
    assert iface_facts(None, tmp_path) == {"iface": None, "mtu": None, "link_layer": None}
    assert iface_facts("nope0", tmp_path) == {"iface": "nope0", "mtu": None, "link_layer": None,
                                              "speed_mbps": None, "operstate": None}


def test_traffic_iface_follows_the_route_to_loopback():
    assert traffic_iface("127.0.0.1", environ={}) == "lo"
    assert traffic_iface(None, environ={}) is None


def test_traffic_iface_prefers_the_socket_ifname_variables():
    assert traffic_iface("127.0.0.1", environ={"GLOO_SOCKET_IFNAME": "lo"}) == "lo"
    assert traffic_iface(None, environ={"NCCL_SOCKET_IFNAME": "=lo"}) == "lo"
    # exclusions and interfaces this machine lacks fall back to the route
    assert traffic_iface("127.0.0.1", environ={"NCCL_SOCKET_IFNAME": "^docker0"}) == "lo"
    assert traffic_iface("127.0.0.1", environ={"GLOO_SOCKET_IFNAME": "no-such-if0"}) == "lo"


def test_iface_facts_live_for_loopback():
    import psutil

    facts = iface_facts("lo")
    assert facts["iface"] == "lo"
    assert facts["link_layer"] == "loopback"
    assert facts["mtu"] == psutil.net_if_stats()["lo"].mtu
