"""Metrics that cannot be poisoned (issue #58, Build 4): label values from a hostile results file
reach the .prom text with no control or bidi character; a family holds at most MAX_SERIES series,
the rest counted and said once; a wire delta of inf or 1e400 is skipped; many replay traces stay
cheap; every bad --push URL is one line (exit 2); credentials go as basic auth and are never
printed; a gateway that drips its answer ends the push within its bound."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import unicodedata
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest

from commbench.analysis.export import metrics, pushgateway
from commbench.analysis.pairs import pairsmetrics
from commbench.analysis.points.section import MAX_SERIES
from commbench.analysis.replay import replaymetrics
from commbench.core import wire
from commbench.core.errors import RuntimeFailure

from unit.synthetic import write
from unit.test_metrics import night, of, pairs_night, samples, trouble_rows
from unit.test_replay_views import FAST, replay_rows

HOSTILE = "a\x00b\x1bc\x07d\u2028e\u0085f\u202eg\u2066h\u200ei\u061cj\u2029k"
BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}


def unsafe(text: str) -> set[str]:
    """The control (Cc, U+2028/2029) and bidi characters of a text, outside the line ends of the format."""
    return {ch for ch in text if (unicodedata.category(ch) == "Cc" and ch != "\n") or ch in "\u2028\u2029"
            or ch in BIDI}


def test_hostile_label_values_reach_the_text_replaced():
    rows = [{**r, "iface": HOSTILE, "dtype": "f\x1b[31m32", "settings": "X=\u202e1", "commbench_version": "1\x00"}
            for r in night(1)]
    text = metrics.collect(rows).text()
    assert not unsafe(text.decode())  # the raw bytes: no NUL, ESC, BEL, line or paragraph break, bidi control
    found = samples(text)
    rails = {dict(ls)["rail"] for (n, ls), _ in found.items() if n == "commbench_busbw_bytes_per_second"}
    assert rails == {"a?b?c?d e f?g?h?i?j k"}  # whitespace as one space, every other one as '?'
    assert {dict(ls)["dtype"] for (n, ls), _ in found.items() if n == "commbench_busbw_bytes_per_second"} == {
        "f?[31m32"}
    [info] = [dict(ls) for (n, ls), _ in found.items() if n == "commbench_run_info"]
    assert info["commbench_version"] == "1?"


def test_hostile_wire_keys_and_trace_names():
    entry = {"ranks": 1, "out_bytes": 1, "in_bytes": 1, "counters": {},
             "trouble": [["eth0\x1b", "rx_\u202edropped", 3, "drop\x07"]]}
    rows = [{**r, **wire.columns({"node\x0001": entry}, 1.0)} for r in night(1, sizes=(1 << 20,))]
    rows += [{**r, "trace_file": "job\u202e.trace\x1b"} for r in replay_rows({0: FAST}, spans={0: "0-3"})]
    text = metrics.collect(rows).text().decode()
    assert not unsafe(text)
    found = samples(text)
    assert of(found, "commbench_wire_trouble", host="node?01", where="eth0?", counter="rx_?dropped", kind="drop?")
    assert of(found, "commbench_replay_step_seconds", trace="job?.trace?")


def test_a_family_is_capped_and_the_drop_said_once(tmp_path):
    said: list[str] = []
    hosts = {f"h{i:05d}": "PASS" for i in range(MAX_SERIES + 904)}
    path = metrics.write_metrics(None, tmp_path / "m.prom", check=hosts, command="check", warn=said.append)
    found = samples(path.read_text())
    assert len(of(found, "commbench_check_host_verdict")) == MAX_SERIES
    assert of(found, "commbench_series_dropped", family="commbench_check_host_verdict") == [904.0]
    assert len(said) == 1 and "904 series of commbench_check_host_verdict" in said[0]


def test_export_caps_5000_series_of_one_family(cli, tmp_path):
    one = night(1, sizes=(1 << 20,))[0]
    write(tmp_path / "wide.parquet", [{**one, "iface": f"eth{i}"} for i in range(5000)])
    out = tmp_path / "m.prom"
    r = cli("export", str(tmp_path / "wide.parquet"), "--openmetrics", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("\n") == 1 and "commbench: warning: metrics: 904 series" in r.stderr
    found = samples(out.read_text())
    assert len(of(found, "commbench_busbw_bytes_per_second")) == MAX_SERIES
    assert of(found, "commbench_series_dropped", family="commbench_busbw_bytes_per_second") == [904.0]


def test_pairs_links_over_the_cap_count_as_dropped(monkeypatch, tmp_path):
    write(tmp_path / "p.parquet", pairs_night(1))
    whole = samples(metrics.collect([tmp_path]).text())
    links = len(of(whole, "commbench_pairs_link_busbw_bytes_per_second"))
    assert links > 2
    monkeypatch.setattr(pairsmetrics, "MAX_LINK_SERIES", links - 1)
    m = metrics.collect([tmp_path])
    found = samples(m.text())
    assert not of(found, "commbench_pairs_link_busbw_bytes_per_second")  # all or none: a part reads as the whole
    assert of(found, "commbench_series_dropped", family="commbench_pairs_link_busbw_bytes_per_second") == [links]
    assert of(found, "commbench_pairs_host_verdict")  # the hosts stay
    assert len(m.warnings()) == 1


@pytest.mark.parametrize("delta", ["Infinity", "-Infinity", "NaN", "1e400", "1e30", "-5"])
def test_an_absurd_wire_delta_is_skipped(delta):
    doc = json.loads(trouble_rows(1, 7)[0]["wire"])
    good = doc["hosts"]["node01"]["trouble"][0]
    doc["hosts"]["node01"]["trouble"] = [good, ["eth0", "rx_crc_errors", "DELTA", "error"]]
    value = json.dumps(doc).replace('"DELTA"', delta)
    assert [t.counter for t in wire.troubles(value)] == ["rx_dropped"]
    rows = [{**r, "wire": value} for r in trouble_rows(1, 7)]
    found = samples(metrics.collect(rows).text())
    assert of(found, "commbench_wire_trouble", counter="rx_dropped") == [28.0]
    assert not of(found, "commbench_wire_trouble", counter="rx_crc_errors")


def test_many_replay_traces_stay_bounded(monkeypatch):
    one = replay_rows({0: FAST}, repetitions=1, spans={0: "0-3"})
    rows = pd.DataFrame([{**r, "trace_file": f"t{i}.trace"} for i in range(7) for r in one])
    monkeypatch.setattr(replaymetrics, "MAX_TRACES", 3)
    m = metrics.collect(rows)
    found = samples(m.text())
    assert {dict(ls)["trace"] for (n, ls), _ in found.items() if n == "commbench_replay_step_seconds"} == {
        "t0.trace", "t1.trace", "t2.trace"}
    assert of(found, "commbench_series_dropped", family="commbench_replay_step_seconds") == [4.0]
    assert of(found, "commbench_series_dropped", family="commbench_replay_collective_seconds") == [8.0]  # 2 each


BAD_URLS = [
    ("http://host:9091\n", "a space or a control character"),
    ("http://host :9091", "a space or a control character"),
    ("http://ho\x1b[31mst:9091", "a space or a control character"),
    ("http://host:port", "a port that is not 1 to 65535"),
    ("http://host:99999", "a port that is not 1 to 65535"),
    ("http://[::1:9091", "a broken IPv6 address"),
    ("http://[zz::1]:9091", "a broken IPv6 address"),
    ("javascript:alert(1)", "the scheme 'javascript' is not http or https"),
    ("ftp://example.com", "not an http(s) URL"),
    ("http://", "names no host"),
    ("http://host:9091/?x=1", "a query or a fragment"),
    ("http://user:s3cret@host:port", "a port that is not 1 to 65535"),
    ("http://user:s3cret/x@host", "a port that is not 1 to 65535"),  # the password taken for a port
    ("", "is empty"),
]


@pytest.mark.parametrize("url, words", BAD_URLS)
def test_a_bad_push_url_is_one_line(cli, tmp_path, url, words):
    (tmp_path / "missing").mkdir()  # an empty folder: had anything been read, the refusal would say "no rows"
    r = cli("export", str(tmp_path / "missing"), "--push", url)
    assert r.returncode == 2, r.stderr
    assert words in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not unsafe(r.stderr.rstrip("\n")) and "s3cret" not in r.stderr


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []
    status = 200

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def gateway():
    """A local HTTP server answering PUT with its handler's status, recording path and Authorization."""
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()
    _Recorder.status = 200


def test_credentials_go_as_basic_auth_and_are_never_printed(cli, tmp_path, gateway):
    write(tmp_path / "a.parquet", night(1))
    port = gateway.server_address[1]
    r = cli("export", str(tmp_path / "a.parquet"), "--push", f"http://nightly:s3cr%40t@127.0.0.1:{port}", "--job", "j")
    assert r.returncode == 0, r.stderr
    [(path, auth)] = _Recorder.seen
    assert path == "/metrics/job/j"
    assert auth == "Basic " + base64.b64encode(b"nightly:s3cr@t").decode()
    assert "s3cr" not in r.stdout + r.stderr and f"http://nightly:***@127.0.0.1:{port}" in r.stdout
    _Recorder.status = 401
    r = cli("export", str(tmp_path / "a.parquet"), "--push", f"http://nightly:s3cret@127.0.0.1:{port}")
    assert r.returncode == 3 and "refused the metrics (HTTP 401" in r.stderr and r.stderr.count("\n") == 1
    assert "s3cret" not in r.stderr and "nightly:***@" in r.stderr


def test_a_url_without_credentials_sends_none(tmp_path, gateway):
    metrics.push(metrics.collect(night(1)), f"127.0.0.1:{gateway.server_address[1]}")
    assert [auth for _, auth in _Recorder.seen] == [None]


def test_redacted_hides_only_the_password():
    assert pushgateway.redacted("http://u:pw@h:1/p") == "http://u:***@h:1/p"
    assert pushgateway.redacted("u:pw@h:1") == "u:***@h:1"
    assert pushgateway.redacted("http://u@h:1") == "http://u@h:1"
    assert pushgateway.redacted("http://h:1") == "http://h:1"


@pytest.fixture
def dripping():
    """A server on 127.0.0.1 that reads the request, then answers one byte every 0.5 s, forever."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1 << 20)
            for byte in b"HTTP/1.1 200 OK\r\n" * 100:
                if stop.wait(0.5):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()


def test_a_dripping_gateway_ends_the_push_in_time(dripping):
    t0 = time.monotonic()
    with pytest.raises(RuntimeFailure) as err:
        metrics.push(metrics.collect(night(1)), f"http://u:pw@127.0.0.1:{dripping}", timeout=1.0)
    assert time.monotonic() - t0 < 3.0  # each byte within urllib's per-read timeout: only the total bound ends it
    message = str(err.value)
    assert "did not finish the push within 1 s" in message and "\n" not in message and "pw" not in message


def test_export_to_a_dripping_gateway_ends_in_one_line(cli, tmp_path, dripping, monkeypatch):
    monkeypatch.setattr(pushgateway, "PUSH_TIMEOUT_S", 1.0)  # the command's own bound (5 s), shortened
    write(tmp_path / "a.parquet", night(1))
    t0 = time.monotonic()
    r = cli("export", str(tmp_path / "a.parquet"), "--push", f"http://127.0.0.1:{dripping}")
    assert time.monotonic() - t0 < 4.0
    assert r.returncode == 3 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "did not finish the push within 1 s" in r.stderr


def test_write_metrics_says_the_drop_on_stderr_once(tmp_path, capsys):
    hosts = {f"h{i:05d}": "FAIL" for i in range(MAX_SERIES + 1)}
    metrics.write_metrics(None, tmp_path / "m.prom", check=hosts, command="check")  # what check --metrics calls
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("commbench: warning: metrics: 1 series of commbench_check_host")
