"""Launcher environments that contradict themselves, a wrong --iface and a `lab run --port` that is
not a port: refused at once (exit 2, one stderr line naming the variables, their values and the
fix, no traceback), instead of torch's 300 s connect timeout with C++ frames or gloo's five-line
"enforce fail".

Every case runs the real CLI (`python -m commbench ...`) in a subprocess with the launcher's
variables set; nothing of the launcher exists (no other rank, no store), so a case that was not
refused would hang until its own timeout. The cases run side by side: each is about one
`import torch`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from commbench.core import launch
from commbench.core.errors import BadInput
from helpers import clean_env  # tests/helpers.py

pytestmark = pytest.mark.integration  # the CLI in subprocesses (README, Development: the tiers)

EXIT_USAGE = 2
DEADLINE_S = 20.0

TORCHRUN = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517"}
SRUN = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": "2",
        "SLURM_NNODES": "1", "SLURM_NODEID": "0", "MASTER_ADDR": "127.0.0.1"}
OMPI = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29518"}
SWEEP = ["sweep", "--sizes", "1K", "-n", "1", "--time-budget", "0.01"]

# (id, argv after `commbench`, launcher variables, substrings the one stderr line must contain)
CASES = [
    # torchrun-style variables
    ("rank-equals-world", SWEEP, dict(TORCHRUN, RANK="2"), ["RANK=2 is not a rank of WORLD_SIZE=2", "0..1", "unset"]),
    ("rank-negative", SWEEP, dict(TORCHRUN, RANK="-1"), ["RANK=-1 is not a rank of WORLD_SIZE=2"]),
    ("world-zero", SWEEP, dict(TORCHRUN, WORLD_SIZE="0"), ["WORLD_SIZE=0 must be at least 1"]),
    ("torchelastic-rank-above-world", SWEEP,
     {"TORCHELASTIC_RUN_ID": "x", "RANK": "5", "WORLD_SIZE": "4", "MASTER_PORT": "29519"},
     ["RANK=5 is not a rank of WORLD_SIZE=4"]),
    ("local-rank-equals-local-world", SWEEP, dict(TORCHRUN, LOCAL_RANK="2", LOCAL_WORLD_SIZE="2"),
     ["LOCAL_RANK=2 is not a local rank of LOCAL_WORLD_SIZE=2", "0..1"]),
    ("local-rank-above-world", SWEEP, dict(TORCHRUN, LOCAL_RANK="3"),
     ["LOCAL_RANK=3 is not a local rank of WORLD_SIZE=2"]),
    ("local-world-above-world", SWEEP, dict(TORCHRUN, LOCAL_WORLD_SIZE="4"),
     ["LOCAL_WORLD_SIZE=4 is more than WORLD_SIZE=2"]),
    ("port-above-65535", SWEEP, dict(TORCHRUN, MASTER_PORT="70000"),
     ["MASTER_PORT=70000 is not a TCP port", "1 to 65535", "MASTER_PORT=29500"]),
    ("port-zero", SWEEP, dict(TORCHRUN, MASTER_PORT="0"), ["MASTER_PORT=0 asks for any free port", "never meet"]),
    ("port-negative", SWEEP, dict(TORCHRUN, MASTER_PORT="-5"), ["MASTER_PORT=-5 is not a TCP port"]),
    ("port-not-a-number", SWEEP, dict(TORCHRUN, MASTER_PORT="http"), ["MASTER_PORT='http' is not a number"]),
    ("addr-does-not-resolve", SWEEP, dict(TORCHRUN, MASTER_ADDR="no-such-host.invalid"),
     ["MASTER_ADDR=no-such-host.invalid does not resolve on", "first host's name or address"]),
    ("addr-empty", SWEEP, dict(TORCHRUN, MASTER_ADDR=""), ["MASTER_ADDR is empty"]),
    # Slurm (an srun step)
    ("slurm-procid-equals-ntasks", SWEEP, dict(SRUN, SLURM_PROCID="2"),
     ["SLURM_PROCID=2 is not a rank of SLURM_NTASKS=2", "srun"]),
    ("slurm-localid-beyond-its-node", SWEEP, dict(SRUN, SLURM_LOCALID="2"),
     ["SLURM_LOCALID=2 is not a local rank of SLURM_TASKS_PER_NODE=2 (2 on node 0)"]),
    ("slurm-ntasks-above-nodes-x-per-node", SWEEP, dict(SRUN, SLURM_NTASKS="9", SLURM_NNODES="2",
                                                         SLURM_NTASKS_PER_NODE="4", SLURM_TASKS_PER_NODE="4(x2)"),
     ["SLURM_NTASKS=9 is more than SLURM_NNODES=2 x SLURM_NTASKS_PER_NODE=4 = 8 tasks"]),
    ("slurm-nodeid-equals-nnodes", SWEEP, dict(SRUN, SLURM_NODEID="1"),
     ["SLURM_NODEID=1 is not a node of SLURM_NNODES=1"]),
    ("slurm-first-host-does-not-resolve", SWEEP,
     {k: v for k, v in dict(SRUN, SLURM_JOB_NODELIST="nohost[1-2].invalid").items() if k != "MASTER_ADDR"},
     ["MASTER_ADDR=nohost1.invalid (the first host of SLURM_JOB_NODELIST) does not resolve"]),
    ("slurm-port-above-65535", SWEEP, dict(SRUN, MASTER_PORT="65536"), ["MASTER_PORT=65536 is not a TCP port"]),
    # Open MPI, PMI
    ("ompi-rank-equals-size", SWEEP, dict(OMPI, OMPI_COMM_WORLD_RANK="2"),
     ["OMPI_COMM_WORLD_RANK=2 is not a rank of OMPI_COMM_WORLD_SIZE=2", "mpirun"]),
    ("ompi-local-rank-equals-local-size", SWEEP, dict(OMPI, OMPI_COMM_WORLD_LOCAL_RANK="2"),
     ["OMPI_COMM_WORLD_LOCAL_RANK=2 is not a local rank of OMPI_COMM_WORLD_LOCAL_SIZE=2"]),
    ("pmi-rank-above-size", SWEEP, {"PMI_RANK": "3", "PMI_SIZE": "2", "MASTER_ADDR": "127.0.0.1"},
     ["PMI_RANK=3 is not a rank of PMI_SIZE=2"]),
    # the other measuring commands and doctor read the same check
    ("buckets-rank-equals-world", ["buckets", "--grad-bytes", "1M", "--bucket-size", "1e5"], dict(TORCHRUN, RANK="2"),
     ["RANK=2 is not a rank of WORLD_SIZE=2"]),
    ("pairs-slurm-procid", ["pairs", "--size", "1K"], dict(SRUN, SLURM_PROCID="7"),
     ["SLURM_PROCID=7 is not a rank of SLURM_NTASKS=2"]),
    ("zero-ompi-port", ["zero", "--model", "gpt2-125m"], dict(OMPI, MASTER_PORT="99999"),
     ["MASTER_PORT=99999 is not a TCP port"]),
    ("doctor-unresolvable-addr", ["doctor"], dict(TORCHRUN, MASTER_ADDR="no-such-host.invalid"),
     ["MASTER_ADDR=no-such-host.invalid does not resolve"]),
    # --iface (and GLOO_SOCKET_IFNAME under gloo): an interface with an address here
    ("iface-unknown", [*SWEEP, "--iface", "nosuch0"], {},
     ["--iface nosuch0 is not an interface with an address on", "(have: ", "lo", "drop --iface"]),
    ("iface-one-of-two-unknown", [*SWEEP, "--iface", "lo,nosuch0"], {},
     ["--iface lo,nosuch0 names nosuch0, which is not an interface with an address on"]),
    ("iface-unknown-buckets", ["buckets", "--grad-bytes", "1M", "--iface", "nosuch0"], {},
     ["--iface nosuch0 is not an interface with an address"]),
    ("iface-unknown-under-torchrun", [*SWEEP, "--iface", "nosuch0"], dict(TORCHRUN, MASTER_PORT="29520"),
     ["--iface nosuch0 is not an interface with an address"]),
    ("gloo-socket-ifname-unknown", SWEEP, {"GLOO_SOCKET_IFNAME": "nosuch0"},
     ["GLOO_SOCKET_IFNAME=nosuch0 is not an interface with an address on", "unset it"]),
    # `lab run --port`: refused before root or the lab are looked at
    ("lab-run-port-zero", ["lab", "run", "--port", "0", "--", "true"], {},
     ["--port 0 asks for any free port", "e.g. --port 29400"]),
    ("lab-run-port-70000", ["lab", "run", "--port", "70000", "--", "true"], {},
     ["--port 70000 is not a TCP port", "1 to 65535"]),
    ("lab-run-port-65536", ["lab", "run", "--port", "65536", "--", "true"], {}, ["--port 65536 is not a TCP port"]),
    ("lab-run-port-negative", ["lab", "run", "--port", "-1", "--", "true"], {}, ["--port -1 is not a TCP port"]),
    ("lab-run-port-not-a-number", ["lab", "run", "--port", "abc", "--", "true"], {},
     ["'--port'", "'abc' is not a valid integer"]),
]


def run_case(argv: list[str], extra: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "commbench", *argv], cwd=cwd, env=clean_env(extra),
                          capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - start


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, float, Path]]:
    base = tmp_path_factory.mktemp("launch")
    jobs = {}
    # One process per core: side by side each still takes about one `import torch`, so the deadline
    # below measures commbench, not the queue for the CPU.
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(os.sched_getaffinity(0))))) as pool:
        for case_id, argv, extra, _ in CASES:
            out = base / case_id / "results"
            measuring = argv[0] in ("sweep", "buckets", "pairs", "zero")
            jobs[case_id] = (pool.submit(run_case, [*argv, "--out", str(out)] if measuring else argv, extra, base), out)
        return {case_id: (*future.result(), out) for case_id, (future, out) in jobs.items()}


@pytest.mark.parametrize("case_id, needles", [pytest.param(c, n, id=c) for c, _, _, n in CASES])
@pytest.mark.failure(
    row="torchrun-style-variables-contradict-each",
    section="Launcher environments, --iface, and signals at the end of a run",
    failure="torchrun-style variables that contradict each other (`RANK` >= `WORLD_SIZE`, a negative `RANK`, "
            "`WORLD_SIZE=0`, `LOCAL_RANK` >= `LOCAL_WORLD_SIZE`, `LOCAL_WORLD_SIZE` > `WORLD_SIZE`)",
    does="refused at once, within 20 s (not torch's 300 s connect timeout): exit 2, one line, e.g. `RANK=2 is not a "
         "rank of WORLD_SIZE=2 (ranks are 0..1): fix the launcher's environment (...), or unset RANK, WORLD_SIZE "
         "and MASTER_ADDR to let commbench spawn its own ranks`; nothing written",
    cases="rank-equals-world, rank-negative, world-zero, torchelastic-rank-above-world, local-rank-*, "
          "local-world-above-world",
)
@pytest.mark.failure(
    row="slurm-counts-disagree-slurm-procid",
    section="Launcher environments, --iface, and signals at the end of a run",
    failure="Slurm counts that disagree (`SLURM_PROCID` >= `SLURM_NTASKS`, `SLURM_LOCALID` beyond its node's tasks, "
            "`SLURM_NTASKS` > `SLURM_NNODES` x `SLURM_NTASKS_PER_NODE`, `SLURM_NODEID` >= `SLURM_NNODES`)",
    does="as above, naming each variable with its value and srun's options as the fix; fewer tasks than slots "
         "(`srun -n 3` in a 2 x 4 job) is accepted",
    cases="slurm-*",
)
@pytest.mark.failure(
    row="open-mpi-pmi-ranks-outside",
    section="Launcher environments, --iface, and signals at the end of a run",
    failure="Open MPI / PMI ranks outside their world (`OMPI_COMM_WORLD_RANK` >= `OMPI_COMM_WORLD_SIZE`, the local "
            "pair, `PMI_RANK` >= `PMI_SIZE`)",
    does="as above, with mpirun as the fix; a local rank without its local size contradicts nothing",
    cases="ompi-*, pmi-rank-above-size",
)
@pytest.mark.failure(
    row="master-port-not-port-0",
    section="Launcher environments, --iface, and signals at the end of a run",
    failure="a `MASTER_PORT` that is not a port (0, -5, 65536, 70000, `http`)",
    does="`MASTER_PORT=70000 is not a TCP port: give one from 1 to 65535, e.g. MASTER_PORT=29500`; 0 is explained "
         "(a different free port on every host, so the ranks would never meet)",
    cases="port-*, slurm-port-above-65535",
)
@pytest.mark.failure(
    row="master-addr-does-not-resolve",
    section="Launcher environments, --iface, and signals at the end of a run",
    failure="a `MASTER_ADDR` that does not resolve (also the first host of `SLURM_JOB_NODELIST`), or an empty one",
    does="`MASTER_ADDR=no-such-host.invalid does not resolve on HOST (Name or service not known): set MASTER_ADDR "
         "to the first host's name or address`; a resolver that gives no answer within 10 s is not held against it",
    cases="addr-*, slurm-first-host-does-not-resolve",
)
@pytest.mark.failure(
    row="same-environments-under-buckets-pairs",
    section="Launcher environments, --iface, and signals at the end of a run",
    failure="the same environments under `buckets`, `pairs`, `zero` and `doctor`",
    does="the same one check and the same line",
    cases="buckets-rank-equals-world, pairs-slurm-procid, zero-ompi-port, doctor-unresolvable-addr",
)
@pytest.mark.failure(
    row="iface-naming-no-interface-address",
    section="Launcher environments, --iface, and signals at the end of a run",
    failure="`--iface` naming no interface with an address here (without `--mtu`), also one of a list, under a "
            "launcher, on `buckets`; `GLOO_SOCKET_IFNAME` so under gloo",
    does="refused before the process group (was gloo's five-line \"enforce fail\" and exit 3): `--iface nosuch0 is "
         "not an interface with an address on HOST (have: eth0, lo): pass one of those to --iface, or drop "
         "--iface`. Names are checked by the rules of the backend that carries the traffic (gloo: exact names; "
         "nccl: NCCL's prefix rules). A wrong `NCCL_SOCKET_IFNAME` alone stays a warning",
    cases="iface-*, gloo-socket-ifname-unknown",
)
@pytest.mark.failure(
    row="lab-run-port-0-hung",
    section="Launcher environments, --iface, and signals at the end of a run",
    failure="`lab run --port` 0 (hung), 70000 / 65536 / -1 (two lines), `abc`",
    does="one line, exit 2, refused before root or the lab are looked at",
    cases="lab-run-port-*",
)
def test_a_contradicting_launcher_environment_is_refused_at_once(refusals, case_id, needles):
    proc, elapsed, out = refusals[case_id]
    assert proc.returncode == EXIT_USAGE, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("commbench: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert elapsed < DEADLINE_S, f"{case_id} took {elapsed:.1f} s"
    assert not out.exists()  # refused before anything was measured or written


# ------------------------------------------------------------------ the check itself, in-process


@pytest.mark.failure(row="master-addr-does-not-resolve")
def test_the_launchers_own_tests_names_are_not_looked_up():
    # detect(environ) of a given dict checks the counts but does not resolve names: a unit test's
    # "node01" is fine; the real environment (detect()) is looked up.
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": "node01.invalid"}
    assert launch.detect(env).master_addr == "node01.invalid"
    with pytest.raises(BadInput, match=r"MASTER_ADDR=node01.invalid does not resolve"):
        launch.detect(env, resolve=True)


@pytest.mark.failure(row="master-addr-does-not-resolve")
def test_a_resolver_that_does_not_answer_is_not_held_against_master_addr(monkeypatch):
    monkeypatch.setattr(launch, "RESOLVE_WAIT_S", 0.2)
    monkeypatch.setattr(launch.socket, "getaddrinfo", lambda *a, **k: time.sleep(5))
    start = time.monotonic()
    found = launch.detect(dict(TORCHRUN, MASTER_ADDR="slow-dns.example"), resolve=True)
    assert found.master_addr == "slow-dns.example" and time.monotonic() - start < 2


@pytest.mark.parametrize("env", [
    dict(TORCHRUN), dict(TORCHRUN, RANK="1", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2"),
    dict(SRUN, SLURM_PROCID="1", SLURM_LOCALID="1"), dict(OMPI, OMPI_COMM_WORLD_RANK="1"),
    # srun -n 3 in a job of 2 nodes x 4 tasks: fewer tasks than slots is Slurm's normal case
    dict(SRUN, SLURM_NTASKS="3", SLURM_NNODES="2", SLURM_NTASKS_PER_NODE="4", SLURM_TASKS_PER_NODE="2,1"),
    # a local rank without its local size (Open MPI) contradicts nothing
    {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
     "MASTER_ADDR": "localhost"},
], ids=["torchrun", "torchrun-local", "slurm", "ompi", "slurm-fewer-tasks-than-slots", "ompi-no-local-size"])
@pytest.mark.failure(row="slurm-counts-disagree-slurm-procid")
@pytest.mark.failure(row="open-mpi-pmi-ranks-outside")
def test_consistent_environments_pass(env):
    assert launch.detect(env, resolve=True) is not None


@pytest.mark.parametrize("port, words", [(0, "asks for any free port"), (65536, "is not a TCP port"),
                                         (-1, "is not a TCP port")])
@pytest.mark.failure(row="master-port-not-port-0")
def test_one_port_rule(port, words):
    with pytest.raises(BadInput, match=words):
        launch.check_port(port, f"--port {port}", "--port 29400")
    launch.check_port(1, "--port 1", "")
    launch.check_port(65535, "--port 65535", "")


@pytest.mark.failure(row="iface-naming-no-interface-address")
def test_nccl_socket_ifname_alone_stays_a_warning(monkeypatch):
    from commbench.cli.launcher import check_iface

    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib9")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuch0")
    check_iface("nccl")  # gloo carries no traffic under nccl: warned about, not refused
    with pytest.raises(BadInput, match="GLOO_SOCKET_IFNAME=nosuch0 is not an interface"):
        check_iface("gloo")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    check_iface("gloo")


@pytest.mark.parametrize("backend, iface, refused", [
    ("gloo", "lo", None), ("gloo", "lo,nosuch0", "names nosuch0, which is not an interface"),
    ("gloo", "l", "is not an interface"),  # gloo takes exact names only
    ("gloo", "bad\nname", r"--iface 'bad\\nname' is not an interface"),  # one line, whatever was passed
    ("nccl", "l", None), ("nccl", "^nosuch", None), ("nccl", "nosuch", "matches no interface with an address"),
])
@pytest.mark.failure(row="iface-naming-no-interface-address")
def test_iface_is_read_by_the_rules_of_the_backend_that_carries_the_traffic(monkeypatch, backend, iface, refused):
    import click

    from commbench.cli.launcher import check_iface

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    ctx = click.Context(click.Command("sweep"))
    ctx.params = {"iface": iface}
    with ctx:
        if refused is None:
            check_iface(backend)
        else:
            with pytest.raises(BadInput, match=refused) as exc:
                check_iface(backend)
            assert "\n" not in str(exc.value) and "(have: " in str(exc.value)


# ------------------------------------------------------------------ stop once: core/signals.py

STOP_ONCE = textwrap.dedent("""
    import os, signal, sys, time
    from commbench.core.signals import Terminated, ignore_signals_until_exit, stop_once
    stop_once()
    raised = []
    try:
        os.kill(os.getpid(), signal.SIG{first})
        time.sleep(1)
    except (KeyboardInterrupt, Terminated) as exc:
        raised.append(type(exc).__name__)
        for _ in range(20):  # a terminal's Ctrl-C, the supervisor's, Slurm's repeats: all while stopping
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
    print(raised, flush=True)
    ignore_signals_until_exit()
    os.kill(os.getpid(), signal.SIGTERM)  # during the exit itself
    os.kill(os.getpid(), signal.SIGINT)
    sys.exit(7)
""")


@pytest.mark.parametrize("first, name", [("INT", "KeyboardInterrupt"), ("TERM", "Terminated")])
@pytest.mark.failure(row="ctrl-c-sigterm-hammered-every")
def test_the_first_signal_stops_and_later_ones_change_nothing(first, name):
    proc = subprocess.run([sys.executable, "-c", STOP_ONCE.replace("{first}", first)], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 7, proc.stderr  # its own code, not a kill by the late signals
    assert proc.stdout.strip() == repr([name])
    assert proc.stderr == ""


@pytest.mark.failure(row="lab-run-port-0-hung")
def test_lab_run_port_is_checked_before_the_lab():
    from commbench.lab import ranklaunch as labrun

    for port in (0, 70000, -1):  # no lab state at all: the port is refused before it is read
        with pytest.raises(BadInput, match=rf"--port {port} "):
            labrun.run_everywhere(None, ["true"], port)  # type: ignore[arg-type]
