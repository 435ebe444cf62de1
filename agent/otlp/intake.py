"""The OTLP/HTTP metrics intake's logic (SPEC.md 4.4.1): a request body in, an answer out,
the series kept for the agent's next STATS. No sockets: :mod:`agent.otlp.listener` carries
the requests, the agent's loop sends what :meth:`OtlpIntake.messages` gives.

A body is decoded by its ``Content-Type`` (``application/x-protobuf``, or ``application/json``
with OTLP's JSON rules: Google's ``json_format`` into the same message, unknown fields
ignored), after its ``Content-Encoding`` (``gzip``, ``deflate``) is undone within
``otlp.max_body``. The answers are OTLP/HTTP's, in the request's encoding:

- 200 with an ``ExportMetricsServiceResponse``, whose ``partial_success`` says how many
  data points were refused (``rejected_data_points``) and why (``error_message``);
- 400 (a ``google.rpc.Status``) for a body that does not decode, 413 for one past
  ``max_body``, 415 for another content type or encoding;
- 503 with ``Retry-After`` while the agent holds its OTLP series (no router alive and its
  STATS queue half full: :meth:`OtlpIntake.messages`), so that the exporter keeps them.

Every refusal is counted in the agent's own STATS (:data:`COUNTERS`). The requests come on
the listener's threads and the series leave on the agent's loop: :attr:`OtlpIntake.lock`
guards the series and the counters.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import math
import threading
import time

from fleetwatch import protocol
from fleetwatch.display import escape
from fleetwatch.logs import Throttle

from agent.otlp.points import LABELS, Mapper, Point
from agent.otlp.series import FULL, Series

log = logging.getLogger(__name__)

PROTOBUF, JSON = "application/x-protobuf", "application/json"
CONTENT_TYPES = {PROTOBUF: PROTOBUF, "application/protobuf": PROTOBUF, JSON: JSON}
#: Content-Encoding -> zlib's wbits for it (None: as it is)
ENCODINGS = {"": None, "identity": None, "gzip": 31, "x-gzip": 31, "deflate": 15}
#: data points mapped, then written under the lock, at a time
BATCH = 512
#: the most a STATS body of series holds (well within any router's max_message_bytes)
CHUNK = 64 * 1024

#: The intake's counters, in the agent's STATS from zero (docs/operating/otlp.md)
COUNTERS = ("agent.otlp.requests", "agent.otlp.points", "agent.otlp.series_refused",
            "agent.otlp.labels_refused", "agent.otlp.points_invalid",
            "agent.otlp.bodies_refused", "agent.otlp.busy")
SERIES_REFUSED, LABELS_REFUSED, POINTS_INVALID = (
    "agent.otlp.series_refused", "agent.otlp.labels_refused", "agent.otlp.points_invalid")
#: google.rpc.Code for each HTTP status the intake answers with
RPC_CODES = {400: 3, 404: 5, 405: 12, 411: 3, 413: 8, 415: 3, 503: 14}


class BadBody(Exception):
    """A body that is no ExportMetricsServiceRequest; ``str()`` says why."""


class Answer:
    """An HTTP answer: status, Content-Type, body, and extra headers."""

    __slots__ = ("status", "content_type", "body", "headers")

    def __init__(self, status: int, content_type: str, body: bytes, headers=()):
        self.status, self.content_type, self.body = status, content_type, body
        self.headers = tuple(headers)


class OtlpIntake:
    """Decodes exports, keeps their series within the limits, counts, answers."""

    def __init__(self, cfg, clock=time.monotonic):
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
        self.pb = metrics_service_pb2
        self.cfg, self.clock = cfg, clock
        self.mapper = Mapper(cfg.max_labels, cfg.drop_attributes)
        self.series = Series(cfg.max_series, clock=clock)
        self.lock = threading.Lock()
        self.counters = collections.Counter(dict.fromkeys(COUNTERS, 0))
        #: set by the agent's loop: the series are held, exports are answered 503
        self.busy = False
        self.next_send = clock() + cfg.interval
        self.throttle = Throttle(log, 10.0, clock)

    # ---------------------------------------------------------------- requests
    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counters[name] += n

    def refuse(self, status: int, content_type: str, text: str, headers=()) -> Answer:
        """An error answer (a ``google.rpc.Status``), counted as a refused body unless it
        is a 503 (counted ``busy``)."""
        self.count("agent.otlp.busy" if status == 503 else "agent.otlp.bodies_refused")
        text = escape(text)             # the sender's words: its control characters shown
        self.throttle.warning(f"http.{status}", "OTLP: answered %d: %s", status, text)
        code = RPC_CODES.get(status, 2)
        if content_type == PROTOBUF:
            return Answer(status, PROTOBUF, rpc_status(code, text), headers)
        return Answer(status, JSON, json.dumps({"code": code, "message": text}).encode(),
                      headers)

    def export(self, content_type: str, encoding: str, body: bytes) -> Answer:
        """Answer one ``POST /v1/metrics`` whose headers said ``content_type`` and
        ``encoding`` (as sent: case and parameters are dealt with here)."""
        kind = CONTENT_TYPES.get(content_type.split(";")[0].strip().lower())
        encoding = encoding.strip().lower()
        if kind is None or encoding not in ENCODINGS:
            what = f"Content-Encoding {encoding[:40]!r}" if kind else \
                f"Content-Type {content_type[:60]!r}"
            return self.refuse(415, kind or JSON, f"unsupported {what}: OTLP/HTTP metrics "
                                                  f"as {PROTOBUF} or {JSON}, plain, gzip or "
                                                  f"deflate")
        if self.busy:
            wait = max(1, math.ceil(self.cfg.interval))
            return self.refuse(503, kind, "the agent holds its OTLP series: no router is "
                                          "alive and its STATS queue is half full",
                               headers=[("Retry-After", str(wait))])
        if ENCODINGS[encoding] is not None:
            body = inflate(body, ENCODINGS[encoding], self.cfg.max_body)
            if isinstance(body, Answer):
                return self.refuse(body.status, kind, body.body.decode())
        try:
            request = self.decode(kind, body)
        except BadBody as e:
            return self.refuse(400, kind, f"the body is not an ExportMetricsServiceRequest "
                                          f"in {kind}: {e}")
        return self.take(request, kind)

    def decode(self, kind: str, body: bytes):
        """``body`` as an ExportMetricsServiceRequest; :class:`BadBody` if it is none."""
        from google.protobuf.message import DecodeError
        request = self.pb.ExportMetricsServiceRequest()
        try:
            if kind == PROTOBUF:
                request.ParseFromString(body)
                return request
            from google.protobuf import json_format
            try:
                json_format.Parse(body, request, ignore_unknown_fields=True)
            except json_format.ParseError as e:
                raise BadBody(f"ParseError: {str(e)[:200]}") from None
        except (DecodeError, RecursionError, ValueError, TypeError) as e:
            raise BadBody(f"{type(e).__name__}: {str(e)[:200]}") from None
        return request

    def take(self, request, kind: str) -> Answer:
        """Keep the points of a decoded ``request``; the 200 answer with its partial
        success."""
        refused = collections.Counter()
        first: dict[str, str] = {}
        taken = 0
        points = self.mapper.points(request)
        # in batches: a body of 100,000 points is never held mapped whole, nor the lock for
        # all of it (the agent's loop reads the counters under it)
        while batch := list(itertools.islice(points, BATCH)):
            with self.lock:
                write = self.series.write
                for item in batch:
                    if isinstance(item, Point):
                        reason = write(item)
                        if reason is None:
                            taken += 1
                            continue
                        key = SERIES_REFUSED if reason == FULL else POINTS_INVALID
                        text = "" if reason == FULL else "a DELTA point not after the last " \
                                                         "one of its series (a resend?)"
                    else:
                        key = LABELS_REFUSED if item.why == LABELS else POINTS_INVALID
                        text = item.text
                    refused[key] += 1
                    first.setdefault(key, text)
        with self.lock:
            self.counters["agent.otlp.requests"] += 1
            self.counters["agent.otlp.points"] += taken
            self.counters.update(refused)
        rejected = sum(refused.values())
        message = ""
        if rejected:
            said = {SERIES_REFUSED: f"past otlp.max_series ({self.series.limit} series)",
                    LABELS_REFUSED: f"for their labels (the first: {first.get(LABELS_REFUSED)})",
                    POINTS_INVALID: f"invalid (the first: {first.get(POINTS_INVALID)})"}
            message = escape(f"{rejected} of {rejected + taken} data points refused: " +
                             "; ".join(f"{n} {said[key]}" for key, n in refused.items()))
            self.throttle.warning("points", "OTLP: %s", message)
        return Answer(200, kind, self.response(kind, rejected, message))

    def response(self, kind: str, rejected: int, message: str) -> bytes:
        """An ``ExportMetricsServiceResponse``: empty, or with its partial success."""
        if kind == JSON:
            if not rejected:
                return b"{}"
            # OTLP's JSON: int64 as a string
            return json.dumps({"partialSuccess": {"rejectedDataPoints": str(rejected),
                                                  "errorMessage": message}}).encode()
        out = self.pb.ExportMetricsServiceResponse()
        if rejected:
            out.partial_success.rejected_data_points = rejected
            out.partial_success.error_message = message
        return out.SerializeToString()

    # ---------------------------------------------------------------- the agent's loop
    def messages(self, uuid: str, hostname: str, wall, room: bool) -> list[protocol.Message]:
        """The STATS that carry what was written since the last call (the agent's loop, every
        ``otlp.interval``). ``room``: whether the agent's STATS queue may take them; if not,
        the series are held and exports answered 503 until it may."""
        self.busy = not room
        if not room:
            return []
        with self.lock:
            items = self.series.take()
        return stats(items, uuid, hostname, wall)

    def metrics(self) -> dict:
        """The intake's counters and ``agent.otlp.series`` (series held), for the STATS."""
        with self.lock:
            return {**self.counters, "agent.otlp.series": len(self.series)}


def stats(items: list[dict], uuid: str, hostname: str, wall,
          limit: int = CHUNK) -> list[protocol.Message]:
    """``items`` in as few STATS as keep each body within ``limit`` bytes of series."""
    out, chunk, size = [], [], 0
    for item in items:
        n = len(json.dumps(item, separators=(",", ":"))) + 1
        if chunk and size + n > limit:
            out.append(chunk)
            chunk, size = [], 0
        chunk.append(item)
        size += n
    if chunk:
        out.append(chunk)
    return [protocol.make("STATS", uuid, clock=wall, hostname=hostname, metrics={},
                          series=c, source="otlp") for c in out]


def inflate(body: bytes, wbits: int, limit: int):
    """``body`` decompressed (zlib's ``wbits``: 31 gzip, 15 zlib), or the Answer (its body
    the reason) when it is past ``limit`` bytes (413) or not whole (400)."""
    import zlib
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as e:
        return Answer(400, "", f"the body does not decompress: {e}".encode())
    if len(out) > limit or d.unconsumed_tail:
        return Answer(413, "", f"the body decompresses past otlp.max_body ({limit} "
                               f"bytes)".encode())
    if not d.eof:
        return Answer(400, "", b"the compressed body is cut short")
    return out


def rpc_status(code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` {code: 1, message: 2} in protobuf's wire format, by hand:
    googleapis-common-protos, which has the message, is no dependency of the agent's."""
    text = message.encode()
    return b"\x08" + varint(code) + b"\x12" + varint(len(text)) + text


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)
