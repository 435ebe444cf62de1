"""No notification lost to another sink's ACK: the spool keeps a message until every sink type
``spool.ack_from`` requires for it has ACKed (SPEC.md 4.2).

Unit tests of the spool and the config with a fake clock; then real fleets (router, sinks and
agent as processes) where the history sink ACKs a NOTIFY that no alerting sink has yet, seen
as an operator sees them: the NOTIFY's resends and the agent's STATS on the router's tail
(``fleetwatch tail``), ``fleetwatch alerts``, the history sink's files.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from agent.config import AgentConfig, SpoolConfig
from fleetwatch.protocol import ACK_OWNERS, ACKING_SINKS
from agent.spool import Spool
from support.clock import Clock
from support.fleet import intake_path, landed, wait_for, wait_intake
from support.tail import Tail
from fleetwatch import protocol
from fleetwatch.config import ConfigError, build


def notify(text: str = "disk full") -> protocol.Message:
    return protocol.make("NOTIFY", "agent-uuid", severity="error", text=text)


def register(name: str = "backup", **fields) -> protocol.Message:
    return protocol.make("REGISTER", "agent-uuid", name=name, **fields)


@pytest.fixture
def clock():
    return Clock(1000.0)


def open_spool(path, clock, required=None) -> Spool:
    return Spool(str(path), ack_timeout=2.0, max_backoff=10.0, clock=clock, required=required)


BOTH = {"NOTIFY": ["alerting", "history"], "REGISTER": ["registry"]}


# ---------------------------------------------------------------- the spool

def test_default_history_ack_is_counted_and_ignored(tmp_path, clock):
    spool = open_spool(tmp_path / "spool.db", clock)
    n, r = notify(), register()
    spool.add([n, r])
    got = spool.ack([n.msg_id, r.msg_id], "history")
    assert got.removed == [] and got.ignored == 2
    assert spool.pending() == [n.msg_id, r.msg_id]
    got = spool.ack([n.msg_id, r.msg_id], "alerting")     # alerting does not own REGISTER
    assert got.removed == [n.msg_id] and got.ignored == 1
    assert spool.ack([r.msg_id], "registry").removed == [r.msg_id]
    assert len(spool) == 0 and spool.next_due() is None
    spool.close()


def test_a_newer_register_of_a_source_supersedes_the_spooled_older_ones(tmp_path, clock):
    spool = open_spool(tmp_path / "spool.db", clock)
    old_agent, backup, note = register("agent", plugins=[]), register("backup"), notify()
    spool.add([old_agent, backup, note])
    new_agent = register("agent", plugins=[])
    spool.add([new_agent])
    assert spool.pending() == [backup.msg_id, note.msg_id, new_agent.msg_id]
    spool.add([new_agent])                      # the same REGISTER again (a retry): kept
    assert spool.pending() == [backup.msg_id, note.msg_id, new_agent.msg_id]
    bare = register("backup")                   # no plugins: it does not replace the list
    spool.add([bare])
    assert spool.pending() == [backup.msg_id, note.msg_id, new_agent.msg_id, bare.msg_id]
    a, b = register("backup", plugins=[]), register("backup", plugins=[])
    spool.add([a, b])                           # two in one batch: the last one stays
    assert spool.pending() == [note.msg_id, new_agent.msg_id, b.msg_id]
    assert spool.superseded == 4 and len(spool) == 3
    spool.close()


def test_kept_until_every_required_type_acked_in_any_order(tmp_path, clock):
    spool = open_spool(tmp_path / "spool.db", clock, BOTH)
    a, b = notify("a"), notify("b")
    spool.add([a, b])
    assert spool.ack([a.msg_id], "alerting").removed == []
    assert spool.ack([b.msg_id], "history").removed == []
    assert spool.ack([a.msg_id], "alerting").removed == []   # the same type again: no change
    assert (spool.acked_by(a.msg_id), spool.acked_by(b.msg_id)) == (["alerting"], ["history"])
    assert spool.ack([a.msg_id, b.msg_id], "history").removed == [a.msg_id]
    assert spool.ack([a.msg_id, b.msg_id], "alerting").removed == [b.msg_id]
    assert len(spool) == 0 and spool.acked_by(a.msg_id) is None
    spool.close()


def test_partial_ack_leaves_the_resend_schedule_alone(tmp_path, clock):
    spool = open_spool(tmp_path / "spool.db", clock, BOTH)
    msg = notify()
    spool.add([msg])
    spool.due()
    sent_at = []
    for i in range(4):
        if i == 1:
            before = spool.next_due()
            spool.ack([msg.msg_id], "alerting")
            assert spool.next_due() == before
        clock.now = spool.next_due()
        (again,) = spool.due()
        assert again.get("dup") is True and again.get("retry") == i + 1
        sent_at.append(clock.now)
    assert [round(b - a, 6) for a, b in zip([1000.0, *sent_at], sent_at)] == [2, 4, 8, 10]
    assert spool.ack([msg.msg_id], "history").removed == [msg.msg_id]
    spool.close()


def test_ack_without_sink_counts_as_the_owning_type(tmp_path, clock):
    spool = open_spool(tmp_path / "spool.db", clock, BOTH)
    n, r = notify(), register()
    spool.add([n, r])
    got = spool.ack([n.msg_id, r.msg_id])                   # an older sink: no `sink`
    assert got.removed == [r.msg_id] and got.ignored == 0  # REGISTER: registry, complete
    assert spool.acked_by(n.msg_id) == ["alerting"]         # NOTIFY: alerting, history missing
    assert spool.ack([n.msg_id], "history").removed == [n.msg_id]
    spool.close()


def test_unknown_ids_and_bad_input_change_nothing(tmp_path, clock):
    spool = open_spool(tmp_path / "spool.db", clock)
    msg = notify()
    spool.add([msg])
    assert spool.ack(["nope", 7, None], "alerting") == ([], 0)
    assert spool.ack([], "alerting") == ([], 0) and spool.ack(None) == ([], 0)
    assert spool.ack([msg.msg_id], "") == ([], 1)
    assert spool.ack([msg.msg_id] * 3, "alerting").removed == [msg.msg_id]
    spool.close()


def test_many_ids_in_one_ack(tmp_path, clock):
    spool = Spool(str(tmp_path / "spool.db"), max_messages=5000, clock=clock)
    msgs = [notify(str(i)) for i in range(1200)]           # more than one IN (...) chunk
    spool.add(msgs)
    assert len(spool.ack([m.msg_id for m in msgs], "alerting").removed) == 1200
    assert len(spool) == 0
    spool.close()


def test_partial_acks_survive_a_restart_and_a_relaxed_config_applies(tmp_path, clock):
    path = tmp_path / "spool.db"
    spool = open_spool(path, clock, BOTH)
    a, b = notify("a"), notify("b")
    spool.add([a, b])
    spool.ack([a.msg_id], "alerting")
    spool.close()
    spool = open_spool(path, clock, BOTH)
    assert spool.acked_by(a.msg_id) == ["alerting"] and len(spool) == 2
    assert spool.ack([a.msg_id], "history").removed == [a.msg_id]
    spool.ack([b.msg_id], "history")
    spool.close()
    spool = open_spool(path, clock)        # back to the default: alerting alone
    assert spool.pending() == [b.msg_id]   # history alone is not enough
    spool.ack([b.msg_id], "alerting")
    assert len(spool) == 0
    spool.close()
    spool = open_spool(path, clock, BOTH)
    c, d = notify("c"), notify("d")
    spool.add([c, d])
    spool.ack([c.msg_id], "alerting")      # recorded: alerting is required
    spool.ack([d.msg_id], "history")
    spool.close()
    spool = open_spool(path, clock)        # alerting alone again: c is complete at open
    assert spool.pending() == [d.msg_id]
    spool.close()
    spool = open_spool(path, clock, {"NOTIFY": ["history"], "REGISTER": ["registry"]})
    assert len(spool) == 0                 # history alone: d is complete at open
    e = notify("e")
    spool.add([e])
    assert spool.ack([e.msg_id], "alerting").ignored == 1   # not required: counted...
    assert spool.pending() == [e.msg_id]                     # ...never removes it...
    spool.close()
    spool = open_spool(path, clock)        # ...but noted: alerting alone has it at open
    assert spool.pending() == []
    spool.close()


OLD_SCHEMA = """
CREATE TABLE messages (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id  TEXT NOT NULL UNIQUE,
    type    TEXT NOT NULL,
    body    TEXT NOT NULL,
    sends   INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL
);
CREATE INDEX messages_next_at ON messages (next_at);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def test_spool_from_before_per_sink_acks_opens_and_keeps_its_messages(tmp_path, clock):
    path = tmp_path / "spool.db"
    old = sqlite3.connect(path)
    old.executescript(OLD_SCHEMA)
    msgs = [notify("old 1"), register("old")]
    old.executemany("INSERT INTO messages (msg_id, type, body, sends, next_at) "
                    "VALUES (?, ?, ?, 3, 5000)",
                    [(m.msg_id, m.type, protocol.encode_body(m).decode()) for m in msgs])
    old.execute("INSERT INTO counters VALUES ('dropped', 4)")
    old.commit()
    old.close()
    spool = open_spool(path, clock, BOTH)
    assert spool.pending() == [m.msg_id for m in msgs] and spool.dropped == 4
    again = spool.due()                                     # due at once, as resends
    assert [(m.msg_id, m.get("retry")) for m in again] == [(m.msg_id, 3) for m in msgs]
    assert again[0].get("text") == "old 1"
    assert spool.ack([msgs[0].msg_id], "alerting").removed == []
    assert spool.ack([msgs[1].msg_id], "registry").removed == [msgs[1].msg_id]
    spool.close()
    spool = open_spool(path, clock, BOTH)                   # migrated once, reopens as is
    assert spool.acked_by(msgs[0].msg_id) == ["alerting"]
    spool.close()


# ---------------------------------------------------------------- the config

def agent_cfg(spool: dict) -> AgentConfig:
    return build(AgentConfig, {"routers": ["tcp://r:1"], "spool": spool}, "agent.yaml")


def test_ack_from_defaults_and_additions():
    assert SpoolConfig().required_acks() == {"NOTIFY": ("alerting",), "REGISTER": ("registry",)}
    cfg = agent_cfg({"ack_from": {"NOTIFY": ["alerting", "history"]}})
    assert cfg.spool.required_acks() == {"NOTIFY": ("alerting", "history"),
                                         "REGISTER": ("registry",)}
    cfg = agent_cfg({"ack_from": {"NOTIFY": ["history"], "REGISTER": ["history"]}})
    assert cfg.spool.required_acks() == {"NOTIFY": ("history",), "REGISTER": ("history",)}


@pytest.mark.parametrize("ack_from, key, expected", [
    ({"STATS": ["graphite"]}, "spool.ack_from", "'STATS' is not a spooled message type"),
    ({"notify": ["alerting"]}, "spool.ack_from", "known: NOTIFY, REGISTER"),
    ({"NOTIFY": []}, "spool.ack_from.NOTIFY", "expected at least one sink type"),
    ({"NOTIFY": ["graphite"]}, "spool.ack_from.NOTIFY",
     "'graphite' is not a sink type that ACKs NOTIFY (known: alerting, history)"),
    ({"REGISTER": ["alerting"]}, "spool.ack_from.REGISTER", "known: registry, history"),
    ({"NOTIFY": ["alertng"]}, "spool.ack_from.NOTIFY", "'alertng' is not a sink type"),
    ({"NOTIFY": ["alerting", "alerting"]}, "spool.ack_from.NOTIFY", "listed twice"),
    ({"NOTIFY": "alerting"}, "spool.ack_from.NOTIFY", "expected a list of strings"),
    ({"NOTIFY": [3]}, "spool.ack_from.NOTIFY[0]", "expected a string"),
    (["NOTIFY"], "spool.ack_from", "expected a mapping"),
])
def test_ack_from_errors_name_the_key(ack_from, key, expected):
    with pytest.raises(ConfigError) as e:
        agent_cfg({"ack_from": ack_from})
    assert e.value.key == key
    assert expected in str(e.value)
    assert "\n" not in str(e.value)


def test_acking_table_matches_the_sinks():
    """agent/config.py names which sink types ACK what (the agent does not import sinks/)."""
    from sinks import SINKS, load_sink
    for sink_type in SINKS:
        acks = load_sink(sink_type).acks & set(ACKING_SINKS)
        assert acks == {t for t, types in ACKING_SINKS.items() if sink_type in types}, sink_type
    for type_, owner in ACK_OWNERS.items():
        assert owner in ACKING_SINKS[type_]


# ---------------------------------------------------------------- real fleets

class Watch:
    """The router's tail (``fleetwatch tail``): every NOTIFY and STATS through the router."""

    def __init__(self, zctx, router):
        self.tail = Tail(zctx, [router["endpoints"]["tail"]],
                         [protocol.topic("NOTIFY"), protocol.topic("STATS")])

    def sends(self, msg_id: str) -> int:
        """How many times the NOTIFY ``msg_id`` went through the router (first send and
        resends)."""
        return sum(1 for r in self.tail.pump()
                   if r.message.type == "NOTIFY" and r.message.msg_id == msg_id)

    def spool_acked(self, uuid: str) -> int | None:
        """The agent's latest ``agent.spool.acked`` (messages out of its spool, every sink
        type they need having ACKed them), None before its first STATS."""
        counts = [r.message.get("metrics", {}).get("agent.spool.acked")
                  for r in self.tail.pump() if r.message.type == "STATS" and r.uuid == uuid]
        return counts[-1] if counts else None

    def from_sink(self, name: str) -> bool:
        return any(r.message.type == "STATS" and r.uuid == name for r in self.tail.pump())


def alerted(fleet, router, uuid: str, msg_id: str) -> tuple[int, int] | None:
    """(alerts, of them made into an alert event) that ``fleetwatch alerts --json`` lists for
    ``msg_id``; None while the command cannot read the state (no alerting sink yet)."""
    op = fleet.operator_config([router])
    res = fleet.command("alerts", "--config", str(op), "--json", "--limit", "0", check=False)
    if res.returncode != 0:
        return None
    mine = [a for a in json.loads(res.stdout)["alerts"] if a["msg_id"] == msg_id]
    return len(mine), sum(a["key"] == f"{uuid}/notify/{msg_id}" for a in mine)


def create_alerting_tables(fleet) -> None:
    """The alerting sink's tables in the fleet's state database, as the sink creates them."""
    from fleetwatch.store import db
    eng = db.engine(fleet.state_url)
    try:
        db.create(eng, "alerting")
    finally:
        eng.dispose()


def start_agent(fleet, router, **spool):
    fleet.agent([router], spool={"ack_timeout": 0.3, "max_backoff": 1.0, **spool})
    wait_intake(intake_path(fleet))
    uuid_file = fleet.root / "agent-state" / "uuid"
    return uuid_file.read_text().strip()


def acked_by(fleet, msg_id: str) -> str | None:
    """The sink types the agent's spool has noted ACKs from for ``msg_id`` (its file, read
    only); None once it left the spool."""
    db = sqlite3.connect(f"file:{fleet.root / 'agent-state' / 'spool.db'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT acked FROM messages WHERE msg_id = ?", (msg_id,)).fetchone()
    finally:
        db.close()
    return None if row is None else row[0]


def send_notify(fleet, text: str) -> str:
    res = fleet.cli("send", "notify", "--config", str(fleet.root / "agent.yaml"),
                    "--severity", "critical", text)
    return res.stdout.strip()


def test_history_ack_keeps_the_notify_until_alerting_has_it(fleet, tmp_path, zctx):
    router = fleet.router()
    watch = Watch(zctx, router)
    lake = tmp_path / "lake"
    fleet.sink("history", [router], stats_interval=0.5,
               history={"lake": str(lake), "rotate_seconds": 0.5})
    wait_for(lambda: watch.from_sink("sink-history"), 15,
             what="the history sink connected (its STATS on the tail)")
    uuid = start_agent(fleet, router)
    msg_id = send_notify(fleet, "disk on fire")

    wait_for(lambda: msg_id in {ln["msg"]["msg_id"] for ln in landed(lake)
                                if ln["type"] == "NOTIFY"}, 15, what="the NOTIFY in history")
    # history has it and ACKed it (again at each resend, dropping the duplicate), and still
    # the agent resends it: the routes make it durable for alerting too, which has it not
    wait_for(lambda: acked_by(fleet, msg_id) == "history", 15, what="history's ACK noted")
    wait_for(lambda: watch.sends(msg_id) >= 4 and watch.spool_acked(uuid) is not None, 15,
             what="the NOTIFY resent")
    assert watch.spool_acked(uuid) == 0
    # the alerting tables made empty (as the sink would make them): nothing recorded the alert
    create_alerting_tables(fleet)
    assert alerted(fleet, router, uuid, msg_id) == (0, 0)

    # the NOTIFY is the only message the alerting sink can take out of the spool here (the
    # agent's REGISTER waits for a registry sink)
    fleet.sink("alerting", [router])
    wait_for(lambda: watch.spool_acked(uuid) == 1, 20,
             what="the NOTIFY ACKed by the alerting sink and out of the spool")
    assert alerted(fleet, router, uuid, msg_id) == (1, 1)           # exactly once


def test_durable_history_keeps_the_notify_until_both_acked(fleet, tmp_path, zctx):
    """No agent config: the routers' default durable routes want alerting and history."""
    router = fleet.router()
    watch = Watch(zctx, router)
    fleet.sink("alerting", [router])
    uuid = start_agent(fleet, router)
    msg_id = send_notify(fleet, "both must have it")
    wait_for(lambda: alerted(fleet, router, uuid, msg_id) == (1, 1), 20, what="the alert")
    # still resent after the alerting sink recorded (then ACKed) it: history has not
    sent = watch.sends(msg_id)
    wait_for(lambda: watch.sends(msg_id) >= sent + 2 and watch.spool_acked(uuid) is not None,
             15, what="two more resends")
    assert watch.spool_acked(uuid) == 0

    lake = tmp_path / "lake"
    fleet.sink("history", [router], history={"lake": str(lake), "rotate_seconds": 0.5})
    wait_for(lambda: watch.spool_acked(uuid) == 1, 20,
             what="the NOTIFY ACKed by history too and out of the spool")
    assert msg_id in {ln["msg"]["msg_id"] for ln in landed(lake) if ln["type"] == "NOTIFY"}
    assert alerted(fleet, router, uuid, msg_id) == (1, 1)           # the resends alerted once
