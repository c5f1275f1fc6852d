"""A rank's mailbox on the control plane: its keys served read-only over HTTP (the standard
library's, on a thread of its own, so it answers while the main thread waits inside a collective),
and one bounded read of another rank's (harness/control.py says what the keys are for).
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Mailbox(ThreadingHTTPServer):
    """This rank's keys, served read-only: GET /KEY -> the value (404 when absent), GET / -> all."""

    daemon_threads = True
    request_queue_size = 128  # a stopped rank's backlog fills with its peers' unanswered reads

    def __init__(self) -> None:
        super().__init__(("0.0.0.0", 0), _Reader)
        self.keys: dict[str, str] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2}, name="commbench-mailbox",
                         daemon=True).start()

    def put(self, key: str, value: str) -> None:
        with self.lock:
            self.keys[key] = value

    def get(self, key: str = "") -> str | None:
        """`key`'s value (all keys as JSON with key ""); None when absent."""
        with self.lock:
            return json.dumps(self.keys) if not key else self.keys.get(key)

    def handle_error(self, request, client_address) -> None:
        """A reader that gave up before its answer came (this rank was stopped while peers read it)
        leaves a broken pipe: normal here, and never a traceback on the user's stderr."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            print(f"commbench: control plane: a read from {client_address[0]} failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)


class _Reader(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        box: Mailbox = self.server  # type: ignore[assignment]
        body = box.get(self.path.lstrip("/"))
        if body is None:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # requests are the control plane's own: not for stderr
        return


def read_box(addr: str, port: int, key: str, timeout: float) -> str | None:
    """`key` from the mailbox at addr:port (all its keys as JSON with key ""); None when absent, or
    when it does not answer within `timeout`."""
    conn = http.client.HTTPConnection(addr, port, timeout=timeout)
    try:
        conn.request("GET", "/" + key)
        answer = conn.getresponse()
        body = answer.read().decode()
        return body if answer.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
