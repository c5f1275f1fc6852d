"""`commbench plot` and `commbench report` on real results (a real 2-rank gloo sweep), and the
report rendered by a real browser: headless Chromium takes a screenshot and dumps the DOM it
built, so the page is checked as a reader would get it, not as a string.

Needs the Debian package `chromium`; skips with a reason without it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import LAUNCHER_VARS  # tests/helpers.py

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def clean_env() -> dict[str, str]:
    """No launcher variables (commbench spawns its own ranks), and this checkout's commbench."""
    env = {k: v for k, v in os.environ.items() if not LAUNCHER_VARS.match(k)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def commbench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True,
                          env=clean_env(), timeout=timeout, cwd=ROOT)


def sweep(out: Path, label: str) -> Path:
    proc = commbench("sweep", "--collective", "all", "--sizes", "1K,64K,1M", "--time-budget", "0.02",
                     "--repetitions", "2", "--label", label, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def real_results(tmp_path_factory) -> tuple[Path, Path]:
    """Two real runs: a baseline and the results under test."""
    tmp = tmp_path_factory.mktemp("real-results")
    return sweep(tmp / "before.parquet", "before"), sweep(tmp / "after.parquet", "after <b>&</b>")


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")


def browse(page: Path, tmp: Path, *mode: str) -> subprocess.CompletedProcess:
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp / 'chromium-profile'}", "--window-size=1280,2000", *mode, page.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_plot_command_on_real_results(real_results, tmp_path):
    before, after = real_results
    out = tmp_path / "curves.png"
    proc = commbench("plot", str(before), str(after), "--line-rate", "10Gbps", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes().startswith(PNG_MAGIC)
    from PIL import Image

    with Image.open(out) as im:
        assert im.width >= 1000 and im.height >= 800
    again = commbench("plot", str(before), str(after), "--out", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr


def test_report_renders_in_a_browser_with_figures_and_tables(real_results, tmp_path):
    from PIL import Image

    before, after = real_results
    page = tmp_path / "r.html"
    proc = commbench("report", str(after), "--baseline", str(before), "--out", str(page))
    assert proc.returncode == 0, proc.stderr
    assert page.exists()
    html_text = page.read_text()
    assert not re.search(r"https?://", html_text)
    assert "<b>&</b>" not in html_text and "&lt;b&gt;&amp;&lt;/b&gt;" in html_text

    shot = tmp_path / "shot.png"
    browse(page, tmp_path, f"--screenshot={shot}")
    with Image.open(shot) as im:
        rgb = im.convert("RGB")
        assert rgb.size == (1280, 2000)
        colours = rgb.getcolors(maxcolors=1 << 20)
        inked = sum(n for n, c in colours if min(c) < 235)  # text, lines, table rules, figure ink
        assert len(colours) > 200, "the screenshot has almost no colours: figures did not render"
        assert inked > 0.03 * rgb.width * rgb.height, "the screenshot is (nearly) blank"
        # the curves are drawn in the collectives' colours: saturated pixels exist
        saturated = sum(n for n, (r, g, b) in colours if max(r, g, b) - min(r, g, b) > 80)
        assert saturated > 2000, "no coloured curves on the page"

    dom = browse(page, tmp_path, "--dump-dom").stdout
    imgs = re.findall(r'<img[^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', dom)
    assert len(imgs) == 2  # the comparison overlay and the curves
    for section in ('id="comparison"', 'id="curves"', 'id="peaks"', 'id="runs"', 'id="points"'):
        assert section in dom
    assert dom.count("<table") >= 5
    for text in ("peak busbw (GB/s)", "Holm p", "BH q", "all_reduce", "reduce_scatter", "sendrecv", "gloo",
                 "loopback", "65536", "after &lt;b&gt;&amp;&lt;/b&gt;"):
        assert text in dom, text
    assert "<script" not in dom


def test_a_long_run_fact_wraps_inside_the_page(tmp_path):
    """A run fact of a few hundred characters (a label here; a late-arrivals finding, a host list)
    wraps in its cell: the page gets no horizontal scroll bar."""
    label = "after the leaf switch firmware upgrade on rack 12, MTU 9000 on every port, " * 4
    results = commbench("sweep", "--sizes", "1K", "--time-budget", "0.01", "--label", label.strip(),
                        "--out", str(tmp_path / "long.parquet"))
    assert results.returncode == 0, results.stderr[-2000:]
    page = tmp_path / "long.html"
    proc = commbench("report", str(tmp_path / "long.parquet"), "--out", str(page))
    assert proc.returncode == 0, proc.stderr
    # the report carries no script: a copy gets one that writes the page's widths into the DOM
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace(
        "</body>", '<script>document.body.dataset.widths = document.documentElement.scrollWidth + "/" + '
                   "document.documentElement.clientWidth</script></body>"))
    dom = browse(probe, tmp_path, "--dump-dom").stdout
    scroll, client = map(int, re.search(r'data-widths="(\d+)/(\d+)"', dom).groups())
    assert "rack 12, MTU 9000" in dom
    assert scroll <= client, f"the page is {scroll} px wide in a {client} px window: a run fact does not wrap"


def test_markdown_report_on_real_results(real_results, tmp_path):
    before, after = real_results
    out = tmp_path / "ticket.md"
    proc = commbench("report", str(after), "--baseline", str(before), "--format", "markdown", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "](ticket.png)" in text and "](ticket-comparison.png)" in text
    assert (tmp_path / "ticket.png").read_bytes().startswith(PNG_MAGIC)
    assert (tmp_path / "ticket-comparison.png").read_bytes().startswith(PNG_MAGIC)
    assert re.search(r"^\| all_reduce \| float32 \| in-place \|", text, re.MULTILINE)
