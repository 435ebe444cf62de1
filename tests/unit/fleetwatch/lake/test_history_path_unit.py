"""The routers a message passed (SPEC 4.10: ``central-1,site-3``) through the history side,
without sockets or Spark: the landing line the sink writes (sinks/history/lines.py), read back
by replay (fleetwatch/lake/landed.py), a live message made an event (fleetwatch/lake/follow.py),
and the line ``fleetwatch tail`` prints for either (fleetwatch/cli/tail.py)."""

from __future__ import annotations

import json
from collections import Counter

from fleetwatch import protocol
from fleetwatch.cli.tail import line
from fleetwatch.logs import Throttle
from fleetwatch.protocol import Message, Relayed
from sinks.history import lines
from fleetwatch.lake.follow import live_event
from fleetwatch.lake.landed import parse

AGENT = "0091b408-aaaa-bbbb-cccc-000000000001"
BODY = {"msg_id": "5f0c" * 8, "uuid": AGENT, "ts": 1_795_000_099.5, "severity": "error",
        "text": "disk full"}
STATS = {"msg_id": "6a1d" * 8, "uuid": AGENT, "ts": 1_795_000_099.5,
         "metrics": {"cpu.percent": 12.5}}


def landed_lines(path: bytes, type_: str = "STATS", body: dict = STATS) -> list[bytes]:
    """The landing line(s) the sink writes for one message whose envelope's ROUTER is
    ``path``, through the raw fast path (STATS) or decoded (NOTIFY)."""
    frames = [protocol.SIGNATURE, b"%s/%s/%s" % (type_.encode(), AGENT.encode(), path),
              json.dumps(body, separators=(",", ":")).encode()]
    sorter = lines.Sorter(frozenset(protocol.AGENT_TYPES), frozenset({"NOTIFY", "REGISTER"}),
                          Counter(), Throttle(None))
    kept, to_decode = sorter.sort([frames])
    fresh = [protocol.decode_relayed(f) for f in to_decode]
    return lines.landing_data(kept, fresh, 1_795_000_100.25).splitlines()


def test_a_landing_line_keeps_the_path_and_replay_reads_it_back():
    for path, want in ((b"central-1,site-3", ("central-1", "site-3")),
                       (b"central-1,site-2,site-7", ("central-1", "site-2", "site-7")),
                       (b"router-1", ("router-1",))):
        for type_, body in (("STATS", STATS), ("NOTIFY", BODY)):
            [landed] = landed_lines(path, type_, body)
            doc = json.loads(landed)
            assert doc["router"] == want[0]
            assert doc.get("path") == (path.decode() if len(want) > 1 else None)
            event = parse(landed)
            assert (event.router, event.path, event.body) == (want[0], want, body)


def test_a_line_without_a_path_or_with_a_strange_one():
    """Lines written before paths name their router only; a path that is not text (a hand
    edit) is taken as the router alone, as compaction keeps such a line."""
    base = {"msg": BODY, "type": "NOTIFY", "uuid": AGENT, "router": "r1", "received": 1.5}
    assert parse(json.dumps(base).encode()).path == ("r1",)
    assert parse(json.dumps({**base, "path": ["r1", "s1"]}).encode()).path == ("r1",)
    assert parse(json.dumps({**base, "path": ""}).encode()).path == ("r1",)
    assert parse(json.dumps({**base, "path": "r1,s1"}).encode()).path == ("r1", "s1")


def test_a_live_message_becomes_an_event_with_its_whole_path():
    msg = Message("NOTIFY", BODY)
    through = Relayed(AGENT, "central-1", msg, (4, 2), ("central-1", "site-3"))
    direct = Relayed(AGENT, "router-1", msg, (4, 2))
    assert live_event(through).path == ("central-1", "site-3")
    assert live_event(direct).path == ("router-1",)


def replayed(event, hostnames, as_json):
    """The line ``tail --since`` prints for an event (fleetwatch/cli/tail.py ``replay``)."""
    relayed = Relayed(event.uuid, event.router, Message(event.type, event.body),
                      path=event.path)
    return line(relayed, hostnames, as_json)


def test_tail_prints_the_whole_path_the_same_from_the_lake_and_live():
    hostnames = {AGENT: "web1"}
    [landed] = landed_lines(b"central-1,site-3", "NOTIFY", BODY)
    from_lake = parse(landed)
    relayed = protocol.decode_tail(
        [b"NOTIFY/%s/central-1,site-3" % AGENT.encode(), protocol.SIGNATURE,
         protocol.encode_body(Message("NOTIFY", BODY)), protocol.TAIL_SEQ.pack(1, 1)])
    live = live_event(relayed)
    human = line(relayed, hostnames, False)
    assert human == ('2026-11-18 11:08:19 UTC central-1,site-3 NOTIFY web1/0091b408 '
                     '{"severity":"error","text":"disk full"}')
    assert replayed(from_lake, hostnames, False) == replayed(live, hostnames, False) == human
    as_json = json.loads(line(relayed, hostnames, True))
    assert (as_json["router"], as_json["path"]) == ("central-1", ["central-1", "site-3"])
    assert json.loads(replayed(from_lake, hostnames, True)) == as_json
    direct = json.loads(line(Relayed(AGENT, "router-1", Message("NOTIFY", BODY)), {}, True))
    assert (direct["router"], direct["path"]) == ("router-1", ["router-1"])


def test_a_path_shown_to_a_person_is_escaped():
    """Routers check the ids they stamp; a landing line edited by hand is not checked."""
    doc = {"msg": BODY, "type": "NOTIFY", "uuid": AGENT, "router": "r1", "received": 1.5,
           "path": "r1,\x1b[31mevil\u202e"}
    shown = replayed(parse(json.dumps(doc).encode()), {}, False)
    assert "r1,\\x1b[31mevil\\u202e NOTIFY" in shown and "\x1b" not in shown
    assert json.loads(replayed(parse(json.dumps(doc).encode()), {}, True))["path"] == \
        ["r1", "\x1b[31mevil\u202e"]
