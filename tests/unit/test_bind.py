"""--bind (core/binding.py): cpulists, the split of the CPUs among local ranks, NUMA nodes from
sysfs, each GPU's CPUs from a recorded `nvidia-smi topo -m`, and the refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from commbench.core import binding
from commbench.core.errors import BadInput
from commbench.net.netinfo import parse_topo_matrix

DATA = Path(__file__).resolve().parents[1] / "data" / "netinfo"


@pytest.mark.parametrize("text, cpus", [
    ("0-3,8", {0, 1, 2, 3, 8}), ("0", {0}), ("", set()), ("5,1-2\n", {1, 2, 5}),
    ("0-47,96-143", set(range(48)) | set(range(96, 144))),
])
def test_cpulist_parses_the_kernel_form(text, cpus):
    assert binding.parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a", "3-1", "1-", "0-99999999", "-2", "1;2"])
def test_cpulist_refuses_what_is_no_cpulist(text):
    with pytest.raises(ValueError):
        binding.parse_cpulist(text)


@pytest.mark.parametrize("cpus, text", [
    ({0, 1, 2, 3, 8}, "0-3,8"), ({1}, "1"), (set(), ""), ({0, 2, 4}, "0,2,4"), ({7, 6, 5, 9, 10}, "5-7,9-10"),
])
def test_cpulist_formats_runs_in_order(cpus, text):
    assert binding.format_cpulist(cpus) == text
    assert binding.parse_cpulist(text) == cpus


def test_cores_split_evenly_and_contiguously():
    shares, shared = binding.split_cores(range(8), 2)
    assert shares == [{0, 1, 2, 3}, {4, 5, 6, 7}] and not shared
    shares, _ = binding.split_cores(range(10), 4)  # 10 = 3 + 3 + 2 + 2: the first ranks take one more
    assert [binding.format_cpulist(s) for s in shares] == ["0-2", "3-5", "6-7", "8-9"]
    shares, _ = binding.split_cores({0, 1, 96, 97}, 2)  # contiguous in the order of the CPU numbers
    assert shares == [{0, 1}, {96, 97}]


def test_more_ranks_than_cpus_share_round_robin_and_say_so():
    shares, shared = binding.split_cores({0, 1}, 5)
    assert shares == [{0}, {1}, {0}, {1}, {0}] and shared
    cpus, notes = binding.plan("cores", 5, {0, 1})
    assert cpus == shares and notes == ["--bind cores: 5 ranks on 2 CPU(s): each rank gets one, shared round-robin"]


def test_every_cpu_is_used_once_when_ranks_fit():
    for n_cpus in range(1, 20):
        for ranks in range(1, n_cpus + 1):
            shares, _ = binding.split_cores(range(n_cpus), ranks)
            assert sorted(c for s in shares for c in s) == list(range(n_cpus))
            assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_none_leaves_the_scheduler_alone_and_auto_without_gpus_is_cores():
    assert binding.plan("none", 2, {0, 1}) == (None, [])
    assert binding.plan("auto", 2, {0, 1, 2, 3}) == ([{0, 1}, {2, 3}], [])
    # fewer than two CPUs a rank: auto leaves them unpinned (cores still pins when asked)
    assert binding.plan("auto", 2, {0, 1, 2}) == (None, [])
    assert binding.plan("cores", 2, {0, 1}) == ([{0}, {1}], [])


def _nodes(tmp_path: Path, lists: dict[str, str]) -> Path:
    for name, text in lists.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "cpulist").write_text(text + "\n")
    (tmp_path / "online").write_text("0-1\n")  # sysfs has other entries beside the nodes
    return tmp_path


def test_numa_gives_each_rank_a_node(tmp_path):
    nodes = binding.numa_nodes(_nodes(tmp_path, {"node0": "0-3,8-11", "node1": "4-7,12-15", "node2": ""}))
    assert nodes == {0: {0, 1, 2, 3, 8, 9, 10, 11}, 1: {4, 5, 6, 7, 12, 13, 14, 15}}  # a node without CPUs is left out
    cpus, notes = binding.plan("numa", 3, set(range(16)), nodes=nodes)
    assert cpus == [nodes[0], nodes[1], nodes[0]]
    assert notes == ["--bind numa: 3 ranks on 2 NUMA node(s): ranks share nodes round-robin"]
    cpus, _ = binding.plan("numa", 2, {0, 1, 4}, nodes=nodes)  # only the CPUs this process may use
    assert cpus == [{0, 1}, {4}]


def test_numa_without_numa_information_is_one_line(tmp_path):
    assert binding.numa_nodes(tmp_path / "absent") == {}
    no_numa = r"^--bind numa: this machine shows no NUMA nodes .*use --bind cores or --bind none$"
    with pytest.raises(BadInput, match=no_numa):
        binding.plan("numa", 2, {0, 1}, nodes={})


@pytest.mark.parametrize("value", ["foo", "cores:0-3", "CORE", ""])
def test_a_foreign_mode_is_refused(value):
    with pytest.raises(BadInput, match=r"is not a binding: use one of auto, none, cores, numa"):
        binding.check_mode(value)
    assert binding.check_mode(" Cores ") == "cores"


# nvidia-smi topo -m as recorded on real machines (tests/data/netinfo/README.md names the sources):
# an 8x H100 node with two NUMA nodes, and the single-H200 machine this project was lent.
def _topo(name: str) -> dict:
    return parse_topo_matrix((DATA / name / "commands" / "nvidia-smi_topo_-m.txt").read_text())


def test_gpu_cpus_come_from_the_cpu_affinity_column():
    topo = _topo("gpu_8xh100_topo")
    near = binding.gpu_cpus(topo, 8)
    node0, node1 = set(range(48)) | set(range(96, 144)), set(range(48, 96)) | set(range(144, 192))
    assert near == [node0] * 4 + [node1] * 4
    cpus, notes = binding.plan("auto", 8, set(range(192)), gpu_cpus=near)
    assert [binding.format_cpulist(c) for c in cpus] == ["0-47,96-143"] * 4 + ["48-95,144-191"] * 4 and notes == []
    assert binding.gpu_cpus(_topo("gpu_1xh200"), 1) == [set(range(16))]


def test_gpu_cpus_follow_cuda_visible_devices():
    topo = _topo("gpu_8xh100_topo")
    node0, node1 = binding.gpu_cpus(topo, 8)[0], binding.gpu_cpus(topo, 8)[4]
    assert binding.gpu_cpus(topo, 2, "6,1") == [node1, node0]
    gpus = [{"index": 5, "uuid": "GPU-5d0c1a2b-aaaa"}]
    assert binding.gpu_cpus(topo, 2, "GPU-5d0c,GPU-ffff", gpus) == [node1, None]


def test_auto_falls_back_to_cores_where_a_gpu_is_unknown():
    assert binding.gpu_cpus(None, 2) is None
    cpus, notes = binding.plan("auto", 2, {0, 1, 2, 3}, gpu_cpus=[{0, 1}, None])
    assert cpus == [{0, 1}, {2, 3}]
    assert notes == ["--bind auto: the CPU affinity of some GPU is unknown (nvidia-smi topo -m): binding to cores"]
    cpus, _ = binding.plan("auto", 1, {0, 1}, gpu_cpus=[{8, 9}])  # the GPU's node is outside this process's CPUs
    assert cpus == [{0, 1}]


def _thread_cpus(tid: int) -> set[int]:
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return binding.parse_cpulist(line.split(":", 1)[1])
    raise AssertionError("no Cpus_allowed_list")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc only")
def test_apply_moves_every_thread_that_already_runs():
    import threading

    before = os.sched_getaffinity(0)
    started, stop = threading.Event(), threading.Event()
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        started.set()
        stop.wait(10)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    started.wait(10)
    one = {max(before)}
    try:
        binding.apply(one)
        assert _thread_cpus(tids[0]) == one and os.sched_getaffinity(0) == one
        assert binding.current_cpulist() == binding.format_cpulist(one)
    finally:
        binding.apply(before)
        stop.set()
        thread.join(10)
    assert os.sched_getaffinity(0) == before
