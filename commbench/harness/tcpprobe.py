"""The one TCP probe: what a host says to a connection, read by arrival (an absent rank's host, on
rank 0's store port) and by the control plane (a silent rank's probe port, a peer's rail), and the
probe port every rank listens on.

A host's kernel answers a connection while the host is up, whether or not anything listens there
and also while the process behind the port is stopped: 'open' (something listens), 'refused' (the
host is up, nothing listens); anything else means the host or the path to it did not answer.
"""

from __future__ import annotations

import errno
import socket
import threading

def probe(addr: str, port: int, timeout: float) -> str:
    """What a host says to a TCP connection: 'open', 'refused' (the host is up, nothing listens
    there), 'no route' (the kernel knows no way there, or the host does not answer ARP), 'no
    answer' (nothing came back in time) or 'unknown host' (the name does not resolve)."""
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "no answer"
    except socket.gaierror:
        return "unknown host"
    except OSError as exc:
        return "no route" if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH) else "no answer"


def host_answers(said: str) -> bool:
    """Whether a probe's answer came from the host itself (it is up and the path to it works)."""
    return said in ("open", "refused")


def probe_listener() -> socket.socket:
    """A listening socket only probes connect to: the kernel completes their connections while the
    host is up, also while the process is stopped; a thread closes them while it runs. Reads of the
    mailbox cannot fill its backlog."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("0.0.0.0", 0))
    sock.listen(64)

    def drain() -> None:
        while True:
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                return

    threading.Thread(target=drain, name="commbench-probe", daemon=True).start()
    return sock
