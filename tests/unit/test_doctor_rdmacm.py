"""doctor's RDMA connection manager check (issue #41 part 5) on recorded hosts (tests/data/netinfo/README.md):
the modules and /dev/infiniband/rdma_cm present says nothing; either missing is a note with its fix (exit 0:
NCCL does not need the connection manager)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from commbench.net import doctor, netinfo
from commbench.net.doctorview import rdma_cm_text

DATA = Path(__file__).resolve().parents[1] / "data" / "netinfo"


def _cm_findings(root: Path) -> list:
    facts = netinfo.host_facts(root=root, gpus=False)
    return [f for f in doctor.check_host(facts) if f.check == "rdma-cm"]


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA / name, tmp_path / name))


@pytest.mark.parametrize("name", ["rdma_cm_ldms", "rdma_cm_container_cx6", "gpu_1xh200", "ib_hdr_3port"])
def test_a_host_with_a_working_connection_manager_or_no_rdma_gets_no_finding(name):
    assert _cm_findings(DATA / name) == []


def test_the_recorded_facts_read_as_loaded_and_present():
    facts = netinfo.host_facts(root=DATA / "rdma_cm_ldms", gpus=False)["rdma_cm"]
    assert facts["modules"] == ["ib_core", "ib_uverbs", "rdma_cm", "rdma_ucm"]
    assert rdma_cm_text(facts) == "modules rdma_cm, rdma_ucm loaded; /dev/infiniband/rdma_cm present"
    container = netinfo.host_facts(root=DATA / "rdma_cm_container_cx6", gpus=False)["rdma_cm"]
    assert container["devices"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert rdma_cm_text(container) == "modules unknown; /dev/infiniband/rdma_cm present"


def test_unloaded_modules_are_a_note_naming_them_and_modprobe(tmp_path):
    root = _copy("rdma_cm_ldms", tmp_path)
    lsmod = root / "commands" / "lsmod.txt"
    lsmod.write_text("".join(line for line in lsmod.read_text().splitlines(keepends=True)
                             if not line.startswith(("rdma_cm ", "rdma_ucm "))))
    (root / "commands" / "ls_dev_infiniband.txt").write_text("issm0  umad0  uverbs0  uverbs1\n")
    (found,) = _cm_findings(root)
    assert found.severity == "note"
    assert found.message.startswith("the RDMA connection manager's kernel module(s) rdma_cm, rdma_ucm are not loaded "
                                    "on ldms-host")
    assert "NCCL does not need it" in found.message
    assert found.hint.startswith("modprobe rdma_cm rdma_ucm")


def test_a_container_without_the_device_is_a_note_with_the_docker_fix(tmp_path):
    root = _copy("rdma_cm_container_cx6", tmp_path)
    (root / "commands" / "ls_dev_infiniband.txt").write_text("ucm0  ucm2  uverbs0  uverbs2\n")
    (found,) = _cm_findings(root)
    assert found.message.startswith("/dev/infiniband/rdma_cm is missing on hdr-container")
    assert "--device=/dev/infiniband/rdma_cm" in found.hint


def test_doctor_prints_the_note_first_and_exits_0(tmp_path, capsys):
    root = _copy("rdma_cm_container_cx6", tmp_path)
    (root / "commands" / "ls_dev_infiniband.txt").write_text("uverbs0\n")
    code = doctor.run(roots=[str(root)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].startswith("note [rdma-cm] /dev/infiniband/rdma_cm is missing on hdr-container")
