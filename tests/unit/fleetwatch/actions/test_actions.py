"""The actions layer (fleetwatch/actions/) called as functions on a real SQLite state
database: acknowledge, plan a downtime, silence, forget, list; each change one transaction
with the caller's ``also`` in it; and the JSON the commands print with ``--json`` is the
layer's document, byte for byte (issue 32)."""

from __future__ import annotations

import json
import time
from zoneinfo import ZoneInfo

import pytest

pytest.importorskip("sqlalchemy")

from sqlalchemy import insert, text  # noqa: E402

from fleetwatch.actions import acks, alerts, downtimes, forget, silences  # noqa: E402
from fleetwatch.actions.database import Unavailable, write  # noqa: E402
from query.known import Unknown  # noqa: E402
from fleetwatch.store import db, schema  # noqa: E402
from support.cli import fw  # noqa: E402

NOW = 1_800_000_000.0
UTC = ZoneInfo("UTC")


@pytest.fixture
def state(tmp_path):
    """(url, engine) of a state database where host db-1 (uuid u1) is known, its check
    ``disk`` CRITICAL, and web-1 (u2) is known, its check ``load`` never run."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    engine = db.engine(url)
    for owner in ("registry", "alerting"):
        db.create(engine, owner)
    with engine.begin() as conn:
        for uuid, host in (("u1", "db-1"), ("u2", "web-1")):
            conn.execute(insert(schema.agents).values(uuid=uuid, hostname=host,
                                                      first_seen=1.0, last_seen=NOW - 5))
        conn.execute(insert(schema.plugins).values(uuid="u2", source="", name="load", spec={},
                                                   declared_at=1.0))
        conn.execute(insert(schema.check_state).values(
            uuid="u1", plugin="disk", status=2, hard=True, attempt=1, max_attempts=1,
            hard_status=2, since=1.0, last_change=1.0, last_result=1.0, history="2",
            percent=0.0, flapping=False, notified=0, flap_notified=False, updated=1.0))
    yield url, engine
    engine.dispose()


def count(engine, table: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table}")).scalar()


def config(tmp_path, url: str) -> str:
    path = tmp_path / "fleetwatch.yaml"
    path.write_text(f"routers: [tcp://127.0.0.1:9]\nstate_url: {url}\n")
    return str(path)


# ---------------------------------------------------------------- acknowledgements

def test_an_acknowledgement_is_made_listed_and_ended(state):
    url, _ = state
    (ack_id, uuid, status), = acks.add(url, "DB-1", "disk", NOW, "alice", "on it",
                                       sticky=False, notify=True, expire=NOW + 60)
    assert (uuid, status) == ("u1", 2)
    (listed,) = acks.listed(url, NOW + 1)
    assert set(listed) == set(acks.FIELDS)
    assert (listed["id"], listed["hostname"], listed["state"], listed["by"],
            listed["active"]) == (ack_id, "db-1", "CRITICAL", "alice", True)
    assert acks.listed(url, NOW + 61, ended=True)[0]["end_reason"] == "expired"
    assert acks.remove(url, ack_id, NOW + 2) is True
    assert acks.remove(url, ack_id, NOW + 3) is False       # none running
    assert acks.listed(url, NOW + 4) == []


def test_an_acknowledgement_needs_a_problem_and_a_known_host(state):
    url, _ = state
    with pytest.raises(acks.NoProblem, match="no current problem for web-1 load"):
        acks.add(url, "web-1", "load", NOW, "alice", "", False, True, None)
    with pytest.raises(acks.NoProblem, match="it is not DOWN"):
        acks.add(url, "db-1", None, NOW, "alice", "", False, True, None)
    with pytest.raises(Unknown, match="closest known: db-1"):
        acks.add(url, "db-2", "disk", NOW, "alice", "", False, True, None)
    with pytest.raises(acks.NoProblem):                     # forced: not refused as unknown
        acks.add(url, "db-2", "disk", NOW, "alice", "", False, True, None, force=True)


def test_a_change_and_the_callers_record_are_one_transaction(state):
    url, engine = state

    def refuse(conn, made):
        raise RuntimeError("the record cannot be written")
    with pytest.raises(RuntimeError):
        acks.add(url, "db-1", "disk", NOW, "alice", "", False, True, None, also=refuse)
    assert count(engine, "acknowledgements") == 0
    seen = []
    made = acks.add(url, "db-1", "disk", NOW, "alice", "", False, True, None,
                    also=lambda conn, made: seen.append(made))
    assert seen == [made] and count(engine, "acknowledgements") == 1


def test_a_database_that_is_not_there_is_unavailable(tmp_path):
    url = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(Unavailable, match="no state database"):
        acks.add(url, "db-1", "disk", NOW, "alice", "", False, True, None)
    with pytest.raises(Unavailable, match="no state database"):
        write(url, lambda conn: None)


# ---------------------------------------------------------------- silences, downtimes

def test_a_silence_is_made_listed_and_ended(state):
    url, _ = state
    silence_id = silences.add(url, "db-*", None, 3600, "upgrade", NOW, "alice@here")
    (listed,) = silences.listed(url, NOW + 1)
    assert set(listed) == set(silences.FIELDS) | {"active"}
    assert (listed["id"], listed["host"], listed["check"], listed["created_by"],
            listed["active"]) == (silence_id, "db-*", None, "alice@here", True)
    with pytest.raises(Unknown):
        silences.add(url, "nowhere-*", None, 60, "", NOW, "alice@here")
    assert silences.remove(url, silence_id, NOW + 2) is True
    assert silences.remove(url, silence_id, NOW + 3) is False
    assert silences.listed(url, NOW + 4) == []


def test_a_downtime_is_planned_from_a_typed_request(state):
    url, _ = state
    d = downtimes.plan(downtimes.Request("db-1", comment="disk swap", duration="2h"), NOW,
                       UTC, "alice")
    assert (d.host, d.check, d.start, d.end, d.author) == ("db-1", None, NOW, NOW + 7200,
                                                           "alice")
    with pytest.raises(ValueError, match="--for DURATION"):
        downtimes.plan(downtimes.Request("db-1"), NOW, UTC, "alice")
    with pytest.raises(ValueError, match="--comment"):
        downtimes.plan(downtimes.Request("db-1", comment="a\nb", duration="1h"), NOW, UTC,
                       "alice")
    downtime_id = downtimes.add(url, d)
    rows, (listed,) = downtimes.listed(url, NOW + 1, UTC)
    assert rows[0]["id"] == downtime_id
    assert (listed["id"], listed["state"], listed["window"], listed["by"]) == (
        downtime_id, "active", ["2027-01-15T08:00:00.000Z", "2027-01-15T10:00:00.000Z"], "alice")
    assert downtimes.remove(url, downtime_id, NOW + 2) is True
    assert downtimes.remove(url, downtime_id, NOW + 3) is False
    assert downtimes.listed(url, NOW + 4, UTC, ended=True)[1][0]["state"] == "removed"
    assert downtimes.span(5400) == "1h30m"


# ---------------------------------------------------------------- forget, alerts

def test_forget_removes_the_one_agent_a_name_gives(state):
    url, engine = state
    with pytest.raises(forget.NotOne, match="no agent 'db-9' is known"):
        forget.forget(url, "db-9", NOW)
    done = forget.forget(url, "DB-1", NOW)
    assert (done["uuid"], done["hostname"], done["last_heard"]) == ("u1", "db-1", None)
    assert done["removed"]["agents"] == 1 and done["removed"]["check_state"] == 1
    assert count(engine, "agents") == 1


def test_alerts_of_a_fleet_without_any(state):
    url, _ = state
    found, total = alerts.gather(url, NOW, 50)
    assert (found, total) == ([], 0)
    assert alerts.document(found, total) == {"alerts": [], "total": 0, "truncated": False}
    assert alerts.at_least("error") == ["error", "critical", "unknown"]


# ---------------------------------------------------------------- the commands' JSON

def test_the_commands_print_the_layers_documents(state, tmp_path, capsys):
    """``--json`` of ``ack list``, ``silence list``, ``downtime list``, ``alerts`` and
    ``forget`` is ``json.dumps(document, indent=2, ensure_ascii=False)`` of the layer's
    (the commands read the clock: what is listed is running from a while ago)."""
    url, _ = state
    op = config(tmp_path, url)
    now = time.time() - 60
    acks.add(url, "db-1", "disk", now, "ålice", "på gång", False, True, None)
    silences.add(url, "web-1", "load", 600, "", now, "alice@here")
    downtimes.add(url, downtimes.plan(downtimes.Request("web-1", duration="1h"), now, UTC,
                                      "bob"))

    def dumped(document) -> str:
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    assert fw(capsys, "ack", "list", "--json", "--config", op)[1] == dumped(
        acks.document(acks.listed(url, time.time())))
    assert fw(capsys, "silence", "list", "--json", "--config", op)[1] == dumped(
        silences.document(silences.listed(url, time.time())))
    from sinks.alerting.downtimes.rules import local_zone
    assert fw(capsys, "downtime", "list", "--json", "--config", op)[1] == dumped(
        downtimes.document(downtimes.listed(url, time.time(), local_zone())[1]))
    assert fw(capsys, "alerts", "--json", "--config", op)[1] == dumped(
        alerts.document(*alerts.gather(url, time.time(), 50)))
    code, out, _ = fw(capsys, "forget", "web-1", "--json", "--config", op)
    assert code == 0 and list(json.loads(out)) == ["uuid", "hostname", "last_heard",
                                                   "removed"]
