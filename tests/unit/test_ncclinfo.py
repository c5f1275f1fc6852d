"""commbench.net.ncclinfo: the transport NCCL used, from recorded NCCL_DEBUG=INFO lines.

Every line below is quoted from a public issue (the URL is above each group), unchanged.
"""

import os
from pathlib import Path

import pytest

from commbench.core.errors import BadInput
from commbench.net.ncclinfo import (TransportCollector, classify, debug_file_pattern, enable_debug_file,
                                own_debug_file_transport, read_debug_files, record_transport, transports)

# https://github.com/NVIDIA/nccl/issues/707 (2 nodes, A100, GPUDirect RDMA)
IB_GDRDMA = """\
10-90-43-152:120890:121560 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA
10-90-43-152:120890:121563 [3] NCCL INFO Channel 01 : 3[ca000] -> 2[c7000] [send] via NET/IB/2/GDRDMA
10-90-43-152:120890:121562 [2] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [send] via NET/IB/2/GDRDMA
"""

# https://github.com/NVIDIA/nccl/issues/952: a node whose inter-node traffic fell back to sockets
SOCKET_FALLBACK = """\
<cluster_name>:919:1150 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read
<cluster_name>:919:1150 [0] NCCL INFO Channel 02/0 : 8[0] -> 15[7] via P2P/IPC/read
<cluster_name>:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3
<cluster_name>:926:1151 [7] NCCL INFO Channel 07/0 : 15[7] -> 6[6] [send] via NET/Socket/3
"""

# https://github.com/NVIDIA/nccl-tests/issues/166 (shared memory between GPUs without P2P)
SHM = """\
ubuntu:9621:9687 [2] NCCL INFO Channel 13 : 10[2] -> 11[3] via SHM/direct/direct
ubuntu:39964:40047 [3] NCCL INFO Channel 11 : 3[3] -> 4[4] via SHM/direct/direct
"""

# https://github.com/NVIDIA/nccl/issues/1538 (NCCL 2.22, cuMem P2P)
CUMEM = """\
job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0:5663:5809 [0] NCCL INFO Channel 04/0 : 0[0] -> 7[7] via P2P/CUMEM
"""

# https://github.com/NVIDIA/nccl/issues/1814 (the IB plugin, versioned)
IBEXT = """\
hostname-test:987:1260 [7] NCCL INFO Channel 03/0 : 47[7] -> 39[7] [receive] via NET/IBext_v8/2
"""

# https://github.com/Mellanox/nv_peer_memory/issues/56 (before any channel is connected)
SELECTED = """\
master_node:24570:24907 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
master_node:24570:24907 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.
master_node:24570:24907 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>
NCCL version 2.5.6+cuda10.0
"""


def test_channel_lines_name_the_transport():
    assert transports(IB_GDRDMA.splitlines()) == "NET/IB"
    assert transports(SOCKET_FALLBACK.splitlines()) == "NET/Socket,P2P/IPC"
    assert transports(SHM.splitlines()) == "SHM"
    assert transports(CUMEM.splitlines()) == "P2P/CUMEM"
    assert transports(IBEXT.splitlines()) == "NET/IBext"
    assert transports((IB_GDRDMA + SHM + CUMEM).splitlines()) == "NET/IB,P2P/CUMEM,SHM"


def test_selected_network_and_version_without_channel_lines():
    c = TransportCollector()
    for line in SELECTED.splitlines():
        c.feed(line)
    assert c.transport == "NET/IB" and c.nccl_version == "2.5.6"
    for line in SOCKET_FALLBACK.splitlines():  # connection lines win over the selection
        c.feed(line)
    assert c.transport == "NET/Socket,P2P/IPC"


def test_a_plugin_name_with_a_space():
    line = "ip-10-0-0-1:22:99 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA"
    assert transports([line]) == "NET/AWS Libfabric"


def test_nothing_known():
    assert transports(["hello", "NCCL WARN something", "# nThread 1 nGpus 8"]) is None


def test_classify():
    assert classify("NET/IB/0/GDRDMA") == "NET/IB"
    assert classify("P2P/direct pointer") == "P2P/direct"
    assert classify("NET/AWS Libfabric/0/GDRDMA") == "NET/AWS Libfabric"
    assert classify("CollNet/0") == "CollNet"


def test_debug_files(tmp_path):
    pattern = debug_file_pattern(tmp_path, "run1")
    assert pattern.endswith("run1.nccl-debug.%h.%p.log")
    a = tmp_path / "run1.nccl-debug.node1.11.log"
    a.write_text(IB_GDRDMA)
    b = tmp_path / "run1.nccl-debug.node1.12.log"
    b.write_text(SHM)
    assert read_debug_files([a, b, tmp_path / "missing.log"]) == "NET/IB,SHM"
    assert read_debug_files([]) is None


def test_own_debug_file_is_the_one_of_this_process(tmp_path):
    pattern = str(tmp_path / "r.nccl-debug.%h.%p.log")
    (tmp_path / "r.nccl-debug.node1.4242.log").write_text(SOCKET_FALLBACK)
    (tmp_path / "r.nccl-debug.node1.4243.log").write_text(IB_GDRDMA)  # another rank's
    assert own_debug_file_transport({"NCCL_DEBUG_FILE": pattern}, pid=4242) == "NET/Socket,P2P/IPC"
    assert own_debug_file_transport({"NCCL_DEBUG_FILE": pattern}, pid=1) is None
    assert own_debug_file_transport({}, pid=4242) is None


def test_record_transport_rewrites_the_results(tmp_path, monkeypatch):
    import pandas as pd

    from commbench.integrations.nccl_tests import importer as nccl_tests
    from commbench.core.results import ResultWriter

    parsed = nccl_tests.parse_file(Path(__file__).parents[1] / "data" / "nccl-tests"
                                   / "all_reduce_v2.19.4_1node_8xA100.txt", "20250101-000000-abcdef")
    writer = ResultWriter(tmp_path / "r.parquet")
    writer.create()
    writer.append(parsed.records)
    (tmp_path / f"x.nccl-debug.h.{os.getpid()}.log").write_text(SHM + CUMEM)
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "x.nccl-debug.%h.%p.log"))
    record_transport(writer)
    assert set(pd.read_parquet(tmp_path / "r.parquet").transport) == {"P2P/CUMEM,SHM"}


def test_enable_debug_file(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("NCCL_DEBUG_FILE", "")
    with pytest.raises(BadInput, match="needs --backend nccl"):
        enable_debug_file(str(tmp_path), "run1", "gloo")
    pattern = enable_debug_file(str(tmp_path), "run1", "nccl")
    assert os.environ["NCCL_DEBUG"] == "INFO" and os.environ["NCCL_DEBUG_FILE"] == pattern
    assert pattern == str(tmp_path / "run1.nccl-debug.%h.%p.log")


def test_recorded_one_rank_run_on_an_h200():
    """One rank: no connection lines; IB found no device ("NET/IB : Using [RO]", then "Failed to
    initialize NET plugin IB") and NCCL chose sockets."""
    lines = (Path(__file__).parents[1] / "data" / "ncclinfo" / "h200_1rank_nccl2.28.9_sweep.nccl-debug.log"
             ).read_text().splitlines()
    c = TransportCollector()
    for line in lines:
        c.feed(line)
    assert c.transport == "NET/Socket" and c.nccl_version == "2.28.9"
    without_choice = [line for line in lines if "Using network" not in line]
    assert transports(without_choice) == "NET/Socket"  # IB initialised no device: not offered
