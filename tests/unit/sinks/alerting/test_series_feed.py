"""What the rules take from a router's tail (sinks/alerting/series/feed.py ``lean``): the
stamp and the body as JSON, refusing what a sink's intake refuses."""

from __future__ import annotations

import pytest

from fleetwatch import protocol
from fleetwatch.protocol import FORBIDDEN, ProtocolError
from sinks.alerting.series.feed import lean

U = "a1" * 16


def frames(body: bytes | None = None, seq=(7, 3), type_="STATS", uuid=U) -> list[bytes]:
    msg = protocol.make(type_, uuid, metrics={"load.1": 0.5})
    out = protocol.encode_tail(msg, uuid, "router-1", seq)
    if body is not None:
        out[2] = body
    return out


def test_a_stats_as_the_rules_read_it():
    type_, uuid, router, seq, body = lean(frames())
    assert (type_, uuid, router, seq) == ("STATS", U, "router-1", (7, 3))
    assert body["metrics"] == {"load.1": 0.5}
    assert lean(frames(seq=None))[3] is None            # a router older than SEQ


@pytest.mark.parametrize("broken, status", [
    (lambda f: f[:2], protocol.BAD_REQUEST),
    (lambda f: [f[0], b"XXXX", *f[2:]], protocol.BAD_REQUEST),
    (lambda f: [b"STATS/a b/router-1", *f[1:]], protocol.BAD_REQUEST),
    (lambda f: [b"NOTIFY/" + U.encode() + b"/r", *f[1:]], protocol.NOT_ALLOWED),
    (lambda f: [*f[:2], b"{not json", f[3]], protocol.BAD_REQUEST),
    (lambda f: [*f[:2], b"[1, 2]", f[3]], protocol.BAD_REQUEST),
    (lambda f: [*f[:2], b'{"uuid": "someone-else", "metrics": {}}', f[3]], FORBIDDEN),
    (lambda f: [*f[:2], b"[" * 100_000 + b"]" * 100_000, f[3]], protocol.BAD_REQUEST),
    (lambda f: [*f[:3], b"\x00" * 3], protocol.BAD_REQUEST),
])
def test_what_a_sink_refuses_the_rules_refuse(broken, status):
    with pytest.raises(ProtocolError) as e:
        lean(broken(frames()))
    assert e.value.status == status
