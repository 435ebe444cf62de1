"""The FWP/1 codec (fleetwatch/protocol.py) against SPEC.md: round trips, hostile input and
the status code of each refusal.

No sockets: the codec takes and returns lists of ``bytes`` frames. Every decoder, given any
list of byte frames, returns a message or raises ProtocolError carrying a status code of
SPEC.md section 6; nothing else may escape (a daemon must survive any input).
"""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetwatch import protocol as p
from fleetwatch.protocol import (
    AGENT_TYPES, CONTROL_TYPES, MAX_BODY, MAX_ID, SCHEMAS, SIGNATURE, STATUS_TEXT, TYPES,
    Message, ProtocolError, Relayed,
)

FUZZ = settings(max_examples=80, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(max_examples=40, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

AGENT = "3f2c9a0e1b7d4c5e8f6a1b2c3d4e5f60"
ROUTER = "router-1"

# One complete body per type: every required and every optional field of SCHEMAS.
SAMPLES = {
    "HELLO": {"hostname": "web-1", "heartbeat": 2.0, "version": "0.1.0", "role": "agent",
              "sink": "alerting", "plugins": ["check_disk", "check_load"],
              "instance": "5f0c2b9e41d3a7c8", "ephemeral": True},
    "WELCOME": {"router": ROUTER, "routers": ["tcp://r1:5555", "tcp://r2:5555"],
                "endpoints": {"agents": "tcp://r1:5555", "control": "tcp://r1:5556",
                              "tail": "tcp://r1:5557", "sinks": {"alerting": "tcp://r1:5561"}},
                "durable": {"NOTIFY": ["alerting", "history"], "REGISTER": ["registry"]},
                "members": [{"id": ROUTER, "agents": "tcp://r1:5555", "control": "tcp://r1:5556",
                             "tail": "tcp://r1:5557"}]},
    "HEARTBEAT": {"name": "cron-backup", "interval": 30},
    "STATS": {"metrics": {"cpu.user": 12.5, "load.1": 0.25, "procs": 212},
              "hostname": "web-1", "source": "agent",
              "drops": [{"uuid": AGENT, "type": "HEARTBEAT", "sink": "history", "count": 3,
                         "first": 1.7e9, "last": 1.7e9 + 9.5}]},
    "NOTIFY": {"severity": "critical", "text": "disk /var is 97% full: \u00e9\u4e2d",
               "source": "cron"},
    "ACK": {"msg_ids": ["a" * 32, "b" * 32], "sink": "alerting@h"},
    "REGISTER": {"name": "agent", "plugins": ["check_backup"], "heartbeat": 3600,
                 "hostname": "web-1", "version": "0.1.0", "ephemeral": False},
    "DEREGISTER": {"reason": "stop"},
    "RUN": {"command_id": "c-1", "plugin": "check_disk", "timeout": 10.5, "slot": 1.7e9},
    "RESULT": {"command_id": "c-1", "plugin": "check_disk", "status": 2,
               "output": "DISK CRITICAL - /var 97%", "long_output": "line 2\nline 3",
               "perfdata": [{"label": "/var", "value": 97.0, "uom": "%", "warn": "90",
                             "crit": "95", "min": 0.0, "max": 100.0}],
               "slot": 1.7e9, "started": 1.7e9 + 0.5, "duration": 0.125,
               "boot": "9f2c41d07ab3e685", "seq": 42},
    "PEERS": {"router": ROUTER, "agents": [{"uuid": AGENT, "hostname": "web-1",
                                            "since": 1.5e9, "last_heard": 1.7e9}],
              "after": "a" * 32, "limit": 1000, "total": 2500, "next": AGENT,
              "sinks": {"alerting": 1, "history": 0}, "durable": {"NOTIFY": ["alerting"]}},
    "MEMBERS": {"router": ROUTER, "routers": [
        {"id": ROUTER, "endpoints": {"agents": "tcp://r1:5555", "control": "tcp://r1:5556",
                                     "tail": "tcp://r1:5557"},
         "incarnation": 1_700_000_000_250_000, "beat": 12, "age": 0.0},
        {"id": "router-2", "endpoints": {"agents": "tcp://r2:5555", "control": "tcp://r2:5556",
                                         "tail": "tcp://r2:5557"},
         "incarnation": 1_700_000_001_000_000, "beat": 3, "age": 6.5, "dead": True}]},
    "ATTACHED": {"router": ROUTER, "uuids": [AGENT], "attached": {AGENT: ""}, "ref": "d" * 32},
    "ERROR": {"status": 404, "reason": "not found", "ref": "c" * 32},
}
# Just the required fields of each type.
MINIMAL = {t: {k: v for k, v in SAMPLES[t].items() if SCHEMAS[t][k][1]} for t in SAMPLES}

TYPE_LIST = sorted(TYPES)
RELAYED_TYPES = sorted(AGENT_TYPES)   # what a router relays to sinks and publishes on tail
CONTROL_LIST = sorted(CONTROL_TYPES)


def clock():
    return 1700000000.25


def msg(type_: str, uuid: str = AGENT, minimal: bool = False, **fields) -> Message:
    base = dict((MINIMAL if minimal else SAMPLES)[type_])
    base.update(fields)
    return p.make(type_, uuid, clock=clock, msg_id="d" * 32, **base)


def body(type_: str, drop: tuple[str, ...] = (), **fields) -> bytes:
    """A valid JSON body of ``type_`` with ``fields`` changed and ``drop`` removed."""
    b = {"msg_id": "d" * 32, "uuid": AGENT, "ts": 1700000000.25, **SAMPLES[type_], **fields}
    for name in drop:
        del b[name]
    return json.dumps(b).encode()


def frames(type_: str, data: bytes) -> list[bytes]:
    return [SIGNATURE, type_.encode(), data]


def status_of(fn, *args, **kwargs) -> int:
    with pytest.raises(ProtocolError) as info:
        fn(*args, **kwargs)
    err = info.value
    assert err.status in STATUS_TEXT, err
    assert isinstance(err.reason, str) and err.reason
    assert str(err).startswith(f"{err.status} ")
    return err.status


def test_samples_cover_every_type():
    assert set(SAMPLES) == TYPES
    for type_, schema in SCHEMAS.items():
        assert set(SAMPLES[type_]) == set(schema), type_


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("minimal", [False, True], ids=["all-fields", "required-only"])
@pytest.mark.parametrize("type_", TYPE_LIST)
def test_round_trip_agents_socket(type_, minimal):
    m = msg(type_, minimal=minimal)
    out = p.encode(m)
    assert len(out) == 3 and out[0] == b"FWP\x01" and out[1] == type_.encode()
    assert p.decode(out) == m


@pytest.mark.parametrize("type_", RELAYED_TYPES)
def test_round_trip_relayed_to_sinks(type_):
    m = msg(type_)
    out = p.encode_relayed(m, AGENT, ROUTER)
    assert out == [SIGNATURE, f"{type_}/{AGENT}/{ROUTER}".encode(), p.encode_body(m)]
    assert out[1] == p.envelope(type_, AGENT, ROUTER)
    got = p.decode_relayed(out, allowed=AGENT_TYPES)
    assert got == Relayed(AGENT, ROUTER, m)


@pytest.mark.parametrize("type_", sorted(TYPES - AGENT_TYPES))
def test_relayed_layout_with_default_allowed_accepts_any_type(type_):
    m = msg(type_)
    assert p.decode_relayed(p.encode_relayed(m, AGENT, ROUTER)).message == m


@pytest.mark.parametrize("type_", CONTROL_LIST)
def test_round_trip_control_socket(type_):
    m = msg(type_, uuid="alerting@host")
    target = AGENT if type_ in ("ACK", "RUN") else ""
    out = p.encode_control(m, target)
    assert out[2] == target.encode()
    assert p.decode_control(out) == (target, m)


@pytest.mark.parametrize("type_", RELAYED_TYPES)
def test_round_trip_tail(type_):
    m = msg(type_)
    out = p.encode_tail(m, AGENT, ROUTER)
    assert out == [f"{type_}/{AGENT}/{ROUTER}".encode(), SIGNATURE, p.encode_body(m)]
    # the same three frames as relayed to sinks, the envelope first (it is the topic)
    relayed = p.encode_relayed(m, AGENT, ROUTER)
    assert out == [relayed[1], relayed[0], relayed[2]]
    # both subscriptions of SPEC (a type, a type from one agent) select it
    assert out[0].startswith(p.topic(type_)) and out[0].startswith(p.topic(type_, AGENT))
    assert p.decode_tail(out) == Relayed(AGENT, ROUTER, m)


def test_encode_exact_bytes():
    m = p.make("NOTIFY", "u1", clock=lambda: 1.5, msg_id="m1", severity="info", text="hi")
    assert p.encode(m) == [b"FWP\x01", b"NOTIFY",
                           b'{"msg_id":"m1","uuid":"u1","ts":1.5,"severity":"info","text":"hi"}']
    assert p.encode_control(m)[:3] == [b"FWP\x01", b"NOTIFY", b""]
    assert p.encode_control(m, "u1")[2] == b"u1"


def test_relayed_and_tail_exact_bytes():
    m = p.make("NOTIFY", "u1", clock=lambda: 1.5, msg_id="m1", severity="info", text="hi")
    body_ = b'{"msg_id":"m1","uuid":"u1","ts":1.5,"severity":"info","text":"hi"}'
    assert p.envelope("NOTIFY", "u1", "r1") == b"NOTIFY/u1/r1"
    assert p.encode_relayed(m, "u1", "r1") == [b"FWP\x01", b"NOTIFY/u1/r1", body_]
    assert p.encode_tail(m, "u1", "r1") == [b"NOTIFY/u1/r1", b"FWP\x01", body_]
    assert p.decode_relayed([b"FWP\x01", b"NOTIFY/u1/r1", body_]) == Relayed("u1", "r1", m)
    assert p.decode_tail([b"NOTIFY/u1/r1", b"FWP\x01", body_]) == Relayed("u1", "r1", m)
    assert p.topic("NOTIFY") == b"NOTIFY/" and p.topic("NOTIFY", "u1") == b"NOTIFY/u1/"
    # SEQ: two unsigned 64-bit big-endian numbers (of the type, of the type from the sender)
    seq = b"\x00" * 7 + b"\x05" + b"\x00" * 7 + b"\x02"
    assert p.encode_tail(m, "u1", "r1", (5, 2)) == [b"NOTIFY/u1/r1", b"FWP\x01", body_, seq]
    assert p.decode_tail([b"NOTIFY/u1/r1", b"FWP\x01", body_, seq]) == Relayed("u1", "r1", m,
                                                                              (5, 2))
    big = (2**64 - 1, 1)
    assert p.decode_tail(p.encode_tail(m, "u1", "r1", big)).seq == big
    for wrong in (b"", b"\x01" * 8, b"\x01" * 17):
        with pytest.raises(p.ProtocolError, match="SEQ must be 16 octets") as e:
            p.decode_tail([b"NOTIFY/u1/r1", b"FWP\x01", body_, wrong])
        assert e.value.status == 400
    with pytest.raises(p.ProtocolError, match="expected 4 frames, got 5"):
        p.decode_tail([b"NOTIFY/u1/r1", b"FWP\x01", body_, seq, b""])
    # the router stamps its own STATS with its id as both uuid and router
    assert p.envelope("STATS", "router-1", "router-1") == b"STATS/router-1/router-1"


@pytest.mark.parametrize("type_", TYPE_LIST)
def test_parse_envelope_round_trip(type_):
    assert p.parse_envelope(p.envelope(type_, AGENT, ROUTER)) == (type_, AGENT, ROUTER)
    for uuid, router in (("a", "b"), ("0", "9"), ("u" * 64, "r" * 64),
                         ("a.b-c", "alerting@host:5555"), ("A:B@C", "9.9")):
        assert p.parse_envelope(p.envelope(type_, uuid, router)) == (type_, uuid, router)


def test_parse_envelope_allowed_types():
    assert p.parse_envelope(b"NOTIFY/u/r", AGENT_TYPES) == ("NOTIFY", "u", "r")
    assert status_of(p.parse_envelope, b"WELCOME/u/r", AGENT_TYPES) == 405
    assert status_of(p.parse_envelope, b"ACK/u/r", AGENT_TYPES) == 405
    assert status_of(p.parse_envelope, b"BOGUS/u/r", AGENT_TYPES) == 400


def test_longest_valid_envelope_is_accepted():
    longest = max(TYPES, key=len)
    env = p.envelope(longest, "u" * MAX_ID, "r" * MAX_ID)
    assert p.parse_envelope(env) == (longest, "u" * MAX_ID, "r" * MAX_ID)


def test_topic_prefixes_select_a_type_then_an_agent():
    assert p.topic("NOTIFY") == b"NOTIFY/"
    assert p.topic("NOTIFY", AGENT) == b"NOTIFY/" + AGENT.encode() + b"/"
    assert p.topic("NOTIFY", AGENT).startswith(p.topic("NOTIFY"))
    env = p.envelope("NOTIFY", AGENT, ROUTER)
    assert env.startswith(p.topic("NOTIFY")) and env.startswith(p.topic("NOTIFY", AGENT))
    # the slash ends the type: no type's prefix selects another type
    for a in TYPES:
        for b in TYPES - {a}:
            assert not p.topic(b, AGENT).startswith(p.topic(a))
            assert not p.envelope(b, AGENT, ROUTER).startswith(p.topic(a))


def test_topic_for_an_agent_is_exact():
    """The trailing slash ends the uuid: an agent's topic selects no other agent's envelope."""
    short, longer = "ab12", "ab123"
    assert not p.envelope("NOTIFY", longer, ROUTER).startswith(p.topic("NOTIFY", short))
    assert not p.envelope("NOTIFY", short, ROUTER).startswith(p.topic("NOTIFY", longer))
    assert p.envelope("NOTIFY", short, ROUTER).startswith(p.topic("NOTIFY", short))
    # nor does a router id that happens to look like a uuid
    assert not p.envelope("NOTIFY", "x", short).startswith(p.topic("NOTIFY", short))


@FEW
@given(st.sampled_from(TYPE_LIST), st.sampled_from(TYPE_LIST),
       st.from_regex(p.ID_PATTERN, fullmatch=True), st.from_regex(p.ID_PATTERN, fullmatch=True),
       st.from_regex(p.ID_PATTERN, fullmatch=True))
def test_topic_selects_exactly_its_type_and_agent(t1, t2, u1, u2, router):
    env = p.envelope(t2, u2, router)
    assert env.startswith(p.topic(t1)) == (t1 == t2)
    assert env.startswith(p.topic(t1, u1)) == (t1 == t2 and u1 == u2)


def test_unknown_body_fields_are_kept_and_ignored():
    data = body("NOTIFY", future_field={"x": [1, 2]}, priority=3)
    m = p.decode(frames("NOTIFY", data))
    assert m.get("future_field") == {"x": [1, 2]}
    assert p.decode(p.encode(m)) == m


def test_message_accessors():
    m = msg("NOTIFY")
    assert (m.msg_id, m.uuid, m.ts) == ("d" * 32, AGENT, 1700000000.25)
    assert m.get("severity") == "critical" and m.get("nope", 7) == 7


def test_make_fills_common_fields_and_drops_none():
    m = p.make("RUN", "sched", clock=lambda: 42.0, command_id="c", plugin="p", timeout=None)
    assert m.type == "RUN" and m.ts == 42.0 and m.uuid == "sched"
    assert "timeout" not in m.body
    assert re.fullmatch(r"[0-9a-f]{32}", m.msg_id)
    assert p.new_id() != p.new_id()


def test_resend_sets_retry_and_dup_and_keeps_the_rest():
    m = msg("NOTIFY")
    again = p.resend(m, 3)
    assert again.type == m.type and again.msg_id == m.msg_id
    assert again.body["retry"] == 3 and again.body["dup"] is True
    assert {k: v for k, v in again.body.items() if k not in ("retry", "dup")} == m.body
    assert "retry" not in m.body and "dup" not in m.body, "resend must not change the original"
    assert p.decode(p.encode(again)) == again
    assert p.resend(again, 4).body["retry"] == 4


@pytest.mark.parametrize("status", sorted(STATUS_TEXT))
def test_error_builds_a_valid_error(status):
    e = p.error(status, ref="m" * 32, uuid=ROUTER)
    assert e.type == "ERROR" and e.uuid == ROUTER
    assert e.body["status"] == status and e.body["reason"] == STATUS_TEXT[status]
    assert e.body["ref"] == "m" * 32
    assert p.decode(p.encode(e)) == e


def test_error_defaults_and_custom_reason():
    e = p.error(p.BAD_REQUEST, "bad frame")
    assert e.body["reason"] == "bad frame" and "ref" not in e.body
    # the default sender id is a valid uuid, or the ERROR would not decode
    assert e.uuid == "unknown" and p.ID_PATTERN.fullmatch(e.uuid)
    assert p.decode(p.encode(e)) == e
    odd = p.error(599)            # no text for an unknown code: still a valid ERROR
    assert p.decode(p.encode(odd)).body["status"] == 599


def test_status_text_names_every_code():
    codes = {v for k, v in vars(p).items() if k.isupper() and isinstance(v, int)
             and 200 <= v < 600}
    assert codes == set(STATUS_TEXT)


# ---------------------------------------------------------------- valid bodies, generated

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
_id = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=MAX_ID)
#: what a uuid, a router id and a control target may be (and all an envelope part may be)
_valid_id = st.from_regex(p.ID_PATTERN, fullmatch=True)
_number = st.integers(-(2 ** 63), 2 ** 63) | st.floats(allow_nan=False, allow_infinity=False)
_json = st.recursive(st.none() | st.booleans() | _number | _text,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_text, inner, max_size=3), max_leaves=8)
_BY_TYPES = {p._STR: _text, p._NUMBER: _number, (int,): st.integers(-(2 ** 40), 2 ** 40),
             p._LIST: st.lists(_json, max_size=3),
             p._DICT: st.dictionaries(_text, _json, max_size=3), p._BOOL: st.booleans()}
# Fields whose values SPEC.md constrains beyond their JSON type.
#: what a time (ts, RESULT started) may be: epoch seconds from 1970 to the end of year 9999
_time = st.integers(0, int(p.TS_END) - 1) | st.floats(p.TS_MIN, p.TS_END, exclude_max=True)
_SPECIAL = {
    "msg_id": _id, "uuid": _valid_id, "ts": _time, "RESULT.started": _time,
    "retry": st.integers(0, 2 ** 31),
    "NOTIFY.severity": st.sampled_from(p.SEVERITIES),
    "HELLO.heartbeat": st.floats(min_value=0, exclude_min=True, allow_infinity=False)
    | st.integers(1, 2 ** 31),
    "STATS.metrics": st.dictionaries(_text, _number, max_size=5),
    "ACK.msg_ids": st.lists(_id, max_size=4),
    "WELCOME.routers": st.lists(_text, max_size=3),
    "WELCOME.members": st.lists(st.dictionaries(_text, _json, max_size=3), max_size=3),
    "MEMBERS.routers": st.lists(st.dictionaries(_text, _json, max_size=3), max_size=3),
    "ATTACHED.uuids": st.lists(st.text(max_size=p.MAX_ID), max_size=3),
    "RESULT.status": st.integers(0, 3),
    "RESULT.boot": st.text(min_size=1, max_size=p.MAX_ID),
    "RESULT.seq": st.integers(0, 2 ** 53 - 1),
    "PEERS.limit": st.integers(0, 2 ** 31),
    "PEERS.total": st.integers(0, 2 ** 31),
}


def _field(type_: str, name: str, types) -> st.SearchStrategy:
    for key in (f"{type_}.{name}", name):
        if key in _SPECIAL:
            return _SPECIAL[key]
    return _BY_TYPES[types]


@st.composite
def valid_messages(draw, types=TYPE_LIST):
    type_ = draw(st.sampled_from(types))
    b = {}
    for schema in (p._COMMON, SCHEMAS[type_]):
        for name, (tps, required) in schema.items():
            if required or draw(st.booleans()):
                b[name] = draw(_field(type_, name, tps))
    known = set(p._COMMON) | set(SCHEMAS[type_])
    extra = draw(st.dictionaries(_text.filter(lambda k: k not in known), _json, max_size=2))
    return Message(type_, {**b, **extra})


@FUZZ
@given(valid_messages())
def test_any_valid_body_round_trips(m):
    assert p.decode(p.encode(m)) == m


@FEW
@given(valid_messages(RELAYED_TYPES), _valid_id)
def test_any_valid_relayed_message_round_trips(m, router):
    uuid = m.uuid
    relayed = p.encode_relayed(m, uuid, router)
    assert relayed[1] == f"{m.type}/{uuid}/{router}".encode()
    assert p.decode_relayed(relayed, allowed=AGENT_TYPES) == Relayed(uuid, router, m)
    tail = p.encode_tail(m, uuid, router)
    assert tail[0].startswith(p.topic(m.type, uuid))
    assert p.decode_tail(tail) == Relayed(uuid, router, m)


# Characters a hostile id is made of: the allowed ones, the separator, and what must not pass.
_id_chars = st.sampled_from(list("aZ09._:@-/ \\\t\n\r\x00\x7f_#%+=,;~'\"") +
                            ["\u00e9", "\u0661", "\uff10", "\u212a", "\U0001F600"])
_any_id = _valid_id | st.text(_id_chars, max_size=70) | st.text(max_size=70)


@FUZZ
@given(_any_id)
def test_every_id_field_accepts_exactly_id_pattern(text):
    """Body uuid, envelope uuid and router, control target: one rule (SPEC section 3)."""
    ok = p.ID_PATTERN.fullmatch(text) is not None
    assert ok == (text.isascii() and 0 < len(text) <= MAX_ID and text[0].isalnum()
                  and all(c.isalnum() or c in "._:@-" for c in text))
    data = body("NOTIFY", uuid=text)
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:      # a lone surrogate: not even an id frame
        assert not ok
        return
    cases = [
        (p.decode, frames("NOTIFY", data)),
        (p.decode_relayed, [SIGNATURE, b"NOTIFY/" + raw + b"/r1", data]),
        (p.decode_relayed, [SIGNATURE, b"NOTIFY/" + AGENT.encode() + b"/" + raw,
                            body("NOTIFY")]),
        (p.decode_tail, [b"NOTIFY/" + raw + b"/r1", SIGNATURE, data]),
        (p.decode_control, [SIGNATURE, b"ACK", raw, body("ACK")]),
    ]
    for decoder, fs in cases:
        if ok:
            decoder(fs)
        else:
            assert status_of(decoder, fs) == 400, (decoder.__name__, text)


@FEW
@given(valid_messages(CONTROL_LIST))
def test_any_valid_control_message_round_trips(m):
    target = AGENT if m.type in ("ACK", "RUN") else ""
    assert p.decode_control(p.encode_control(m, target)) == (target, m)


# ---------------------------------------------------------------- hostile frames, generated

def _only_protocol_errors(fn, frames_):
    try:
        result = fn(frames_)
    except ProtocolError as e:
        assert e.status in STATUS_TEXT and e.status >= 400, e
        return None
    return result


# json.dumps cannot write 1e400 (it overflows to inf when read): a sentinel is replaced after.
_OVERFLOW_SENTINEL, _OVERFLOW_TEXT = 1.2345e300, (b"1.2345e+300", b"1e400")
_hostile_number = st.sampled_from([10 ** 400, -(10 ** 400), 2 ** 1024, 1e308, -0.0, 5e-324, 0,
                                   -1, _OVERFLOW_SENTINEL]) | st.integers() | st.floats()
_hostile_json = st.recursive(
    st.none() | st.booleans() | _hostile_number | st.text(max_size=70),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4), max_leaves=10)
# Values that sit on an edge of some check; mixed in often so that each check is reached.
_edges = st.sampled_from([10 ** 400, -(10 ** 400), _OVERFLOW_SENTINEL, -1, 0, 4, 1.5, True,
                          False, None, "", "x" * 65, "1", "fatal", [], [1], [None], ["a"], {},
                          {"a": 10 ** 400}, {"a": _OVERFLOW_SENTINEL}, {"a": "1"}, {"a": True}])
_hostile_value = _edges | _hostile_json
_big = [10 ** 400, -(10 ** 400), _OVERFLOW_SENTINEL, 2 ** 1024]
_SAME_TYPE_EDGES = {
    p._NUMBER: st.sampled_from(_big + [-1, 0, 4, -0.0, 5e-324, 1e308]),
    (int,): st.sampled_from(_big + [-1, 0, 3, 4, 2 ** 64]),
    p._STR: st.sampled_from(["", "x" * 64, "x" * 65, "\u00e9" * 40, "fatal", "info", "\x00"]),
    p._LIST: st.sampled_from([[], [1], [None], [""], [10 ** 400], [[]], [{}]]),
    p._DICT: st.sampled_from([{}, {"a": 10 ** 400}, {"a": _OVERFLOW_SENTINEL}, {"a": "1"},
                              {"a": True}, {"a": None}, {"": 1}]),
    p._BOOL: st.booleans(),
}
_field_names = sorted({n for s in SCHEMAS.values() for n in s} | set(p._COMMON))


@st.composite
def json_ish_bodies(draw):
    """Bodies that are often JSON objects with the right field names and wrong values."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.binary(max_size=64))
    if kind == 1:
        raw = json.dumps(draw(_hostile_json), allow_nan=True)
    else:
        obj = draw(st.dictionaries(st.sampled_from(_field_names), _hostile_json, max_size=8))
        if kind >= 3:   # a valid common header so that type-specific checks run
            obj = {"msg_id": "m", "uuid": AGENT, "ts": 1.0, **obj}
        raw = json.dumps(obj, allow_nan=True)
    data = raw.encode("utf-8", "surrogatepass").replace(*_OVERFLOW_TEXT)
    if kind == 5 and data:  # damage one byte
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    return data


_sig = st.sampled_from([SIGNATURE, b"FWP\x02", b"FWP\x00", b"FWP", b"FWP\x01\x01", b""]) \
    | st.binary(max_size=6)
_type = st.sampled_from(sorted(p.TYPE_FRAMES) + [b"hello", b"", b"NOT\xffIFY", b"BOGUS"]) \
    | st.binary(max_size=10)
_ident = st.sampled_from([AGENT.encode(), b"", b"x" * 65, b"\xc3\xa9", ROUTER.encode(), b"a/b",
                          b"a b", b"-a", b".", b"a\n", b"\x00", b"@"]) \
    | st.binary(max_size=70)
# ENVELOPE frames: built from hostile parts with 1 to 5 slashes, edge cases, or random bytes
_envelope = st.sampled_from([b"", b"/", b"//", b"///", b"NOTIFY", b"NOTIFY/", b"NOTIFY//",
                             b"NOTIFY/" + AGENT.encode(), b"NOTIFY/" + AGENT.encode() + b"/",
                             b"/" + AGENT.encode() + b"/r", b"NOTIFY/" + AGENT.encode() + b"/r/",
                             b"NOTIFY/" + b"u" * 200 + b"/r", b"notify/" + AGENT.encode() + b"/r",
                             "NOTIFY/\u00e9/r".encode(), b"NOTIFY/" + AGENT.encode() + b"/\xff"]) \
    | st.lists(_type | _ident, min_size=1, max_size=5).map(b"/".join) \
    | st.tuples(_type, _ident, _ident).map(b"/".join) \
    | st.binary(max_size=150)


@st.composite
def mutated_messages(draw, types=TYPE_LIST, with_uuid=False):
    """(type, body bytes): a valid message with some of its own fields hostile or removed.

    ``with_uuid``: (type, body bytes, the valid message's uuid as bytes), to stamp an envelope
    with the uuid the body had before its mutation (so that the body checks are reached).
    """
    m = draw(valid_messages(types))
    b = dict(m.body)
    names = sorted(set(p._COMMON) | set(SCHEMAS[m.type]))
    schema = {**p._COMMON, **SCHEMAS[m.type]}
    for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)):
        how = draw(st.integers(0, 5))
        if how == 0:
            b.pop(name, None)
        elif how <= 3:  # right JSON type, edge value: reaches the value checks
            b[name] = draw(_SAME_TYPE_EDGES[schema[name][0]])
        else:
            b[name] = draw(_hostile_value)
    raw = json.dumps(b, allow_nan=True).encode("utf-8", "surrogatepass")
    if with_uuid:
        return m.type.encode(), raw.replace(*_OVERFLOW_TEXT), m.uuid.encode()
    return m.type.encode(), raw.replace(*_OVERFLOW_TEXT)


def _shaped(*parts):
    return st.tuples(*parts).map(list)


random_frames = st.lists(st.binary(max_size=40), max_size=8)
_mutated = mutated_messages()
near_valid_3 = _shaped(_sig, _type, json_ish_bodies()) \
    | _mutated.map(lambda tb: [SIGNATURE, tb[0], tb[1]])
near_valid_4 = _shaped(_sig, _type, _ident, json_ish_bodies()) \
    | mutated_messages(CONTROL_LIST).map(lambda tb: [SIGNATURE, tb[0], AGENT.encode(), tb[1]])
_stamped = mutated_messages(with_uuid=True)
# relayed: SIGNATURE, ENVELOPE, BODY (and the old five-frame layout, now refused)
near_valid_relayed = _shaped(_sig, _envelope, json_ish_bodies()) \
    | _stamped.map(lambda tbu: [SIGNATURE, b"/".join((tbu[0], tbu[2], b"r")), tbu[1]]) \
    | _shaped(_sig, _type, _ident, _ident, json_ish_bodies())
# tail: ENVELOPE, SIGNATURE, BODY (and the frames of a relayed message in the wrong order)
near_valid_tail = _shaped(_envelope, _sig, json_ish_bodies()) \
    | _stamped.map(lambda tbu: [b"/".join((tbu[0], tbu[2], b"r")), SIGNATURE, tbu[1]]) \
    | _stamped.map(lambda tbu: [SIGNATURE, b"/".join((tbu[0], tbu[2], b"r")), tbu[1]]) \
    | _shaped(st.binary(max_size=12), _sig, _type, _ident, _ident, json_ish_bodies())


def _encodes_back(m: Message) -> None:
    """What a decoder accepted, a router or an agent can encode again, unchanged."""
    assert p.decode(p.encode(m)) == m


@FUZZ
@given(random_frames | near_valid_3)
def test_decode_never_raises_anything_but_protocol_error(fs):
    m = _only_protocol_errors(p.decode, fs)
    if m is not None:
        assert isinstance(m, Message)
        _encodes_back(m)
    m2 = _only_protocol_errors(lambda f: p.decode(f, allowed=AGENT_TYPES, max_body=32), fs)
    assert m2 is None or isinstance(m2, Message)


def _check_relayed(r: Relayed, envelope: bytes) -> None:
    """What decoded carries valid ids, and its envelope frame is the canonical one."""
    assert isinstance(r, Relayed) and r.uuid == r.message.uuid
    assert p.ID_PATTERN.fullmatch(r.uuid) and p.ID_PATTERN.fullmatch(r.router)
    # a subscriber filtering on topic() prefixes sees exactly what decodes
    assert envelope == p.envelope(r.message.type, r.uuid, r.router)
    assert envelope.startswith(p.topic(r.message.type, r.uuid))
    _encodes_back(r.message)


@FUZZ
@given(random_frames | near_valid_relayed)
def test_decode_relayed_never_raises_anything_but_protocol_error(fs):
    r = _only_protocol_errors(p.decode_relayed, fs)
    if r is not None:
        _check_relayed(r, fs[1])
        assert p.decode_relayed(p.encode_relayed(r.message, r.uuid, r.router)) == r


@FUZZ
@given(random_frames | near_valid_4)
def test_decode_control_never_raises_anything_but_protocol_error(fs):
    r = _only_protocol_errors(p.decode_control, fs)
    if r is not None:
        assert isinstance(r[0], str) and isinstance(r[1], Message)
        _encodes_back(r[1])


@FUZZ
@given(random_frames | near_valid_tail)
def test_decode_tail_never_raises_anything_but_protocol_error(fs):
    r = _only_protocol_errors(p.decode_tail, fs)
    if r is not None:
        _check_relayed(r, fs[0])
        assert p.decode_tail(p.encode_tail(r.message, r.uuid, r.router)) == r


@FEW
@given(valid_messages(), st.data())
def test_damaged_valid_message_never_escapes(m, data):
    fs = p.encode(m)
    i = data.draw(st.integers(0, 2))
    frame = fs[i]
    if frame:
        j = data.draw(st.integers(0, len(frame) - 1))
        frame = frame[:j] + bytes([data.draw(st.integers(0, 255))]) + frame[j + 1:]
        frame = frame[:data.draw(st.integers(0, len(frame)))]
    fs[i] = frame
    got = _only_protocol_errors(p.decode, fs)
    if got is not None:
        assert p.decode(p.encode(got)) == got, "whatever decodes must encode back"


# ---------------------------------------------------------------- malformed, table-driven

def _dec(fs, **kw):
    return p.decode(fs, **kw)


def _rel(fs, **kw):
    return p.decode_relayed(fs, **kw)


def _ctl(fs, **kw):
    return p.decode_control(fs, **kw)


def _tail(fs):
    return p.decode_tail(fs)


GOOD = frames("NOTIFY", body("NOTIFY"))
GOOD_REL = p.encode_relayed(msg("NOTIFY"), AGENT, ROUTER)
GOOD_CTL = p.encode_control(msg("ACK", uuid="alerting@h"), AGENT)
GOOD_TAIL = p.encode_tail(msg("NOTIFY"), AGENT, ROUTER)
A, R = AGENT.encode(), ROUTER.encode()
DEEP = b"[" * 100_000 + b"]" * 100_000


def _with(base, i, frame):
    out = list(base)
    out[i] = frame
    return out


def _b(type_, **fields):
    return frames(type_, body(type_, **fields))


def _raw(type_, text: bytes):
    return frames(type_, text)


def _env(envelope: bytes, data: bytes | None = None):
    """GOOD_REL with another ENVELOPE frame (and body)."""
    return [SIGNATURE, envelope, body("NOTIFY") if data is None else data]


def _tenv(envelope: bytes, data: bytes | None = None):
    """GOOD_TAIL with another ENVELOPE frame (and body)."""
    return [envelope, SIGNATURE, body("NOTIFY") if data is None else data]


def _relax(decoder, **kw):
    return lambda fs: decoder(fs, **kw)


MALFORMED = [
    # signature (section 3): first frame exactly "FWP" + 0x01
    ("signature-wrong", _dec, _with(GOOD, 0, b"XYZ\x01"), 400),
    ("signature-empty", _dec, _with(GOOD, 0, b""), 400),
    ("signature-short", _dec, _with(GOOD, 0, b"FWP"), 400),
    ("signature-long", _dec, _with(GOOD, 0, b"FWP\x01\x00"), 400),
    ("signature-lowercase", _dec, _with(GOOD, 0, b"fwp\x01"), 400),
    ("version-2", _dec, _with(GOOD, 0, b"FWP\x02"), 505),
    ("version-0", _dec, _with(GOOD, 0, b"FWP\x00"), 505),
    ("version-2-relayed", _rel, _with(GOOD_REL, 0, b"FWP\x02"), 505),
    ("version-2-control", _ctl, _with(GOOD_CTL, 0, b"FWP\x02"), 505),
    ("version-2-tail", _tail, _with(GOOD_TAIL, 1, b"FWP\x02"), 505),
    # a v2 peer's new type and new body are answered 505, not 400
    ("version-2-new-type", _dec, [b"FWP\x02", b"SUBSCRIBE", b"\x00binary"], 505),
    # frame counts
    ("no-frames", _dec, [], 400),
    ("missing-body", _dec, GOOD[:2], 400),
    ("extra-frame", _dec, GOOD + [b""], 400),
    ("relayed-missing-body", _rel, GOOD_REL[:2], 400),
    ("relayed-missing-envelope", _rel, [SIGNATURE, GOOD_REL[2]], 400),
    ("relayed-extra", _rel, GOOD_REL + [b"x"], 400),
    ("relayed-as-agents-layout", _rel, GOOD, 400),
    # the five-frame layout of before the ENVELOPE frame is refused, not misread
    ("relayed-old-5-frames", _rel, [SIGNATURE, b"NOTIFY", A, R, body("NOTIFY")], 400),
    ("control-missing-target", _ctl, GOOD, 400),
    ("control-extra", _ctl, GOOD_CTL + [b""], 400),
    ("tail-missing-envelope", _tail, GOOD_TAIL[1:], 400),
    ("tail-extra", _tail, GOOD_TAIL + [b""], 400),
    ("tail-old-6-frames", _tail, [b"NOTIFY/" + A, SIGNATURE, b"NOTIFY", A, R, body("NOTIFY")],
     400),
    # frames in the wrong order
    ("tail-in-relayed-order", _tail, GOOD_REL, 400),
    ("relayed-in-tail-order", _rel, GOOD_TAIL, 400),
    ("tail-signature-last", _tail, [GOOD_TAIL[0], GOOD_TAIL[2], SIGNATURE], 400),
    ("tail-body-first", _tail, [GOOD_TAIL[2], SIGNATURE, GOOD_TAIL[0]], 400),
    ("relayed-body-before-envelope", _rel, [SIGNATURE, GOOD_REL[2], GOOD_REL[1]], 400),
    ("relayed-signature-last", _rel, [GOOD_REL[1], GOOD_REL[2], SIGNATURE], 400),
    # type frame
    ("type-unknown", _dec, _with(GOOD, 1, b"BOGUS"), 400),
    ("type-lowercase", _dec, _with(GOOD, 1, b"notify"), 400),
    ("type-empty", _dec, _with(GOOD, 1, b""), 400),
    ("type-padded", _dec, _with(GOOD, 1, b"NOTIFY "), 400),
    ("type-non-ascii", _dec, _with(GOOD, 1, "NOTIFY\u00c9".encode()), 400),
    ("type-invalid-bytes", _dec, _with(GOOD, 1, b"NOT\xff"), 400),
    ("type-huge", _dec, _with(GOOD, 1, b"A" * 100_000), 400),
    # type not accepted on the socket: 405
    ("ack-on-agents", lambda fs: p.decode(fs, allowed=AGENT_TYPES), _b("ACK"), 405),
    ("welcome-relayed", lambda fs: p.decode_relayed(fs, allowed=AGENT_TYPES),
     p.encode_relayed(msg("WELCOME"), AGENT, ROUTER), 405),
    ("ack-relayed", _relax(p.decode_relayed, allowed=AGENT_TYPES),
     p.encode_relayed(msg("ACK"), AGENT, ROUTER), 405),
    ("run-relayed-bad-body", _relax(p.decode_relayed, allowed=AGENT_TYPES),
     _env(b"RUN/" + A + b"/" + R, b"{}"), 405),
    ("notify-on-control", _ctl, p.encode_control(msg("NOTIFY"), AGENT), 405),
    ("error-on-control", _ctl, p.encode_control(msg("ERROR")), 405),
    # body: size, encoding, JSON
    ("body-too-large", _dec, _raw("NOTIFY", b" " * (MAX_BODY + 1)), 413),
    ("body-over-custom-limit", lambda fs: p.decode(fs, max_body=64), _b("NOTIFY"), 413),
    ("relayed-body-too-large", lambda fs: p.decode_relayed(fs, max_body=16), GOOD_REL, 413),
    ("control-body-too-large", lambda fs: p.decode_control(fs, max_body=16), GOOD_CTL, 413),
    ("body-empty", _dec, _raw("NOTIFY", b""), 400),
    ("body-truncated", _dec, _raw("NOTIFY", body("NOTIFY")[:-1]), 400),
    ("body-trailing-garbage", _dec, _raw("NOTIFY", body("NOTIFY") + b"x"), 400),
    ("body-array", _dec, _raw("NOTIFY", b"[]"), 400),
    ("body-string", _dec, _raw("NOTIFY", b'"NOTIFY"'), 400),
    ("body-number", _dec, _raw("NOTIFY", b"1"), 400),
    ("body-null", _dec, _raw("NOTIFY", b"null"), 400),
    ("body-NaN", _dec, _raw("HEARTBEAT", b'{"msg_id":"m","uuid":"u","ts":NaN}'), 400),
    ("body-Infinity", _dec, _raw("HEARTBEAT", b'{"msg_id":"m","uuid":"u","ts":Infinity}'), 400),
    ("body--Infinity", _dec, _raw("HEARTBEAT", b'{"msg_id":"m","uuid":"u","ts":-Infinity}'), 400),
    ("body-NaN-in-extra-field", _dec, _raw("HEARTBEAT",
                                           b'{"msg_id":"m","uuid":"u","ts":1,"x":[NaN]}'), 400),
    ("body-1e400-overflows", _dec, _raw("HEARTBEAT", b'{"msg_id":"m","uuid":"u","ts":1e400}'), 400),
    ("body-1e400-heartbeat", _dec, _raw("HELLO", body("HELLO").replace(b'"heartbeat": 2.0',
                                                                 b'"heartbeat": 1e400')), 400),
    ("body-huge-int-ts", _dec, _raw("HEARTBEAT",
                                    b'{"msg_id":"m","uuid":"u","ts":1' + b"0" * 400 + b"}"), 400),
    # times: epoch seconds from 1970 to the end of year 9999 (SPEC 4), ts and RESULT started
    ("ts-past-year-9999", _dec, _raw("NOTIFY", body("NOTIFY", ts=1e15)), 400),
    ("ts-year-10000", _dec, _raw("NOTIFY", body("NOTIFY", ts=p.TS_END)), 400),
    ("ts-before-1970", _dec, _raw("HEARTBEAT", b'{"msg_id":"m","uuid":"u","ts":-1}'), 400),
    ("relayed-ts-past-year-9999", p.decode_relayed, p.encode_relayed(
        p.make("NOTIFY", "u", clock=lambda: 1e15, severity="info", text="x"), "u", "r"), 400),
    ("result-started-past-year-9999", _dec, _raw("RESULT", body(
        "RESULT", command_id="c", plugin="p", status=0, output="", started=1e15)), 400),
    ("body-5000-digit-int", _dec,
     _raw("HEARTBEAT", b'{"msg_id":"m","uuid":"u","ts":' + b"9" * 5000 + b"}"), 400),
    ("body-invalid-utf8", _dec, _raw("NOTIFY", body("NOTIFY").replace(b"critical", b"crit\xff")),
     400),
    ("body-overlong-utf8", _dec, _raw("NOTIFY", body("NOTIFY", text="x").replace(b'"x"',
                                                                          b'"\xc0\xafx"')), 400),
    ("body-utf16", _dec, _raw("NOTIFY", json.dumps(json.loads(body("NOTIFY"))).encode("utf-16")),
     400),
    ("body-utf8-bom", _dec, _raw("NOTIFY", b"\xef\xbb\xbf" + body("NOTIFY")), 400),
    ("body-lone-surrogate", _dec, _raw("NOTIFY", body("NOTIFY", text="x").replace(b'"x"',
                                                                           b'"\\ud800"')), 400),
    ("body-deep-nesting", _dec, _raw("NOTIFY", DEEP), 400),
    ("body-deep-nesting-in-field", _dec, _raw("HELLO", body("HELLO", plugins=[]).replace(
        b'"plugins": []', b'"plugins": ' + DEEP)), 400),
    ("body-deep-objects", _dec, _raw("NOTIFY", b'{"a":' * 20_000 + b"1" + b"}" * 20_000), 400),
    # common fields
    ("ts-string", _dec, _b("NOTIFY", ts="1700000000"), 400),
    ("ts-bool", _dec, _b("NOTIFY", ts=True), 400),
    ("ts-null", _dec, _b("NOTIFY", ts=None), 400),
    ("msg_id-number", _dec, _b("NOTIFY", msg_id=123), 400),
    ("msg_id-empty", _dec, _b("NOTIFY", msg_id=""), 400),
    ("msg_id-65", _dec, _b("NOTIFY", msg_id="a" * 65), 400),
    ("uuid-empty", _dec, _b("NOTIFY", uuid=""), 400),
    ("uuid-65", _dec, _b("NOTIFY", uuid="u" * 65), 400),
    ("uuid-list", _dec, _b("NOTIFY", uuid=[AGENT]), 400),
    # uuid: ID_PATTERN, so that it can stand between the slashes of an envelope
    ("uuid-slash", _dec, _b("NOTIFY", uuid="a/b"), 400),
    ("uuid-only-slash", _dec, _b("NOTIFY", uuid="/"), 400),
    ("uuid-space", _dec, _b("NOTIFY", uuid="a b"), 400),
    ("uuid-leading-space", _dec, _b("NOTIFY", uuid=" " + AGENT), 400),
    ("uuid-trailing-newline", _dec, _b("NOTIFY", uuid=AGENT + "\n"), 400),
    ("uuid-tab", _dec, _b("NOTIFY", uuid="a\tb"), 400),
    ("uuid-nul", _dec, _b("NOTIFY", uuid="a\x00"), 400),
    ("uuid-leading-dash", _dec, _b("NOTIFY", uuid="-a"), 400),
    ("uuid-leading-dot", _dec, _b("NOTIFY", uuid=".a"), 400),
    ("uuid-leading-at", _dec, _b("NOTIFY", uuid="@a"), 400),
    ("uuid-leading-underscore", _dec, _b("NOTIFY", uuid="_a"), 400),
    ("uuid-backslash", _dec, _b("NOTIFY", uuid="a\\b"), 400),
    ("uuid-non-ascii", _dec, _b("NOTIFY", uuid="\u00e9t\u00e9"), 400),
    ("uuid-non-ascii-digit", _dec, _b("NOTIFY", uuid="\u0661\u0662"), 400),
    ("uuid-kelvin-sign", _dec, _b("NOTIFY", uuid="\u212a"), 400),
    ("uuid-slash-hello", _dec, _b("HELLO", uuid="a/b"), 400),
    ("uuid-space-control", _ctl, p.encode_control(msg("PEERS", uuid="cli host")), 400),
    ("uuid-slash-control", _ctl, p.encode_control(msg("ACK", uuid="sink/1"), AGENT), 400),
    ("retry-negative", _dec, _b("NOTIFY", retry=-1), 400),
    ("retry-float", _dec, _b("NOTIFY", retry=1.0), 400),
    ("retry-bool", _dec, _b("NOTIFY", retry=True), 400),
    ("dup-string", _dec, _b("NOTIFY", dup="true"), 400),
    ("dup-int", _dec, _b("NOTIFY", dup=1), 400),
    # type-specific fields
    ("severity-unknown", _dec, _b("NOTIFY", severity="fatal"), 400),
    ("severity-uppercase", _dec, _b("NOTIFY", severity="INFO"), 400),
    ("severity-number", _dec, _b("NOTIFY", severity=3), 400),
    ("text-null", _dec, _b("NOTIFY", text=None), 400),
    ("metrics-list", _dec, _b("STATS", metrics=[["cpu", 1.0]]), 400),
    ("metrics-string", _dec, _b("STATS", metrics="cpu=1"), 400),
    ("metric-string", _dec, _b("STATS", metrics={"cpu": "1.0"}), 400),
    ("metric-bool", _dec, _b("STATS", metrics={"up": True}), 400),
    ("metric-null", _dec, _b("STATS", metrics={"cpu": None}), 400),
    ("metric-nested", _dec, _b("STATS", metrics={"cpu": {"user": 1}}), 400),
    ("metric-NaN", _dec, _raw("STATS", body("STATS", metrics={"cpu": 0.5}).replace(b"0.5", b"NaN")),
     400),
    ("metric-1e999", _dec, _raw("STATS", body("STATS", metrics={"cpu": 0.5}).replace(b"0.5",
                                                                               b"1e999")), 400),
    ("metric-huge-int", _dec, _raw("STATS", body("STATS", metrics={"cpu": 0.5}).replace(
        b"0.5", b"9" * 400)), 400),
    ("heartbeat-bool", _dec, _b("HELLO", heartbeat=True), 400),
    ("heartbeat-zero", _dec, _b("HELLO", heartbeat=0), 400),
    ("heartbeat-negative", _dec, _b("HELLO", heartbeat=-2.0), 400),
    ("heartbeat-string", _dec, _b("HELLO", heartbeat="2"), 400),
    ("hostname-number", _dec, _b("HELLO", hostname=1), 400),
    ("plugins-mapping", _dec, _b("HELLO", plugins={"a": 1}), 400),
    ("msg_ids-string", _dec, _b("ACK", msg_ids="abc"), 400),
    ("msg_ids-numbers", _dec, _b("ACK", msg_ids=[1, 2]), 400),
    ("msg_ids-null-item", _dec, _b("ACK", msg_ids=["a", None]), 400),
    ("routers-not-strings", _dec, _b("WELCOME", routers=["tcp://r1:5555", 5555]), 400),
    ("routers-string", _dec, _b("WELCOME", routers="tcp://r1:5555"), 400),
    ("endpoints-list", _dec, _b("WELCOME", endpoints=["tcp://r1:5555"]), 400),
    ("result-status-4", _dec, _b("RESULT", status=4), 400),
    ("result-status-negative", _dec, _b("RESULT", status=-1), 400),
    ("result-status-float", _dec, _b("RESULT", status=2.0), 400),
    ("result-status-bool", _dec, _b("RESULT", status=True), 400),
    # the agent run and sequence that order results (section 4.5)
    ("result-boot-empty", _dec, _b("RESULT", boot=""), 400),
    ("result-boot-too-long", _dec, _b("RESULT", boot="b" * 65), 400),
    ("result-seq-negative", _dec, _b("RESULT", seq=-1), 400),
    ("result-seq-huge", _dec, _b("RESULT", seq=2.0 ** 53), 400),
    ("run-timeout-bool", _dec, _b("RUN", timeout=False), 400),
    ("error-status-string", _dec, _b("ERROR", status="404"), 400),
    # relayed stamps (section 4.1): the ENVELOPE frame TYPE/UUID/ROUTER
    ("relayed-uuid-differs", _rel, _env(b"NOTIFY/someone-else/" + R), 403),
    ("tail-uuid-differs", _tail, _tenv(b"NOTIFY/x/" + R), 403),
    ("relayed-body-uuid-differs", _rel, _env(b"NOTIFY/" + A + b"/" + R,
                                             body("NOTIFY", uuid="other")), 403),
    ("envelope-empty", _rel, _env(b""), 400),
    ("envelope-1-part", _rel, _env(b"NOTIFY"), 400),
    ("envelope-2-parts", _rel, _env(b"NOTIFY/" + A), 400),
    ("envelope-2-parts-slash", _rel, _env(b"NOTIFY/" + A + b"/"), 400),
    ("envelope-4-parts", _rel, _env(b"NOTIFY/" + A + b"/" + R + b"/x"), 400),
    ("envelope-trailing-slash", _rel, _env(b"NOTIFY/" + A + b"/" + R + b"/"), 400),
    ("envelope-leading-slash", _rel, _env(b"/NOTIFY/" + A + b"/" + R), 400),
    ("envelope-double-slash", _rel, _env(b"NOTIFY//" + A + b"/" + R), 400),
    ("envelope-only-slashes", _rel, _env(b"//"), 400),
    ("envelope-type-empty", _rel, _env(b"/" + A + b"/" + R), 400),
    ("envelope-uuid-empty", _rel, _env(b"NOTIFY//" + R), 400),
    ("envelope-router-empty", _rel, _env(b"NOTIFY/" + A + b"/"), 400),
    ("envelope-type-unknown", _rel, _env(b"BOGUS/" + A + b"/" + R), 400),
    ("envelope-type-lowercase", _rel, _env(b"notify/" + A + b"/" + R), 400),
    ("envelope-type-padded", _rel, _env(b"NOTIFY /" + A + b"/" + R), 400),
    ("envelope-type-non-ascii", _rel, _env("NOTIFY\u00c9/".encode() + A + b"/" + R), 400),
    ("envelope-type-invalid-bytes", _rel, _env(b"NOT\xff/" + A + b"/" + R), 400),
    ("envelope-uuid-65", _rel, _env(b"NOTIFY/" + b"u" * 65 + b"/" + R,
                                    body("NOTIFY", uuid="u" * 65)), 400),
    ("envelope-uuid-non-ascii", _rel, _env("NOTIFY/\u00e9/".encode() + R,
                                           body("NOTIFY", uuid="\u00e9")), 400),
    ("envelope-uuid-invalid-bytes", _rel, _env(b"NOTIFY/a\xff/" + R), 400),
    ("envelope-uuid-space", _rel, _env(b"NOTIFY/a b/" + R, body("NOTIFY", uuid="a b")), 400),
    ("envelope-uuid-leading-dash", _rel, _env(b"NOTIFY/-a/" + R, body("NOTIFY", uuid="-a")),
     400),
    ("envelope-uuid-newline", _rel, _env(b"NOTIFY/" + A + b"\n/" + R), 400),
    ("envelope-router-65", _rel, _env(b"NOTIFY/" + A + b"/" + b"r" * 65), 400),
    ("envelope-router-non-ascii", _rel, _env(b"NOTIFY/" + A + b"/r\xff"), 400),
    ("envelope-router-utf8", _rel, _env(b"NOTIFY/" + A + "/r\u00e9".encode()), 400),
    ("envelope-router-space", _rel, _env(b"NOTIFY/" + A + b"/r 1"), 400),
    ("envelope-router-nul", _rel, _env(b"NOTIFY/" + A + b"/r\x00"), 400),
    ("envelope-too-long", _rel, _env(b"NOTIFY/" + A + b"/" + b"r" * 200), 400),
    ("envelope-huge", _rel, _env(b"NOTIFY/" + b"A" * 100_000), 400),
    # a bad envelope is refused before the body is read: 400, not 413
    ("envelope-bad-body-large", _relax(p.decode_relayed, max_body=16),
     _env(b"NOTIFY/" + A), 400),
    ("tail-envelope-wrong-type", _tail, _tenv(b"STATS/" + A + b"/" + R), 400),
    ("tail-envelope-wrong-uuid", _tail, _tenv(b"NOTIFY/other/" + R), 403),
    ("tail-envelope-empty", _tail, _tenv(b""), 400),
    ("tail-envelope-topic-only", _tail, _tenv(p.topic("NOTIFY", AGENT)), 400),
    ("tail-envelope-type-topic", _tail, _tenv(p.topic("NOTIFY")), 400),
    ("tail-envelope-4-parts", _tail, _tenv(b"NOTIFY/" + A + b"/" + R + b"/x"), 400),
    ("tail-envelope-type-unknown", _tail, _tenv(b"BOGUS/" + A + b"/" + R), 400),
    ("tail-envelope-router-non-ascii", _tail, _tenv(b"NOTIFY/" + A + b"/\xe9"), 400),
    # control targets (section 4.3)
    ("ack-without-target", _ctl, p.encode_control(msg("ACK")), 400),
    ("run-without-target", _ctl, p.encode_control(msg("RUN")), 400),
    ("target-65", _ctl, _with(GOOD_CTL, 2, b"t" * 65), 400),
    ("target-non-ascii", _ctl, _with(GOOD_CTL, 2, b"\xe9"), 400),
    ("target-slash", _ctl, _with(GOOD_CTL, 2, A + b"/x"), 400),
    ("target-space", _ctl, _with(GOOD_CTL, 2, b"a b"), 400),
    ("target-leading-dash", _ctl, _with(GOOD_CTL, 2, b"-a"), 400),
    ("control-body-bad", _ctl, _with(GOOD_CTL, 3, b"{}"), 400),
]


@pytest.mark.parametrize("decoder, fs, status", [c[1:] for c in MALFORMED],
                         ids=[c[0] for c in MALFORMED])
def test_malformed(decoder, fs, status):
    assert status_of(decoder, fs) == status


def test_good_baselines_decode():
    """The malformed table changes one thing in each of these; they must be valid."""
    assert p.decode(GOOD).type == "NOTIFY"
    assert p.decode_relayed(GOOD_REL).uuid == AGENT
    assert p.decode_control(GOOD_CTL)[0] == AGENT
    assert p.decode_tail(GOOD_TAIL).router == ROUTER


def _required(type_):
    return [(type_, n) for s in (p._COMMON, SCHEMAS[type_]) for n, (_, req) in s.items() if req]


@pytest.mark.parametrize("type_, name", [c for t in TYPE_LIST for c in _required(t)],
                         ids=lambda v: str(v))
def test_missing_required_field(type_, name):
    with pytest.raises(ProtocolError) as info:
        p.decode(frames(type_, body(type_, drop=(name,))))
    assert info.value.status == 400 and name in info.value.reason


_WRONG = {p._STR: [1, None, ["s"]], p._NUMBER: ["1", True, None, [1]],
          (int,): ["1", 1.5, False], p._LIST: ["x", {"a": 1}, 1], p._DICT: [[], "x", 1],
          p._BOOL: [1, "true", None]}


def _wrong_typed():
    for type_ in TYPE_LIST:
        for schema in (p._COMMON, SCHEMAS[type_]):
            for name, (tps, _) in schema.items():
                for value in _WRONG[tps]:
                    yield type_, name, value


@pytest.mark.parametrize("type_, name, value", list(_wrong_typed()), ids=lambda v: repr(v)[:20])
def test_every_field_refuses_a_wrong_type(type_, name, value):
    with pytest.raises(ProtocolError) as info:
        p.decode(frames(type_, body(type_, **{name: value})))
    assert info.value.status == 400


@pytest.mark.parametrize("type_", TYPE_LIST)
def test_optional_fields_may_be_absent(type_):
    optional = tuple(n for n, (_, req) in SCHEMAS[type_].items() if not req)
    assert p.decode(frames(type_, body(type_, drop=optional))).type == type_


def test_boundaries_that_are_valid():
    assert p.decode(_b("NOTIFY", msg_id="a" * 64, uuid="u" * 64)).msg_id == "a" * 64
    # msg_id is not an id of ID_PATTERN: any 1 to 64 characters
    assert p.decode(_b("NOTIFY", msg_id="a/b c\u00e9")).msg_id == "a/b c\u00e9"
    for uuid in ("0", "Z", "a.b", "a:b", "a@b", "a-b", "a-", "9" * 64, "A0._:@-", "cli@host.ex", "a_b"):
        assert p.decode(_b("NOTIFY", uuid=uuid)).uuid == uuid
        assert p.decode_relayed(_env(f"NOTIFY/{uuid}/{uuid}".encode(),
                                     body("NOTIFY", uuid=uuid))) == \
            Relayed(uuid, uuid, p.decode(_b("NOTIFY", uuid=uuid)))
    assert p.decode(_b("NOTIFY", retry=0, dup=False)).body["retry"] == 0
    assert p.decode(_b("ACK", msg_ids=[])).body["msg_ids"] == []
    assert p.decode(_b("STATS", metrics={})).body["metrics"] == {}
    assert p.decode(_b("RESULT", status=0)).body["status"] == 0
    assert p.decode(_b("RESULT", status=3)).body["status"] == 3
    assert p.decode(_b("HELLO", heartbeat=1e-3)).body["heartbeat"] == 1e-3
    assert p.decode(_b("STATS", metrics={"big": 1e308, "neg": -1e308, "int": 2 ** 62}))
    for sev in p.SEVERITIES:
        assert p.decode(_b("NOTIFY", severity=sev)).body["severity"] == sev
    # a valid surrogate pair is an ordinary character
    pair = body("NOTIFY", text="x").replace(b'"x"', b'"\\ud83d\\ude00"')
    assert p.decode(frames("NOTIFY", pair)).body["text"] == "\U0001F600"
    # an escaped backslash followed by "ud800" is not a surrogate
    assert p.decode(_b("NOTIFY", text="\\ud800")).body["text"] == "\\ud800"
    # HELLO and PEERS on control with an empty target
    assert p.decode_control(p.encode_control(msg("PEERS", minimal=True)))[0] == ""


def test_body_of_exactly_max_body_is_accepted():
    data = body("NOTIFY", text="")
    data = data.replace(b'"text": ""', b'"text": "' + b"x" * (MAX_BODY - len(data)) + b'"')
    assert len(data) == MAX_BODY
    assert p.decode(frames("NOTIFY", data)).type == "NOTIFY"
    assert status_of(p.decode, frames("NOTIFY", data + b" ")) == 413


def test_size_is_checked_before_parsing():
    # an oversized body of garbage is 413, not 400: no parsing work is spent on it
    assert status_of(p.decode, _raw("NOTIFY", b"\xff" * (MAX_BODY + 1))) == 413


def test_signature_is_checked_before_type_and_body():
    assert status_of(p.decode, [b"XXXX", b"BOGUS", b"not json"]) == 400
    assert status_of(p.decode, [b"FWP\x02", b"ACK", b""],
                     allowed=AGENT_TYPES) == 505


def test_decoded_numbers_are_finite_everywhere():
    """Whatever decodes can be encoded again (encode_body refuses NaN and infinities)."""
    m = p.decode(_b("RUN", timeout=1e308, extra=[1e-308, -0.0]))
    assert all(math.isfinite(v) for v in (m.body["timeout"], *m.body["extra"]))
    assert p.decode(p.encode(m)) == m


def test_number_takes_finite_numbers_only():
    """p.number: how readers (the query layer) take a number from a body, a router's
    answer or a row: never a bool, a string, NaN or an infinity."""
    assert p.number(3) == 3.0 and isinstance(p.number(3), float)
    assert p.number(2.5) == 2.5
    for bad in (True, False, "3", None, float("nan"), float("inf"), -float("inf"), [1]):
        assert p.number(bad) is None, bad


def test_a_devices_uuid_is_its_pollers_and_its_slug():
    poller = "3f2c9a0e-1b7d-4c5e-8f6a-1b2c3d4e5f60"             # an agent's: a UUID
    assert p.device_uuid(poller, "core-sw1") == f"{poller}@core-sw1"
    long_name = p.device_uuid(poller, "a switch with spaces / and more")
    assert len(long_name) == 36 + 1 + 24 and p.ID_PATTERN.fullmatch(long_name)
    assert len(p.device_uuid(poller, "x" * 27)) == 64
    assert p.device_uuid(poller, "a switch with spaces / and more") == long_name
    assert p.poller_of(long_name) == poller
    assert p.poller_of(poller) is None
    assert p.poller_of(f"{poller}@a@b") is None          # no device of a device
    assert p.poller_of("@x") is None and p.poller_of("x@") is None
    with pytest.raises(ValueError, match="at most 36 characters"):
        p.device_uuid("p" * 40, "sw")
    with pytest.raises(ValueError):
        p.device_uuid("a@b", "sw")
