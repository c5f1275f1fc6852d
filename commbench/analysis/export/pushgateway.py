"""`export --push URL` and its Pushgateway (docs/METRICS.md): the URL checked at the door (an http(s)
address with a host and a numeric port, no space or control character, no query or fragment), its
credentials (`http://user:password@host:9091`) sent as HTTP basic auth and shown as `***` in every
message, and the whole push bounded in time, not each read.

The push runs in a thread joined with a deadline: urllib's timeout bounds each read of the socket,
so a gateway that drips a byte a second never times out by itself.
"""

from __future__ import annotations

import ipaddress
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from commbench.core.errors import BadInput, RuntimeFailure
from commbench.core.outtext import terminal

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

PUSH_TIMEOUT_S = 5.0  # the whole push: connecting, sending and the gateway's answer
EXAMPLE = "pass the Pushgateway's address, e.g. http://host:9091"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(?!\d)")  # javascript:..., but not host:9091
_HOST = re.compile(r"^[A-Za-z0-9._~-]+$")  # a name or an IPv4 address (IPv6 in brackets apart)


@dataclass(frozen=True)
class PushTarget:
    """A checked --push URL: the address pushed to (no credentials), and the credentials apart."""

    url: str
    username: str | None
    password: str | None
    shown: str  # the URL as messages name it: the password as ***


def redacted(url: str) -> str:
    """The URL with the password of its credentials (user:password@) as ***: what a message names."""
    head, sep, rest = url.partition("://") if "://" in url else ("", "", url)
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{head}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


def check_push_url(url: str) -> PushTarget:
    """BadInput in one line for a --push value that is not an http(s) address of a host (checked
    before anything is read); the address and its credentials otherwise."""
    shown = terminal(redacted(str(url)))
    if not url:
        raise BadInput(f"--push is empty: {EXAMPLE}")
    if not url.isprintable() or any(ch.isspace() for ch in url):
        raise BadInput(f"--push {shown}: holds a space or a control character: {EXAMPLE}")
    scheme = _SCHEME.match(url)
    if "://" not in url and "@" not in url and scheme:  # user:password@host:9091 has no scheme either
        raise BadInput(f"--push {shown}: the scheme {scheme.group(1)!r} is not http or https: {EXAMPLE}")
    try:
        parsed = urlsplit(url if "://" in url else f"http://{url}")
        port = parsed.port  # a text port or one past 65535 is a ValueError
    except ValueError as exc:  # its text may quote a password taken for a port: never shown
        what = "a broken IPv6 address in brackets" if "IPv6" in str(exc) else "a port that is not 1 to 65535"
        raise BadInput(f"--push {shown}: {what}: {EXAMPLE}") from None
    if parsed.scheme.lower() not in ("http", "https"):
        raise BadInput(f"--push {shown}: not an http(s) URL: {EXAMPLE}")
    if not _is_host(parsed.hostname or "", parsed.netloc):
        raise BadInput(f"--push {shown}: names no host: {EXAMPLE}")
    if port == 0:
        raise BadInput(f"--push {shown}: a port that is not 1 to 65535: {EXAMPLE}")
    if parsed.query or parsed.fragment or url.endswith(("?", "#")):
        raise BadInput(f"--push {shown}: holds a query or a fragment (the push adds its own path): {EXAMPLE}")
    address = parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl()
    user = None if parsed.username is None else unquote(parsed.username)
    password = None if parsed.password is None else unquote(parsed.password)
    return PushTarget(address, user, password if user is not None else None, shown)


def _is_host(host: str, netloc: str) -> bool:
    if "[" in netloc.rpartition("@")[2]:  # an IPv6 literal: urlsplit checked the brackets, not the address
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return False
        return True
    return bool(host) and _HOST.match(host) is not None


def push_registry(registry: CollectorRegistry, url: str, job: str, timeout: float | None = None) -> None:
    """PUT the registry to a Pushgateway as job `job` (replacing that job's last push), with the
    URL's credentials as basic auth. A gateway that does not answer, or not within `timeout` s
    in all, or refuses, is a runtime failure in one line that never names the password."""
    target = check_push_url(url)
    timeout = PUSH_TIMEOUT_S if timeout is None else timeout  # read at the call: a test may shorten it
    failed: list[BaseException] = []
    worker = threading.Thread(target=_push, args=(registry, target, job, timeout, failed), daemon=True,
                              name="commbench-push")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():  # the thread is a daemon: it ends with the process, or when the socket does
        raise RuntimeFailure(f"the Pushgateway at {target.shown} did not finish the push within {timeout:g} s "
                             "(it answers too slowly): check the URL and the gateway")
    if failed:
        raise _failure(failed[0], target, timeout)


def _push(registry: Any, target: PushTarget, job: str, timeout: float, failed: list[BaseException]) -> None:
    from http.client import HTTPException

    from prometheus_client import push_to_gateway
    from prometheus_client.exposition import basic_auth_handler, default_handler

    def handler(url: str, method: str, timeout: float | None, headers: list, data: bytes) -> Any:
        if target.username is None:
            return default_handler(url, method, timeout, headers, data)
        return basic_auth_handler(url, method, timeout, headers, data, target.username, target.password or "")

    try:
        push_to_gateway(target.url, job=job, registry=registry, timeout=timeout, handler=handler)
    except (OSError, ValueError, HTTPException) as exc:  # back to the caller's thread, which says it in one line
        failed.append(exc)


def _failure(exc: BaseException, target: PushTarget, timeout: float) -> RuntimeFailure:
    from urllib.error import HTTPError, URLError

    if isinstance(exc, HTTPError):
        return RuntimeFailure(f"the Pushgateway at {target.shown} refused the metrics (HTTP {exc.code} "
                              f"{terminal(exc.reason)}): check the URL, the credentials and the gateway's log")
    if isinstance(exc, (URLError, OSError, ValueError)):
        reason = getattr(exc, "reason", None) or exc
        text = str(reason)
        if target.password:
            text = text.replace(target.password, "***")
        return RuntimeFailure(f"the Pushgateway at {target.shown} did not answer within {timeout:g} s "
                              f"({terminal(text)}): check the URL and that the gateway runs")
    return RuntimeFailure(f"the Pushgateway at {target.shown} gave no HTTP answer ({type(exc).__name__}): "
                          "check the URL and that it is a Pushgateway")
