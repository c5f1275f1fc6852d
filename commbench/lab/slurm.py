"""A real Slurm on the lab: a private munged, slurmctld on the first host, one slurmd per host.

Everything lives under the lab's STATE_DIR so that two labs (two prefixes) never share anything:

    STATE_DIR/munge/   munge.key, munge.socket, munged.pid, munged.log, munged.seed
    STATE_DIR/slurm/   slurm.conf, plugstack.conf, ctld/ (StateSaveLocation), slurmctld.log,
                       spool-<host>/, slurmd-<host>.pid, slurmd-<host>.log, *.out (daemon output)

Every daemon runs in the foreground (-D / -F) as a process recorded in the lab state (labprocs), so
`lab slurm down` and `lab down` stop exactly these processes. slurmctld and each slurmd run inside
their host's network namespace with the host's own hostname and the lab's hosts file as /etc/hosts
(nsexec). Clients (sinfo, sbatch, scontrol) run inside the first host, where the controller is
reachable, with SLURM_CONF pointing at the lab's slurm.conf; slurm.conf's AuthInfo names the lab's
munged socket, so the machine's own munge and Slurm (if any) are never used.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

from commbench.lab import state as labmod
from commbench.lab import processes as labprocs
from commbench.lab import nsexec
from commbench.core.errors import BadInput, CommbenchError, RuntimeFailure
from commbench.core.inputs import check_path

INSTALL_HINT = "apt-get install slurm-wlm munge"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol", "scancel", "squeue")
DAEMON_NAMES = labmod.DAEMON_NAMES  # what is ours to stop: only these programs, checked by labprocs.running
IDLE_TIMEOUT = 60.0
_TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
             "BOOT_FAIL", "DEADLINE"}
# Variables a launcher sets: they must not leak from the caller into daemons or jobs, where
# commbench would take them for its own rank.
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                  "TORCHELASTIC_RUN_ID", "COMMBENCH_LAUNCHER")


def munge_dir() -> Path:
    return labmod.STATE_DIR / "munge"


def slurm_dir() -> Path:
    return labmod.STATE_DIR / "slurm"


def conf_path() -> Path:
    return slurm_dir() / "slurm.conf"


def socket_path() -> Path:
    return munge_dir() / "munge.socket"


def hosts_file(state: labmod.LabState) -> str:
    return labmod.hosts_file(state)


def tool(name: str) -> str:
    """Absolute path of a Slurm/munge program (daemons live in /usr/sbin, often not on PATH)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin:/usr/bin:/usr/local/bin")
    if found is None:
        raise BadInput(f"{name} is not installed: the lab's Slurm needs Slurm and munge ({INSTALL_HINT})")
    return found


def require_tools() -> None:
    for name in TOOLS:
        tool(name)


def _is_ours(entry: dict) -> bool:
    return entry["name"].split(" ")[0] in DAEMON_NAMES


def is_up(state: labmod.LabState) -> bool:
    return any(_is_ours(d) for d in state.daemons)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without Slurm job or launcher variables, plus the lab's SLURM_CONF."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in _LAUNCHER_VARS}
    env["SLURM_CONF"] = str(conf_path())
    env.update(extra or {})
    return env


def node_hardware() -> dict[str, int]:
    """CPUs and topology as `slurmd -C` reports them for this machine (every lab host shares it)."""
    hw = {"CPUs": os.cpu_count() or 2, "Sockets": 1, "CoresPerSocket": os.cpu_count() or 2, "ThreadsPerCore": 1}
    try:
        out = subprocess.run([tool("slurmd"), "-C"], capture_output=True, text=True, timeout=30).stdout
    except (subprocess.SubprocessError, OSError):
        return hw
    found = dict(re.findall(r"(\w+)=(\S+)", out))
    try:
        boards = int(found.get("Boards", 1))
        hw = {"CPUs": int(found["CPUs"]), "Sockets": boards * int(found["SocketsPerBoard"]),
              "CoresPerSocket": int(found["CoresPerSocket"]), "ThreadsPerCore": int(found["ThreadsPerCore"])}
    except (KeyError, ValueError):
        pass
    return hw


def health_check_lines(program: str | None, interval: int) -> list[str]:
    """slurm.conf's health check: slurmctld asks every slurmd, whatever its state (ANY), to run `program`
    each `interval` s; slurmd runs it with no argument and an empty environment, and only logs a failure
    (draining is the program's own business)."""
    if program is None:
        return []
    return [f"HealthCheckProgram={program}", f"HealthCheckInterval={interval}", "HealthCheckNodeState=ANY"]


def render_conf(state: labmod.LabState, hw: dict[str, int], health_check: str | None = None,
                health_check_interval: int = 300) -> str:
    sd = slurm_dir()
    first = state.nodes[0]
    topo = " ".join(f"{k}={v}" for k, v in hw.items())
    lines = [
        "# Written by `commbench lab slurm up`; removed by `commbench lab slurm down` / `commbench lab down`.",
        f"ClusterName={labmod.PREFIX}lab",
        f"SlurmctldHost={first.name}({first.addr})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={socket_path()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={sd / 'ctld'}",
        f"SlurmctldPidFile={sd / 'slurmctld.pid'}",
        f"SlurmctldLogFile={sd / 'slurmctld.log'}",
        f"SlurmdSpoolDir={sd / 'spool-%n'}",
        f"SlurmdPidFile={sd / 'slurmd-%n.pid'}",
        f"SlurmdLogFile={sd / 'slurmd-%n.log'}",
        f"PlugStackConfig={sd / 'plugstack.conf'}",
        # No systemd, no cgroup tree we may use: track processes through /proc, bind nothing.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "EnforcePartLimits=ALL",  # a job the lab can never run is refused by sbatch, not left pending
        "MailProg=/bin/true",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=600",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        *health_check_lines(health_check, health_check_interval),
    ]
    lines += [f"NodeName={n.name} NodeAddr={n.addr} {topo} State=UNKNOWN" for n in state.nodes]
    lines.append("PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _start(state: labmod.LabState, name: str, argv: list[str], node: labmod.LabNode, log: Path) -> subprocess.Popen:
    """Start one daemon in `node`, output appended to `log`, and record it before anything else."""
    with open(log, "ab") as out:
        proc = nsexec.popen(argv, node.name, hostname=node.name, hosts_file=hosts_file(state), env=clean_env(),
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=str(labmod.STATE_DIR))
    labprocs.record(state, name, proc.pid)
    return proc


def client(state: labmod.LabState, argv: list[str], env: dict[str, str] | None = None, timeout: float = 30,
           capture: bool = True) -> subprocess.CompletedProcess:
    """Run a Slurm client command inside the first host (where the controller is reachable)."""
    first = state.nodes[0]
    proc = nsexec.popen([tool(argv[0])] + argv[1:], first.name, hostname=first.name, hosts_file=hosts_file(state),
                        env=env or clean_env(), stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE if capture else None,
                        text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, 124, out or "", (err or "") + f"\n{argv[0]} timed out")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def _fail_up(state: labmod.LabState, what: str, log: Path) -> None:
    """Stop what started, keep the files to read (`lab slurm down` or `lab down` removes them)."""
    if not log.exists() or log.stat().st_size == 0:
        log = log.with_suffix(".out")  # the daemon died before it opened its own log
    tail = _tail(log, 2)
    _stop_daemons(state)
    raise RuntimeFailure(f"{what}; see {log}" + (f" ({tail})" if tail else ""))


def _wait_for(check, timeout: float, procs: list[tuple[subprocess.Popen, str]]) -> str | None:
    """Poll `check()` until true; return the name of a daemon that died meanwhile, or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p, name in procs:
            if p.poll() is not None:
                return name
        if check():
            return None
        time.sleep(0.25)
    return "timeout"


def node_states(state: labmod.LabState) -> dict[str, str]:
    res = client(state, ["sinfo", "-h", "-N", "-o", "%N %T"], timeout=15)
    if res.returncode != 0:
        return {}
    return dict(line.split(None, 1) for line in res.stdout.splitlines() if " " in line.strip())


def check_program(program: str) -> str:
    """slurmd runs the health check by absolute path, with no argument: it must be an executable file."""
    path = Path(program)
    if " " in program or not path.is_file() or not os.access(path, os.X_OK):
        raise BadInput(f"--health-check {program!r} is not an executable file: give a script (chmod 0755) that "
                       "takes no argument, e.g. one that runs 'commbench check --mode healthcheck'")
    return str(path.resolve())


def up(timeout: float = IDLE_TIMEOUT, health_check: str | None = None,
       health_check_interval: int = 300) -> labmod.LabState:
    """Start munged, slurmctld and the slurmds; return when every host is idle in sinfo."""
    labmod.require_root()
    require_tools()
    if health_check is not None:
        health_check = check_program(health_check)
    state = labmod.require_state()
    if is_up(state):
        raise BadInput("the lab's Slurm is already up: 'commbench lab slurm status' shows it, "
                       "'commbench lab slurm down' stops it")
    md, sd = munge_dir(), slurm_dir()
    for d in (md, sd):
        labmod.remove_path(str(d))  # a leftover of a crashed run of this lab: inside STATE_DIR, ours by name
        if str(d) not in state.files:
            state.files.append(str(d))
    labmod.save_state(state)
    md.mkdir(mode=0o711, parents=True)  # munged: everyone needs +x on the socket's folder
    sd.mkdir(mode=0o755, parents=True)
    (sd / "ctld").mkdir(mode=0o700)
    for n in state.nodes:
        (sd / f"spool-{n.name}").mkdir(mode=0o755)
    key = md / "munge.key"
    with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400), "wb") as f:
        f.write(os.urandom(1024))
    (sd / "plugstack.conf").write_text("")
    conf_path().write_text(render_conf(state, node_hardware(), health_check, health_check_interval))
    first = state.nodes[0]

    log = md / "munged.log"
    munged = _start(state, "munged", [tool("munged"), "-F", "--socket", str(socket_path()), "--key-file", str(key),
                                      "--pid-file", str(md / "munged.pid"), "--log-file", str(log),
                                      "--seed-file", str(md / "munged.seed")], first, md / "munged.out")
    died = _wait_for(socket_path().exists, 15, [(munged, "munged")])
    if died:
        _fail_up(state, "munged did not start" if died != "timeout" else "munged made no socket in 15 s", log)

    log = sd / "slurmctld.log"
    ctld = _start(state, "slurmctld", [tool("slurmctld"), "-D", "-c"], first, sd / "slurmctld.out")
    daemons = [(munged, "munged"), (ctld, "slurmctld")]
    died = _wait_for(lambda: client(state, ["scontrol", "ping"], timeout=10).stdout.count("UP") > 0, 30, daemons)
    if died:
        _fail_up(state, "slurmctld did not start" if died != "timeout" else "slurmctld did not answer in 30 s",
                 log if (sd / "slurmctld.log").exists() else sd / "slurmctld.out")

    for n in state.nodes:
        p = _start(state, f"slurmd {n.name}", [tool("slurmd"), "-D", "-N", n.name], n, sd / f"slurmd-{n.name}.out")
        daemons.append((p, f"slurmd {n.name}"))

    names = [n.name for n in state.nodes]

    def all_idle() -> bool:
        states = node_states(state)
        return all(states.get(n) == "idle" for n in names)  # "idle*" = not responding

    died = _wait_for(all_idle, timeout, daemons)
    if died:
        if died == "timeout":
            states = node_states(state)
            _fail_up(state, f"the lab's nodes did not become idle in {timeout:g} s (sinfo: "
                            f"{', '.join(f'{k} {v}' for k, v in states.items()) or 'no answer'})", sd / "slurmctld.log")
        host = died.split(" ")[-1]
        log = sd / f"slurmd-{host}.log" if died.startswith("slurmd") else sd / "slurmctld.log"
        _fail_up(state, f"{died} stopped", log)
    return state


def cancel_jobs(state: labmod.LabState, timeout: float = 15.0) -> None:
    """Cancel every job of the lab's Slurm and wait (bounded) until the queue is empty, so that no
    job step outlives its slurmd."""
    ctld = next((d for d in state.daemons if d["name"] == "slurmctld"), None)
    if ctld is None or not state.nodes or labprocs.running(ctld) is None:
        return  # no controller of ours (or no host to ask it from)
    try:
        _cancel_all(state, timeout)
    except (CommbenchError, OSError, subprocess.SubprocessError):
        pass  # best effort: `lab down` must go on (a running step may then outlive its slurmd)


def _cancel_all(state: labmod.LabState, timeout: float) -> None:
    queue = client(state, ["squeue", "-h", "-o", "%i"], timeout=10)
    jobs = queue.stdout.split() if queue.returncode == 0 else []
    if not jobs:
        return
    client(state, ["scancel", *jobs], timeout=10)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queue = client(state, ["squeue", "-h", "-o", "%i"], timeout=10)
        if queue.returncode != 0 or not queue.stdout.strip():
            return
        time.sleep(0.5)


def _stop_daemons(state: labmod.LabState) -> list[str]:
    cancel_jobs(state)
    ours = [d for d in state.daemons if _is_ours(d)]
    stopped = labprocs.stop_recorded(SimpleNamespace(daemons=ours))
    state.daemons = [d for d in state.daemons if not _is_ours(d)]
    labmod.save_state(state)
    return stopped


def down(state: labmod.LabState | None = None) -> list[str]:
    """Stop the lab's Slurm and munged and remove their files; the network stays up."""
    labmod.require_root()
    state = state or labmod.require_state()
    stopped = _stop_daemons(state)
    for d in (slurm_dir(), munge_dir()):
        labmod.remove_path(str(d))  # inside STATE_DIR only (a link there is removed, not followed)
        if str(d) in state.files:
            state.files.remove(str(d))
    labmod.save_state(state)
    return stopped


def status(state: labmod.LabState) -> dict:
    alive = {d["name"]: labprocs.running(d) is not None for d in state.daemons if _is_ours(d)}
    info = {"daemons": alive, "conf": str(conf_path()), "nodes": {}, "queue": ""}
    if alive.get("slurmctld"):
        info["nodes"] = node_states(state)
        q = client(state, ["squeue", "-h", "-o", "%i %j %T %M %D %R"], timeout=15)
        info["queue"] = q.stdout.strip() if q.returncode == 0 else q.stderr.strip()
    return info


def require_up(state: labmod.LabState) -> None:
    if not is_up(state):
        raise BadInput("the lab's Slurm is not up: start it with 'commbench lab slurm up'")
    dead = [d["name"] for d in state.daemons if _is_ours(d) and labprocs.running(d) is None]
    if dead:
        raise RuntimeFailure(f"the lab's {', '.join(dead)} stopped: see {slurm_dir()} and {munge_dir()}; "
                             "restart with 'commbench lab slurm down' and 'commbench lab slurm up'")


def job_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """What sbatch exports to the job: the caller's environment, the lab's interface for gloo/NCCL."""
    return clean_env({"GLOO_SOCKET_IFNAME": labmod.NS_IFACE, "NCCL_SOCKET_IFNAME": labmod.NS_IFACE, **(extra or {})})


def submit(state: labmod.LabState, script: str, sbatch_args: list[str]) -> int:
    require_up(state)
    if script.startswith("-"):
        raise BadInput(f"{script} comes before the script: sbatch options go after it, e.g. "
                       "commbench lab slurm submit slurm/commbench.sbatch --nodes 2")
    if not check_path(script, "lab slurm submit: the batch script").is_file:  # never raises
        raise BadInput(f"no batch script {script!r}: e.g. commbench lab slurm submit slurm/commbench.sbatch")
    res = client(state, ["sbatch", "--parsable", *sbatch_args, str(Path(script).resolve())], env=job_env(), timeout=60)
    if res.returncode != 0:
        lines = [line.strip().removeprefix("sbatch: error: ") for line in (res.stderr or res.stdout).splitlines()]
        msg = "; ".join(line for line in lines if line)
        raise BadInput(f"sbatch refused the job: {msg}")
    job = res.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise RuntimeFailure(f"sbatch gave no job id: {res.stdout.strip()!r}")
    return int(job)


def job_info(state: labmod.LabState, job: int) -> dict[str, str]:
    res = client(state, ["scontrol", "show", "job", "-o", str(job)], timeout=15)
    if res.returncode != 0:
        return {}
    # values may contain spaces only in fields we do not read; split on ' Key=' boundaries
    return dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", res.stdout.strip()))


def wait(state: labmod.LabState, job: int, timeout: float | None) -> dict[str, str]:
    """Poll until the job ends; cancel it and fail after `timeout` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    info: dict[str, str] = {}
    while True:
        info = job_info(state, job) or info
        if info.get("JobState") in _TERMINAL:
            return info
        if deadline is not None and time.monotonic() > deadline:
            client(state, ["scancel", str(job)], timeout=15)
            raise RuntimeFailure(f"job {job} did not finish within {timeout:g} s (state "
                                 f"{info.get('JobState', 'unknown')}): cancelled it; "
                                 f"output in {info.get('StdOut', '?')}")
        time.sleep(1.0)
