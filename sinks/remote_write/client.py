"""One connection to the remote-write receiver: POST a compressed WriteRequest, read the answer.

The standard library's ``http.client``, one keep-alive connection per shard (a shard's
requests follow each other on it), opened again after any failure. An answer is
:class:`Answer`: the status, the ``Retry-After`` in seconds (a number or an HTTP date; None
when absent or unreadable) and the first :data:`MAX_TEXT` bytes of the body (the receiver's
error text, which the caller shows sanitised). A connection that fails (refused, reset, a
timeout, a malformed answer) raises :class:`SendError`.
"""

from __future__ import annotations

import email.utils
import http.client
import ssl
import time
import urllib.parse
from typing import NamedTuple

from sinks.remote_write.wire import HEADERS

#: bytes of an answer's body kept (the rest is read and thrown away)
MAX_TEXT = 512
#: an answer's body read at most (a receiver that answers a gigabyte is not waited for)
MAX_BODY = 1024 * 1024


class SendError(Exception):
    """The request did not get an answer."""


class Answer(NamedTuple):
    status: int
    retry_after: float | None
    text: bytes


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` asks for (delay-seconds or an HTTP-date), None if none."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now) if when is not None else None


class Client:
    def __init__(self, url: str, headers: dict[str, str], timeout: float,
                 ca_file: str = "", user_agent: str = "fleetwatch-remote-write"):
        parts = urllib.parse.urlsplit(url)
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.timeout = timeout
        self.headers = {**headers, **HEADERS, "User-Agent": user_agent}
        self.context = ssl.create_default_context(cafile=ca_file or None) \
            if self.https else None
        self.conn: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self.conn is None:
            if self.https:
                self.conn = http.client.HTTPSConnection(self.host, self.port,
                                                        timeout=self.timeout,
                                                        context=self.context)
            else:
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=self.timeout)
        return self.conn

    def post(self, body: bytes) -> Answer:
        conn = self._connect()
        try:
            conn.request("POST", self.path, body, self.headers)
            resp = conn.getresponse()
            text = resp.read(MAX_TEXT)
            left = MAX_BODY
            while left > 0 and resp.read(min(left, 65536)):
                left -= 65536
            answer = Answer(resp.status, retry_after(resp.getheader("Retry-After"),
                                                     time.time()), text)
            if resp.will_close or left <= 0:
                self.close()
            return answer
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise SendError(f"{type(e).__name__}: {e}") from None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
