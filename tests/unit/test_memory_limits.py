"""The memory check's bounds (issue #39, class 7, memory half): on CPU the tightest of the host's free
memory, the cgroup's room (a Slurm job's limit: cgroup v2 memory.max, v1 memory.limit_in_bytes, less
what is in use, over this process's cgroup and those above it) and RLIMIT_AS, named in the refusal.
The real CLI under `ulimit -v`: tests/integration/test_memory_limits.py."""

from __future__ import annotations

import resource

import pytest
import torch

from commbench.core.errors import BadInput
from commbench.harness import memory

GIB = 1 << 30


def _tree(tmp_path, files: dict[str, str], proc: str):
    for rel, text in files.items():
        path = tmp_path / "cg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "cgroup").write_text(proc)
    return str(tmp_path / "cgroup"), str(tmp_path / "cg")


@pytest.mark.failure(
    row="memory-cgroup",
    section="Memory limits",
    failure="a Slurm job (or container) whose cgroup allows less memory than the host has free: cgroup v2 "
            "`memory.max`, v1 `memory.limit_in_bytes`, set on the job's cgroup above the task's",
    does="the room is the least limit - usage over this process's cgroup and every one above it; `max` and v1's "
         "9223372036854771712 are no limit; the refusal names it: `... but only 3 GiB is left under the cgroup "
         "limit 4 GiB of .../job_7 (memory.max) less 1 GiB in use: lower --max-bytes`, exit 2 (was: sized from the "
         "host's free memory alone)",
)
def test_the_cgroup_room_is_the_least_over_the_cgroup_and_those_above(tmp_path):
    proc, root = _tree(tmp_path, {
        "slurm/job_7/memory.max": "4294967296\n", "slurm/job_7/memory.current": "1073741824\n",
        "slurm/job_7/step_0/task_0/memory.max": "max\n", "slurm/job_7/step_0/task_0/memory.current": "5\n",
    }, "0::/slurm/job_7/step_0/task_0\n")
    room, where = memory.cgroup_room(proc, root)
    assert room == 3 * GIB and "job_7 (memory.max)" in where and "4 GiB" in where
    proc, root = _tree(tmp_path, {  # cgroup v1, the job's limit below the unlimited root's
        "memory/memory.limit_in_bytes": "9223372036854771712\n", "memory/memory.usage_in_bytes": "7\n",
        "memory/job/memory.limit_in_bytes": str(2 * GIB), "memory/job/memory.usage_in_bytes": str(GIB // 2),
    }, "4:memory:/job\n3:cpuset:/\n0::/\n")
    room, where = memory.cgroup_room(proc, root)
    assert room == GIB + GIB // 2 and "memory.limit_in_bytes" in where
    proc, root = _tree(tmp_path, {}, "0::/\n")
    assert memory.cgroup_room(proc, root) is None
    assert memory.cgroup_room(str(tmp_path / "nothing"), root) is None


@pytest.mark.failure(row="memory-cgroup")
def test_check_need_names_the_bound_that_binds(monkeypatch):
    monkeypatch.setattr(memory, "cgroup_room", lambda: (3 * GIB, "the cgroup limit 4 GiB of /x (memory.max)"))
    monkeypatch.setattr(memory, "address_space_room", lambda: None)
    memory.check_need(GIB, 2, torch.device("cpu"), "the largest point", "lower --max-bytes")  # 2 GiB of 3 fits
    with pytest.raises(BadInput, match=r"needs about 4 GiB \(2 rank\(s\)\) but only 3 GiB is left under the cgroup "
                                       r"limit 4 GiB of /x \(memory.max\): lower --max-bytes"):
        memory.check_need(2 * GIB, 2, torch.device("cpu"), "the largest point", "lower --max-bytes")
    monkeypatch.setattr(memory, "address_space_room", lambda: (GIB, "the address-space limit (ulimit -v, RLIMIT_AS)"))
    with pytest.raises(BadInput, match=r"each of the 2 ranks.*RLIMIT_AS"):  # per rank: 1.5 GiB of 1 GiB
        memory.check_need(GIB + GIB // 2, 2, torch.device("cpu"), "the largest point", "lower --max-bytes")


def test_rlimit_as_is_each_rank_s_own(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda _: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert memory.address_space_room() is None
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1 << 50, resource.RLIM_INFINITY))
    room, where = memory.address_space_room()
    assert 0 < room < 1 << 50 and "RLIMIT_AS" in where and "this rank maps already" in where
