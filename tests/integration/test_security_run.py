"""Nothing leaks from a real run: secrets planted in the environment of a 2-rank sweep appear in no
results file (raw bytes or decoded cells), plot, report (HTML, Markdown) or comparison, nor on any
output; a hostile label stays text in the HTML; the results file is not world-writable even under
umask 000; and no listening socket of the run outlives it.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import stat
import subprocess
import sys
import time

import psutil
import pyarrow.parquet as pq
import pytest

from commbench.cli import app as cli

from test_sweep_ranks import clean_env, kill_quietly, live_session_processes

pytestmark = pytest.mark.integration

EVIL = "<script>alert(1)</script>"
TOKEN = secrets.token_hex(8)
SECRETS = {
    "AWS_SECRET_ACCESS_KEY": f"awsSECRET{TOKEN}",
    "HF_TOKEN": f"hf_SECRET{TOKEN}",
    "DB_PASSWORD": f"dbSECRET{TOKEN}",
    "NCCL_IB_SECRET_TOKEN": f"ncclSECRET{TOKEN}",  # under an allowed prefix: still a secret
}
PROBE = ("NCCL_DEBUG_SUBSYS", f"kept{TOKEN}")  # a known NCCL setting: its value must be recorded


def listening(pids: set[int]) -> set[int]:
    """Ports in LISTEN state owned by these processes."""
    return {c.laddr.port for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.pid in pids}


def all_listening() -> dict[int, int | None]:
    return {c.laddr.port: c.pid for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory):
    """A real 2-rank sweep with the secrets in its environment, run under umask 000; the ports its
    processes listened on while it ran."""
    d = tmp_path_factory.mktemp("secrets")
    out = d / "run.parquet"
    stdout, stderr = d / "sweep.out", d / "sweep.err"
    with open(stdout, "w") as so, open(stderr, "w") as se:
        proc = subprocess.Popen([sys.executable, "-m", "commbench", "sweep", "--sizes", "1K,64K", "-R", "2",
                                 "--time-budget", "0.5", "--nproc", "2", "--label", EVIL, "--out", str(out)],
                                stdout=so, stderr=se, env=clean_env(**SECRETS, **dict([PROBE])),
                                start_new_session=True, umask=0)
    ports: set[int] = set()
    pids: set[int] = set()
    try:
        while proc.poll() is None:
            now = {p.pid for p in live_session_processes(proc.pid)}
            pids |= now
            ports |= listening(now)
            time.sleep(0.1)
        assert proc.wait(120) == 0, stderr.read_text()
    finally:
        kill_quietly(proc)
    return d, out, ports, pids, proc.pid


@pytest.fixture(scope="module")
def outputs(secret_run):
    """Every analysis command on the run's results, in-process (capsys is per test: stdout and
    stderr are captured by hand), with the secrets in this process's environment too."""
    d, out, *_ = secret_run
    texts = {"sweep stdout": (d / "sweep.out").read_text(), "sweep stderr": (d / "sweep.err").read_text()}
    mp = pytest.MonkeyPatch()
    for name, value in SECRETS.items():
        mp.setenv(name, value)
    commands = {
        "plot": ["plot", str(out), "--out", str(d / "plot.png")],
        "report html": ["report", str(out), "--out", str(d / "report.html")],
        "report markdown": ["report", str(out), "--format", "markdown", "--out", str(d / "report.md")],
        "compare json": ["compare", str(out), str(out), "--format", "json"],
    }
    codes = {}
    try:
        for name, argv in commands.items():
            so, se = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
                try:
                    cli.main(argv)
                except SystemExit as exc:
                    codes[name] = exc.code
            texts[f"{name} stdout"], texts[f"{name} stderr"] = so.getvalue(), se.getvalue()
    finally:
        mp.undo()
    return texts, codes


def test_the_commands_ran(secret_run, outputs):
    d, out, *_ = secret_run
    texts, codes = outputs
    assert codes["plot"] == 0 and codes["report html"] == 0 and codes["report markdown"] == 0, (codes, texts)
    assert codes["compare json"] in (0, 3), texts["compare json stderr"]  # a run against itself: no regression
    assert json.loads(texts["compare json stdout"])["verdict"]
    for name in ("plot.png", "report.html", "report.md", "run.parquet"):
        assert (d / name).stat().st_size > 0, name


@pytest.mark.failure(row="secrets-environment-aws-secret-access")
def test_planted_secrets_appear_in_no_file_and_no_output(secret_run, outputs):
    d, out, *_ = secret_run
    texts, _ = outputs
    files = [p for p in d.rglob("*") if p.is_file()]
    assert {"run.parquet", "plot.png", "report.html", "report.md"} <= {p.name for p in files}
    leaks = []
    for path in files:
        blob = path.read_bytes()
        leaks += [f"{path.name}: {name}" for name, value in SECRETS.items() if value.encode() in blob]
    # parquet pages are compressed: look at every decoded cell as well
    cells = json.dumps(pq.read_table(out).to_pylist(), default=str)
    leaks += [f"run.parquet cells: {name}" for name, value in SECRETS.items() if value in cells]
    leaks += [f"{where}: {name}" for where, text in texts.items() for name, value in SECRETS.items() if value in text]
    assert leaks == []
    # and the names themselves are not in the stored environment
    env = json.loads(pq.read_table(out).column("env")[0].as_py())
    assert not set(SECRETS) & set(env), env
    # the snapshot itself works: an allow-listed variable of the run is there
    assert env.get(PROBE[0]) == PROBE[1]


@pytest.mark.failure(
    row="hostile-label-environment-value-results",
    section="Security",
    failure="a hostile label or environment value in a results file (`<script>alert(1)</script>`)",
    does="escaped in HTML (and Markdown): stays text, the page has no scripts and no external URLs",
)
def test_a_script_label_stays_text_in_the_reports(secret_run, outputs):  # outputs: the reports written
    d, out, *_ = secret_run
    assert set(pq.read_table(out).column("label").to_pylist()) == {EVIL}
    page = (d / "report.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page.lower()
    md = (d / "report.md").read_text()
    assert "&lt;script&gt;" in md and "<script" not in md.lower()


@pytest.mark.failure(row="world-writable-results")
def test_the_results_file_is_not_world_writable_even_under_umask_000(secret_run):
    _, out, *_ = secret_run
    mode = stat.S_IMODE(out.stat().st_mode)
    assert mode & (stat.S_IWOTH | stat.S_IWGRP) == 0, oct(mode)
    assert mode == 0o644, oct(mode)


@pytest.mark.failure(
    row="listening-socket-left-after-run",
    section="Security",
    failure="a listening socket left after a run",
    does="the rendezvous store and gloo's listeners end with the run: none of the ports the run listened on, nor "
         "any process of the run, is left",
)
def test_no_listening_socket_outlives_the_run(secret_run):
    _, _, ports, pids, sid = secret_run
    assert ports, "the check saw no listening socket during the run (rendezvous store, gloo pairs)"
    assert live_session_processes(sid) == []
    # neither the ports it listened on nor any of its processes (supervisor and ranks) listen now
    left = {port: pid for port, pid in all_listening().items() if port in ports or pid in pids}
    assert left == {}, left
