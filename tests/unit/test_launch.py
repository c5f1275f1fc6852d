"""commbench.core.launch.detect: which launcher started this process, from its environment alone."""

import pytest

from commbench.core.errors import BadInput
from commbench.core.launch import RankEnv, detect

TORCHRUN = {"TORCHELASTIC_RUN_ID": "none", "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29400", "GROUP_RANK": "1"}
SRUN = {"SLURM_PROCID": "4", "SLURM_NTASKS": "6", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0",
        "SLURM_JOB_NODELIST": "node[03-05],gpu7", "SLURM_JOB_ID": "12345", "SLURM_TASKS_PER_NODE": "2(x3)",
        "SLURM_NNODES": "3", "SLURM_NODEID": "2"}
SBATCH = {k: v for k, v in SRUN.items() if k != "SLURM_STEP_ID"}
OMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "node01"}


def test_torchrun():
    assert detect(TORCHRUN) == RankEnv("torchrun", 5, 8, 1, 4, "10.1.2.3", 29400)


def test_plain_rank_variables_without_torchelastic_count_as_torchrun():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    assert detect(env) == RankEnv("torchrun", 0, 2, 0, 2, "127.0.0.1", 29500)


def test_slurm_srun_step():
    got = detect(SRUN)
    assert got == RankEnv("slurm", 4, 6, 0, 2, "node03", 29500 + 12345 % 10000)
    assert got.master_port == 31845


def test_slurm_honours_master_addr_and_port_and_the_step_nodelist():
    env = dict(SRUN, MASTER_ADDR="10.9.9.9", MASTER_PORT="40000")
    assert (detect(env).master_addr, detect(env).master_port) == ("10.9.9.9", 40000)
    env = dict(SRUN, SLURM_STEP_NODELIST="gpu[10-11]", SLURM_STEP_TASKS_PER_NODE="3,1")
    assert (detect(env).master_addr, detect(env).local_world_size) == ("gpu10", 3)


@pytest.mark.failure(
    row="broken-launcher-environments-non-numeric",
    section="Bad input",
    failure="broken launcher environments (non-numeric ranks, a bad Slurm host list, a missing variable, mpirun "
            "without MASTER_ADDR)",
    does="one line naming the variable",
)
def test_slurm_bad_nodelist_is_bad_input():
    with pytest.raises(BadInput, match=r"SLURM_JOB_NODELIST='node\[03-' is not a Slurm host list"):
        detect(dict(SRUN, SLURM_JOB_NODELIST="node[03-"))


def test_sbatch_batch_step_is_not_a_rank():
    assert detect(SBATCH) is None


def test_open_mpi():
    assert detect(OMPI) == RankEnv("mpi", 3, 4, 1, 2, "node01", 29500)
    assert detect(dict(OMPI, MASTER_PORT="23456")).master_port == 23456


@pytest.mark.failure(row="broken-launcher-environments-non-numeric")
def test_open_mpi_without_master_addr_says_how_to_pass_it():
    env = {k: v for k, v in OMPI.items() if k != "MASTER_ADDR"}
    with pytest.raises(BadInput, match="-x MASTER_ADDR"):
        detect(env)


def test_no_launcher():
    assert detect({}) is None
    assert detect({"HOME": "/root", "RANK": "0"}) is None


@pytest.mark.parametrize("env, name", [
    (dict(TORCHRUN, RANK="zero"), "RANK"),
    (dict(TORCHRUN, WORLD_SIZE="8.0"), "WORLD_SIZE"),
    (dict(TORCHRUN, MASTER_PORT="http"), "MASTER_PORT"),
    (dict(SRUN, SLURM_PROCID="x"), "SLURM_PROCID"),
    (dict(OMPI, OMPI_COMM_WORLD_SIZE=""), "OMPI_COMM_WORLD_SIZE"),
])
@pytest.mark.failure(row="broken-launcher-environments-non-numeric")
def test_non_numeric_values_are_bad_input(env, name):
    with pytest.raises(BadInput, match=rf"{name}=.* is not a number"):
        detect(env)


@pytest.mark.parametrize("node_id, expected", [("0", 2), ("2", 2), ("3", 1)])
def test_slurm_local_world_size_follows_the_rank_s_own_node(node_id, expected):
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0",
           "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_JOB_ID": "7", "SLURM_TASKS_PER_NODE": "2(x3),1",
           "SLURM_NODEID": node_id}
    assert detect(env).local_world_size == expected


@pytest.mark.failure(row="broken-launcher-environments-non-numeric")
def test_a_missing_launcher_variable_is_bad_input():
    with pytest.raises(BadInput, match="SLURM_LOCALID is not set"):
        detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "n1"})


def test_a_process_with_another_thread_does_not_fork():
    """A fork copies the locks other threads hold, held forever in the child: spawn instead."""
    import threading

    from commbench.core.launch import fork_safe

    release = threading.Event()
    other = threading.Thread(target=release.wait, daemon=True)
    other.start()
    try:
        assert not fork_safe()
    finally:
        release.set()
        other.join(5)
