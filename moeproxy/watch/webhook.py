"""The webhook: POSTs each alert's JSON to a URL from one background thread, and never says the URL.

A webhook URL is often a secret (a token in its path or query, ``user:password@``). It is printed
only as ``redact_url(url)``: ``scheme://host[:port]/…``, never with its credentials, path or query;
a failure is named by its kind (refused, timed out, an HTTP status), never by an exception text
that could quote the URL. Credentials in the URL are sent as HTTP basic authentication, not as part
of the address.

What the receiver can do to the watcher is bounded: a redirect is reported and not followed (a 3xx
to another host, or to a cloud metadata address, is never requested), at most ``MAX_RESPONSE``
bytes of an answer are read, and each try ends after ``timeout`` seconds of silence and at most
``2 * timeout`` seconds in all. A 3xx or 4xx answer is not tried again (retrying cannot change it);
a refused connection, a timeout or a 5xx is, ``retries`` more times, 1 s, 2 s, 4 s ... apart.

Lifecycle: ``send`` queues an alert and returns at once; ``close`` lets the queued ones go out,
waiting at most a given time, and gives up on one waiting to be tried again.
"""

from __future__ import annotations

import base64
import json
import queue
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

MAX_RESPONSE = 64 << 10  # bytes of a webhook's answer read at most


def redact_url(url: str) -> str:
    """``scheme://host[:port]/…``: what may be printed of a URL (no credentials, path or query)."""
    try:
        parts = urllib.parse.urlsplit(str(url))
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # a port that is not a number, brackets that do not close
        return "<an invalid URL>"
    host = "".join(ch if ch.isprintable() and ch not in "/?#@" else "?" for ch in host)[:253]
    if ":" in host:
        host = f"[{host}]"
    scheme = parts.scheme if parts.scheme.isalnum() else "?"
    tail = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else "/"
    return f"{scheme}://{host}{'' if port is None else f':{port}'}{tail}"


def _split_credentials(url: str) -> tuple[str, dict]:
    """The URL without ``user:password@`` and the basic-authentication header that carries them."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, {}
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), {"Authorization": f"Basic {token}"}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102 - urllib's hook
        return None  # urllib then raises HTTPError with the 3xx: reported, not followed


class _Undelivered(Exception):
    """A try that failed; ``final`` when trying again cannot help."""

    def __init__(self, why: str, final: bool = False) -> None:
        super().__init__(why)
        self.final = final


class WebhookSender:
    """POSTs alerts, in order, from one daemon thread (see the module docstring)."""

    def __init__(self, url: str, timeout: float, retries: int, err) -> None:
        self.shown = redact_url(url)
        self.timeout, self.retries, self.err = timeout, retries, err
        try:
            self._url, self._headers = _split_credentials(url)
        except ValueError:
            self._url, self._headers = url, {}
        self._opener = urllib.request.build_opener(_NoRedirect)
        self.queue: queue.Queue = queue.Queue()
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._run, name="moeproxy-webhook", daemon=True)
        self.thread.start()

    def send(self, alert: dict) -> None:
        self.queue.put(alert)

    def close(self, wait: float) -> None:
        """Stop after the queued alerts went out, waiting at most ``wait`` seconds; an alert
        waiting to be tried again is given up (and named) rather than waited for."""
        self.closing.set()
        self.queue.put(None)
        self.thread.join(wait)

    def post(self, body: bytes) -> int:
        """One try: the answer's status; ``_Undelivered`` saying why not."""
        headers = {"Content-Type": "application/json", **self._headers}
        try:
            request = urllib.request.Request(self._url, body, headers, method="POST")
        except ValueError:
            raise _Undelivered("not a usable URL", final=True) from None
        deadline = time.monotonic() + 2 * self.timeout
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                read = 0
                while read < MAX_RESPONSE and time.monotonic() < deadline:
                    data = response.read1(min(16 << 10, MAX_RESPONSE - read))
                    if not data:
                        break
                    read += len(data)
                return response.status
        except urllib.error.HTTPError as exc:
            exc.close()
            if 300 <= exc.code < 400:
                raise _Undelivered(f"answered {exc.code} (a redirect; redirects are not followed)", final=True) from None
            raise _Undelivered(f"answered {exc.code}", final=exc.code < 500) from None
        except urllib.error.URLError as exc:
            raise _Undelivered(_reason(exc.reason)) from None
        except ValueError:
            raise _Undelivered("not a usable URL", final=True) from None
        except (OSError, EOFError) as exc:  # a connection reset mid-answer, a timeout while reading
            raise _Undelivered(_reason(exc)) from None
        except Exception as exc:  # noqa: BLE001 - http.client's own errors (a malformed answer)
            raise _Undelivered(f"a malformed answer ({type(exc).__name__})") from None

    def _run(self) -> None:
        while (alert := self.queue.get()) is not None:
            body = json.dumps(alert, allow_nan=False, default=str).encode()
            for attempt in range(self.retries + 1):
                try:
                    self.post(body)
                    break
                except _Undelivered as exc:
                    if exc.final or attempt == self.retries or self.closing.wait(2 ** attempt):
                        tries = f"{attempt + 1} tr{'y' if attempt == 0 else 'ies'}"
                        print(f"moeproxy watch: webhook {self.shown}: alert for run {alert['run']!r} not delivered "
                              f"after {tries} ({exc})", file=self.err, flush=True)
                        break


def _reason(reason) -> str:
    """Why a connection failed, without the exception's text (which may quote the URL)."""
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    if isinstance(reason, OSError):
        return type(reason).__name__
    return "connection failed"
