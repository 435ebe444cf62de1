"""The ``matrix`` channel (issue 34) against a real homeserver: Synapse from PyPI, started once
for the session on 127.0.0.1 with SQLite (tests/support/synapse.py), its users made through
the admin API with the shared secret, a room per test; then the channel's local stand-in
(fleetwatch/cli/demo/receivers/matrix.py ``Matrix``), which the demo runs.

A problem is a message in the room, read back through the client API; its acknowledgement
and recovery are replies to it (the problem's event id, recorded as its delivery's message
id) and the problem's message is edited; what an agent wrote is escaped and pings nobody
(Synapse's own push rules say so: no highlight for another member); an outbox row sent
again after a crash is one event (same transaction id); a 429 is waited out; a token
logged out fails the alert and the channel at once; the token is in no log line and no
delivery; a group is one message. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import time
import urllib.parse
from types import SimpleNamespace

import pytest

from support import synapse as homeserver
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(90)

from fleetwatch.cli.demo.receivers.matrix import Matrix, dropped_tags  # noqa: E402
from sinks.alerting.delivery import store as outbox  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from sinks.alerting.delivery.services.matrix import JOINER, MatrixSender  # noqa: E402
from support.delivering import U1, enqueue, fast, recorded, secret_file, sent  # noqa: E402
from support.delivering import check_event as event  # noqa: E402

PASSWORDS = {"alice": "alice-pw-1", "bob": "bob-pw-2"}
HOSTILE = ("@room @bob:localhost bob <script>alert(1)</script> <a href='https://evil.example'>x"
           "</a> **b** https://evil.example &amp; \x1b[31m")


@pytest.fixture(scope="session")
def synapse(tmp_path_factory):
    """One Synapse for the session, with alice (an admin: she makes the rooms) and bob (a
    member who reads); ``users`` and ``passwords`` by name."""
    if not homeserver.available():
        pytest.skip("Synapse is not installed (pip install matrix-synapse: the test extra)")
    server = homeserver.Synapse(tmp_path_factory.mktemp("synapse"))
    server.start()
    try:
        server.passwords = dict(PASSWORDS)
        server.users = {name: server.register(name, pw, admin=name == "alice")
                        for name, pw in PASSWORDS.items()}
        logging.getLogger(__name__).info("Synapse ready in %.2f s", server.started_in)
        yield server
    finally:
        server.stop()


@pytest.fixture
def room(synapse, tmp_path):
    """A new room of ``user`` (alice unless said) with bob in it, and a new token of
    ``user`` (a device of its own) in a file."""
    def make(user: str = "alice") -> SimpleNamespace:
        token = synapse.login(user, synapse.passwords[user])
        owner = synapse.users["alice"]["access_token"]
        room_id = synapse.create_room(owner)
        for member in {"bob", user} - {"alice"}:
            synapse.join(synapse.users[member]["access_token"], room_id)
        return SimpleNamespace(id=room_id, token=token,
                               token_file=secret_file(tmp_path, f"matrix-token-{user}", token),
                               bob=synapse.users["bob"]["access_token"])
    return make


@pytest.fixture
def deliver(deliverers):
    """``deliver(channel, **extra)``: a deliverer thread with the matrix channel ``ops``,
    every check alert routed to it (``extra``: more delivery settings)."""
    def start(channel: dict, **extra) -> DeliveryConfig:
        config = fast({"ops": {"type": "matrix", "timeout": 5, **channel}}, kinds=["check"],
                      **extra)
        deliverers(config)
        return config
    return start


def channel(synapse, r) -> dict:
    return {"homeserver": synapse.url, "room": r.id, "token_file": r.token_file}


def highlighted(synapse, r, event_id: str) -> bool:
    """Whether Synapse's push rules made ``event_id`` a mention for bob."""
    for n in synapse.notifications(r.bob):
        if n["event"]["event_id"] == event_id:
            return any(isinstance(a, dict) and a.get("set_tweak") == "highlight" and
                       a.get("value", True) for a in n["actions"])
    raise AssertionError(f"no notification of {event_id} for bob")


def test_a_problem_then_its_ack_and_recovery_as_replies(eng, synapse, room, deliver):
    r = room()
    config = deliver(channel(synapse, r), console_url="https://fleet.example.com/")
    enqueue(eng, config, event())
    (problem,) = wait_for(lambda: synapse.messages(r.bob, r.id), 20, interval=0.05,
                          what="the problem in the room")
    c = problem["content"]
    assert c["body"].startswith("CRITICAL web-1/check_disk: DISK CRITICAL - / 95%\n")
    assert c["formatted_body"].startswith(
        "<strong>CRITICAL</strong> <code>web-1</code> / <code>check_disk</code>")
    assert c["formatted_body"].endswith(
        f'<a href="https://fleet.example.com/hosts/{U1}">Open in the console</a>')
    assert c["m.mentions"] == {} and problem["sender"] == synapse.users["alice"]["user_id"]
    (first,) = wait_for(lambda: sent(eng), 20, interval=0.05, what="its delivery recorded")
    assert (first["status"], first["message_id"]) == ("HTTP 200", problem["event_id"])
    assert first["answer"] == f'{{"event_id":"{problem["event_id"]}"}}'
    for n, action in enumerate(("acknowledge", "resolve"), start=2):
        enqueue(eng, config, event(action))
        wait_for(lambda: len(sent(eng)) == n, 20, interval=0.05, what=f"the {action}")
        follow = sent(eng)[-1]
        found = {m["event_id"]: m for m in synapse.messages(r.bob, r.id)}
        reply = found[follow["message_id"]]["content"]
        assert reply["m.relates_to"] == {"m.in_reply_to": {"event_id": problem["event_id"]}}
        assert reply["body"].startswith("ACKNOWLEDGED" if action == "acknowledge"
                                        else "RECOVERY")
    # and the problem's message says it is over (an edit: m.replace)
    edits = wait_for(lambda: [m["content"] for m in synapse.messages(r.bob, r.id)
                              if m["content"].get("m.relates_to", {}).get("rel_type") ==
                              "m.replace"], 20, interval=0.05, what="the edits")
    assert [e["m.relates_to"]["event_id"] for e in edits] == [problem["event_id"]] * 2
    assert edits[-1]["m.new_content"]["body"].startswith("RESOLVED (see the replies)\n"
                                                          "CRITICAL web-1/check_disk")
    assert len(synapse.messages(r.bob, r.id)) == 5      # problem, 2 replies, 2 edits


def test_what_an_agent_wrote_pings_nobody_and_links_nothing(eng, synapse, room, deliver):
    r = room()
    config = deliver(channel(synapse, r))
    enqueue(eng, config, event(hostname=f"web-1 {HOSTILE}", summary=HOSTILE,
                               text=f"{HOSTILE}\nsecond line"))
    (m,) = wait_for(lambda: synapse.messages(r.bob, r.id), 20, interval=0.05,
                    what="the message")
    c = m["content"]
    for said in (c["body"], c["formatted_body"]):
        assert "@room" not in said and "@bob:localhost" not in said
        assert "https://evil" not in said and "\x1b" not in said
        assert f"@{JOINER}room" in said and "\\x1b[31m" in said
    assert "<script" not in c["formatted_body"] and "<a " not in c["formatted_body"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in c["formatted_body"]
    assert "&amp;amp;" in c["formatted_body"] and dropped_tags(c["formatted_body"]) == []
    # Synapse's push rules: the @room, bob's ID and bob's name make no mention
    wait_for(lambda: any(n["event"]["event_id"] == m["event_id"]
                         for n in synapse.notifications(r.bob)), 10, interval=0.05,
             what="bob's notification")
    assert highlighted(synapse, r, m["event_id"]) is False
    # where a plain "@room" of the room's admin does ping bob (the rule is live)
    where = urllib.parse.quote(r.id, safe="")
    raw = synapse.call("PUT", f"/_matrix/client/v3/rooms/{where}/send/m.room.message/raw1",
                       r.token, {"msgtype": "m.text", "body": "@room look"})
    wait_for(lambda: any(n["event"]["event_id"] == raw["event_id"]
                         for n in synapse.notifications(r.bob)), 10, interval=0.05,
             what="the control's notification")
    assert highlighted(synapse, r, raw["event_id"]) is True


def test_an_outbox_row_sent_again_after_a_crash_is_one_event(eng, synapse, room, deliver):
    r = room()
    config = deliver(channel(synapse, r))
    ops = config.parsed_channels()["ops"]
    # a sink that claims the row (with its recording: no other sink sees it before), sends
    # it, and dies before recording that it did
    with eng.begin() as conn:
        outbox.enqueue(conn, event(), config)
        (row,) = outbox.claim(conn, "dying-sink", time.time(), 1.0, 10, ["ops"])
    before = MatrixSender("ops", ops).send(row["event"], ref=str(row["id"])).message_id
    (first,) = wait_for(lambda: sent(eng), 20, interval=0.05,
                        what="the row sent again once its claim expired")
    assert first["message_id"] == before
    assert [m["event_id"] for m in synapse.messages(r.bob, r.id)] == [before]


def test_a_rate_limit_is_waited_out(eng, synapse, room, deliver):
    carol = f"carol{len(synapse.users)}"             # a sender of its own, limited
    synapse.passwords[carol] = f"{carol}-pw"
    synapse.users[carol] = synapse.register(carol, synapse.passwords[carol])
    r = room(carol)
    synapse.limit(synapse.users["alice"]["access_token"],
                  synapse.users[carol]["user_id"], 1, 1)       # one now, then one a second
    config = deliver(channel(synapse, r))
    for n in range(2):
        enqueue(eng, config, event(key=f"{U1}/check/c{n}", check=f"c{n}"))
    wait_for(lambda: len(sent(eng)) == 2, 30, interval=0.05, what="both sent")
    limited = [d for d in recorded(eng) if d["status"] == "HTTP 429"]
    assert limited and limited[0]["outcome"] == "retry"
    assert "M_LIMIT_EXCEEDED" in limited[0]["answer"]
    # the next try of that alert came after the wait Synapse asked (Retry-After: 1 s)
    key = limited[0]["key"]
    (later,) = [d for d in sent(eng) if d["key"] == key]
    assert _at(later) - _at([d for d in limited if d["key"] == key][-1]) >= 0.9
    assert len(synapse.messages(r.bob, r.id)) == 2


def _at(delivery: dict) -> float:
    """When an attempt started (its ``started_at``), in seconds."""
    from datetime import datetime
    return datetime.fromisoformat(str(delivery["started_at"]).replace("Z", "+00:00")) \
        .timestamp()


def test_a_token_logged_out_fails_the_alert_and_the_channel(eng, synapse, room, deliver,
                                                            caplog):
    caplog.set_level(logging.DEBUG)
    r = room()
    config = deliver(channel(synapse, r))
    enqueue(eng, config, event())
    wait_for(lambda: sent(eng), 20, interval=0.05, what="the first alert")
    synapse.logout(r.token)
    enqueue(eng, config, event(key=f"{U1}/check/check_load", check="check_load"))
    (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"], 20,
                         interval=0.05, what="the refusal")
    assert failed["status"] == "HTTP 401" and "M_UNKNOWN_TOKEN" in failed["answer"]
    from fleetwatch.actions.channels import listed
    (ops,) = listed(eng.url.render_as_string(hide_password=False))
    assert ops["state"] == "failing" and ops["last_status"] == "HTTP 401"
    assert len(synapse.messages(r.bob, r.id)) == 1
    for d in recorded(eng):
        assert r.token not in str(d)
    assert r.token not in caplog.text and "failed, refused" in caplog.text
    assert r.token not in str(ops)


def test_a_group_is_one_message_listing_its_alerts(eng, synapse, room, deliver):
    r = room()
    config = deliver({**channel(synapse, r), "group_wait": 0.3, "group_by": ["severity"]})
    enqueue(eng, config, *(event(key=f"u{n}/check/check_disk", uuid=f"u{n}",
                                 hostname=f"web-{n}") for n in range(3)))
    wait_for(lambda: len(sent(eng)) == 3, 20, interval=0.05, what="the group sent")
    (m,) = synapse.messages(r.bob, r.id)
    assert m["content"]["body"].splitlines() == [
        "3 alerts (severity critical): 3 CRITICAL",
        *(f"- CRITICAL web-{n}/check_disk: DISK CRITICAL - / 95%" for n in range(3))]
    assert {d["message_id"] for d in sent(eng)} == {m["event_id"]}


# ---------------------------------------------------------------- the demo's stand-in

def test_the_stand_in_answers_as_a_homeserver_does(tmp_path):
    """The demo's room without Synapse: its channel, a send and its resend, a reply and
    the edit, the errors the channel sorts (429 with its wait, 403 for another room, 401
    for a revoked token)."""
    from sinks.alerting.delivery.channels import SendError
    from sinks.alerting.delivery.config import parse_channel
    demo = Matrix.demo_channel(tmp_path, 0)
    assert (tmp_path / "matrix-token").stat().st_mode & 0o077 == 0
    server = Matrix.for_demo(tmp_path, 0).start()
    token = (tmp_path / "matrix-token").read_text().strip()
    try:
        ops = parse_channel("ops", {**demo, "homeserver": server.url})
        sender = MatrixSender("ops", ops)
        ev = event()
        once = sender.send(ev, ref="5")
        assert sender.send(ev, ref="5").message_id == once.message_id and server.resent == 1
        other = sender.send(event(created=ev["created"] + 1), ref="5")   # a reused row id
        assert other.message_id != once.message_id
        ack = sender.send(event("acknowledge"), ref="6", thread=once.message_id)
        kept = {m["event_id"]: m for m in server.in_room()}
        assert kept[ack.message_id]["content"]["m.relates_to"]["m.in_reply_to"] == \
            {"event_id": once.message_id}
        (edit,) = [m for m in server.in_room()
                   if m["content"].get("m.relates_to", {}).get("rel_type") == "m.replace"]
        assert edit["content"]["m.relates_to"]["event_id"] == once.message_id
        assert all(m["dropped_tags"] == [] for m in server.in_room())
        assert (tmp_path / "matrix.jsonl").read_text().count("\n") == 4
        server.limited, server.retry_after = 1, 2.5
        with pytest.raises(SendError, match="HTTP 429 M_LIMIT_EXCEEDED") as limited:
            sender.send(event(created=2.0), ref="7")
        assert (limited.value.permanent, limited.value.retry_after) == (False, 2.5)
        server.failing = 1
        with pytest.raises(SendError, match="HTTP 500") as failing:
            sender.send(event(created=2.0), ref="7")
        assert not failing.value.permanent
        elsewhere = MatrixSender("x", parse_channel("x", {**demo, "homeserver": server.url,
                                                          "room": "!elsewhere:localhost"}))
        with pytest.raises(SendError, match="HTTP 403 M_FORBIDDEN") as refused:
            elsewhere.send(event(), ref="8")
        assert refused.value.permanent
        server.revoke(token)
        with pytest.raises(SendError, match="HTTP 401 M_UNKNOWN_TOKEN") as revoked:
            sender.send(event(created=3.0), ref="9")
        assert revoked.value.permanent and token not in str(revoked.value)
    finally:
        server.stop()
