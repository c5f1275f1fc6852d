"""A Python launcher that never imports torch (`commbench lab run` under `commbench capture`) runs
the capture's shim too: at its exit it must write nothing and say nothing. Importing torch there,
at interpreter shutdown, printed a traceback ("can't register atexit after shutdown")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_launcher_without_torch_exits_quietly_and_writes_no_part(tmp_path):
    parts = tmp_path / "job.trace.parts"
    code = ("import sys; from commbench.integrations import capture; capture.autostart(sys.argv[1]); "
            "assert 'torch' not in sys.modules, 'the shim imported torch'")
    done = subprocess.run([sys.executable, "-c", code, str(parts)], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert not parts.exists()
