"""Router logic without sockets: identity map and expiry, routing table, counters, limiter."""

from __future__ import annotations

import pytest

from support.clock import Clock
from fleetwatch import protocol
from fleetwatch.protocol import AGENT_TYPES
from router.config import DEFAULT_ROUTES
from router.counters import Counters
from router.endpoints import advertised
from router.peers import PEERS_HOSTNAME, Peers, envelopes
from router.replies import ReplyLimiter
from router.routes import RoutingTable


# ---------------------------------------------------------------- peers

def test_hello_attaches_and_refreshes():
    clock = Clock(1_000_000.0)
    peers = Peers(3, clock)
    peer, new = peers.hello(b"a1", "a1", "host-a", 2.0)
    assert new and peer.since == clock.now and peer.last_heard == clock.now
    clock.advance(5)
    again, new = peers.hello(b"a1", "a1", "host-b", 1.0)
    assert not new and again is peer
    assert (peer.hostname, peer.interval, peer.since, peer.last_heard) == \
        ("host-b", 1.0, clock.now - 5, clock.now)
    assert peers.by_uuid("a1") is peer and b"a1" in peers and len(peers) == 1
    assert peers.by_uuid("\u00e9t\u00e9") is None


def test_hello_builds_the_envelopes_of_every_relayed_type():
    """The hot path stamps with ``peer.envelopes[type frame]``: TYPE/UUID/ROUTER, built once."""
    clock = Clock(1_000_000.0)
    peers = Peers(3, clock, b"router-1")
    peer, _ = peers.hello(b"a1", "a1", "host-a", 2.0)
    assert set(peer.envelopes) == {t.encode() for t in AGENT_TYPES}
    assert peer.envelopes[b"NOTIFY"] == b"NOTIFY/a1/router-1"
    for type_frame, env in peer.envelopes.items():
        assert env == protocol.envelope(type_frame.decode(), "a1", "router-1")
        assert protocol.parse_envelope(env, AGENT_TYPES) == (type_frame.decode(), "a1", "router-1")
        assert env.startswith(protocol.topic(type_frame.decode(), "a1"))
    # a reconnect keeps them; another peer has its own
    again, _ = peers.hello(b"a1", "a1", "host-b", 1.0)
    assert again.envelopes is peer.envelopes
    other, _ = peers.hello(b"a12", "a12", "host-c", 1.0)
    assert other.envelopes[b"STATS"] == b"STATS/a12/router-1"
    assert not other.envelopes[b"STATS"].startswith(protocol.topic("STATS", "a1"))


def test_envelopes_helper():
    assert envelopes(b"u", b"r") == {t.encode(): f"{t}/u/r".encode() for t in AGENT_TYPES}


def test_expiry_after_intervals_of_silence():
    clock = Clock(1_000_000.0)
    peers = Peers(3, clock)
    peers.hello(b"slow", "slow", "h", 10.0)
    peers.hello(b"fast", "fast", "h", 1.0)
    clock.advance(2.9)
    assert peers.expire() == []
    peers.heard(b"fast")                     # a sign of life resets the deadline
    clock.advance(2.9)
    assert peers.expire() == []
    clock.advance(0.2)                       # fast: 3.1 s silent > 3 x 1 s
    assert [p.uuid for p in peers.expire()] == ["fast"]
    assert peers.get(b"fast") is None and peers.heard(b"fast") is None
    clock.advance(24.1)                      # slow: 30.1 s > 3 x 10 s
    assert [p.uuid for p in peers.expire()] == ["slow"]
    assert len(peers) == 0


def test_listing_reports_epoch_times():
    clock = Clock(1_700_000_000.0)
    peers = Peers(3, clock)
    peers.hello(b"a", "a", "ha", 1)
    clock.advance(1)
    peers.hello(b"b", "b", "hb", 1)
    assert peers.listing() == [
        {"uuid": "a", "hostname": "ha", "since": 1_700_000_000.0, "last_heard": 1_700_000_000.0},
        {"uuid": "b", "hostname": "hb", "since": 1_700_000_001.0, "last_heard": 1_700_000_001.0},
    ]


def test_peers_after_lists_in_uuid_order_from_a_cursor():
    peers = Peers(3, Clock(1_000_000.0))
    for uuid in ("c", "a", "d", "b"):
        peers.hello(uuid.encode(), uuid, "h" + uuid, 1)
    assert [p.uuid for p in peers.after()] == ["a", "b", "c", "d"]
    assert [p.uuid for p in peers.after("b")] == ["c", "d"]
    assert [p.uuid for p in peers.after("d")] == []


def test_a_peers_entry_cuts_a_long_hostname():
    peers = Peers(3, Clock(1_000_000.0))
    peers.hello(b"a", "a", "x" * 100_000, 1)
    assert len(peers.listing()[0]["hostname"]) == PEERS_HOSTNAME == 255


def _entries(n: int, hostname: str = "host"):
    return ({"uuid": f"agent-{i:05d}", "hostname": hostname, "since": 1.5e9,
             "last_heard": 1.5e9} for i in range(n))


def test_a_peers_page_holds_at_most_the_page_size_and_says_what_follows():
    page = protocol.peers_page("r1", _entries(2500), total=2500)
    assert len(page.get("agents")) == protocol.PEERS_PAGE
    assert page.get("total") == 2500 and page.get("next") == "agent-00999"
    last = protocol.peers_page("r1", _entries(10), total=10)
    assert len(last.get("agents")) == 10 and last.get("next") is None
    assert protocol.peers_page("r1", _entries(3), total=3, limit=2).get("next") == "agent-00001"


def test_a_peers_page_with_limit_0_is_a_summary():
    page = protocol.peers_page("r1", _entries(5), total=5, limit=0)
    assert page.get("agents") == [] and page.get("total") == 5 and page.get("next") is None


def test_a_peers_page_stays_within_the_body_limit():
    hostname = "\u00e9" * PEERS_HOSTNAME     # 6 octets each once escaped
    page = protocol.peers_page("r1", _entries(1000, hostname), total=1000)
    body = protocol.encode_body(page)
    assert len(body) <= protocol.MAX_BODY
    assert 100 < len(page.get("agents")) < 1000 and page.get("next")
    # and it decodes where the CLI decodes it, with the default limit
    assert protocol.decode(protocol.encode(page)).get("agents") == page.get("agents")


@pytest.mark.parametrize("field", ["limit", "total"])
def test_a_negative_peers_count_is_refused(field):
    msg = protocol.make("PEERS", "cli", **{field: -1})
    with pytest.raises(protocol.ProtocolError, match="negative"):
        protocol.decode(protocol.encode(msg))


# ---------------------------------------------------------------- routes

def test_default_routes_compile():
    table = RoutingTable(DEFAULT_ROUTES, {"registry": 0, "alerting": 1, "graphite": 2, "history": 3,
                                          "prometheus": 4, "remote_write": 5})
    assert table.lookup(b"NOTIFY") == (("alerting", 1), ("history", 3))
    assert table.lookup(b"RESULT") == (("alerting", 1), ("graphite", 2), ("history", 3),
                                       ("prometheus", 4), ("remote_write", 5))
    assert table.lookup(b"HELLO") == (("registry", 0), ("graphite", 2), ("history", 3),
                                      ("prometheus", 4), ("remote_write", 5))
    assert table.lookup(b"ACK") is None and table.lookup(b"WELCOME") is None
    assert table.lookup(b"nonsense") is None
    assert ("STATS", "graphite") in table.pairs()


def test_unrouted_agent_type_has_empty_route_and_duplicates_collapse():
    table = RoutingTable({"NOTIFY": ["alerting", "alerting"]}, {"alerting": "A"})
    assert table.lookup(b"NOTIFY") == (("alerting", "A"),)
    assert table.lookup(b"STATS") == ()
    assert table.sinks_of("NOTIFY") == ["alerting"]


def test_routes_reject_missing_sink_and_non_agent_type():
    with pytest.raises(ValueError, match="graphite"):
        RoutingTable({"STATS": ["graphite"]}, {"alerting": 1})
    with pytest.raises(ValueError, match="ACK"):
        RoutingTable({"ACK": ["alerting"]}, {"alerting": 1})


# ---------------------------------------------------------------- counters

def test_counters_metrics_names():
    c = Counters(["NOTIFY", "STATS"])
    s = c.slot("NOTIFY", "alerting")
    assert c.slot("NOTIFY", "alerting") == s
    c.received[b"NOTIFY"] += 3
    c.relayed[s] += 2
    c.dropped[s] += 1
    c.count_bad(401)
    c.count_bad(401)
    c.forwarded["ACK"] += 1
    m = c.metrics(agents=7, waiting=2)
    assert m["router.agents"] == 7 and m["router.admission_waiting"] == 2
    assert m["router.received.NOTIFY"] == 3 and m["router.received.STATS"] == 0
    assert m["router.relayed.NOTIFY.alerting"] == 2
    assert m["router.dropped.NOTIFY.alerting"] == 1
    assert m["router.bad.401"] == 2 and m["router.forwarded.ACK"] == 1
    assert c.relayed_to("NOTIFY", "alerting") == 2 and c.dropped_at("STATS", "x") == 0
    assert all(isinstance(v, int) for v in m.values())


# ---------------------------------------------------------------- replies, endpoints

def test_reply_limiter_one_per_second_per_peer():
    clock = Clock(1_000_000.0)
    lim = ReplyLimiter(1.0, clock)
    assert lim.allow(b"p") and not lim.allow(b"p") and lim.allow(b"q")
    clock.advance(1.0)
    assert lim.allow(b"p")
    clock.advance(5)
    lim.prune()
    assert len(lim) == 0


def test_reply_limiter_bounded():
    clock = Clock(1_000_000.0)
    lim = ReplyLimiter(1.0, clock, max_peers=2)
    assert lim.allow(b"a") and lim.allow(b"b") and not lim.allow(b"c")
    clock.advance(2)
    assert lim.allow(b"c")


@pytest.mark.parametrize("bound, expected", [
    ("tcp://0.0.0.0:5555", "tcp://r1.example:5555"),
    ("tcp://[::]:5555", "tcp://r1.example:5555"),
    ("tcp://127.0.0.1:4000", "tcp://127.0.0.1:4000"),
    ("ipc:///run/fw.sock", "ipc:///run/fw.sock"),
])
def test_advertised_endpoint(bound, expected):
    assert advertised(bound, fqdn=lambda: "r1.example") == expected
    assert advertised("tcp://0.0.0.0:1", "fixed") == "tcp://fixed:1"
