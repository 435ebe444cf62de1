"""Garbage for a router's sockets: hypothesis strategies of frames that are no valid
message (wrong signatures, types, bodies, frame counts, a relayed or tail message on the
wrong socket, an oversized body), and raw bytes for a TCP connection (no ZMTP at all)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from fleetwatch import protocol
from fleetwatch.protocol import SIGNATURE

SIGNATURES = st.sampled_from([SIGNATURE, b"FWP\x02", b"FWP\x00", b"FWQ\x01", b"", b"FWP\x01\x00"])
TYPES = st.sampled_from(sorted(protocol.TYPES) + ["", "notify", "HELLO\x00", "\xff", "NOTIFY/",
                                                  "NOTIFY/x/router-1", "STATS/router-1/router-1",
                                                  "/", "HELLO/a/b"]).map(
    lambda t: t.encode("latin-1"))
BODIES = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"", b"{", b"[]", b"null", b'{"msg_id": 1}', b"NaN", b'"x"', b"{}" * 1000,
                     b'{"msg_id":"m","uuid":"u","ts":NaN}', b"[" * 5000, b"\xff\xfe",
                     b'{"msg_id":"m","uuid":"u","ts":1,"hostname":"h","heartbeat":-1}']),
    st.dictionaries(st.sampled_from(["msg_id", "uuid", "ts", "hostname", "heartbeat",
                                     "severity", "text", "msg_ids", "metrics"]),
                    st.one_of(st.none(), st.integers(), st.floats(allow_nan=False),
                              st.text(max_size=20), st.lists(st.integers(), max_size=3)))
    .map(lambda d: json.dumps(d).encode()),
)
HUGE = b"x" * (256 * 1024 + 1)
GARBAGE = st.one_of(
    st.lists(st.binary(max_size=64), min_size=1, max_size=8),
    st.tuples(SIGNATURES, TYPES, BODIES).map(list),
    st.tuples(SIGNATURES, TYPES, st.binary(max_size=70), BODIES).map(list),
    st.tuples(SIGNATURES, TYPES, BODIES, BODIES, st.binary()).map(list),
    # a relayed or tail message sent to the agents or control socket
    st.tuples(SIGNATURES, st.sampled_from([b"NOTIFY/a/router-1", b"NOTIFY//", b"x/y/z"]),
              BODIES).map(list),
    st.tuples(st.sampled_from([b"NOTIFY/a/router-1", b"NOTIFY/"]), SIGNATURES, BODIES).map(list),
    st.just([SIGNATURE, b"NOTIFY", HUGE]),
    st.just([SIGNATURE, b"ERROR", b"{}"]),
)


RAW = [b"", b"\x00" * 64, b"GET / HTTP/1.0\r\n\r\n", b"\xff" + b"\x00" * 8 + b"\x7f",
       b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f\x03\x00NULL" + b"\x00" * 60,
       bytes(range(256)) * 4]


def tcp_address(endpoint: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` as a socket address."""
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    return host, int(port)
