"""The console's sessions and its record of changes, on a real SQLite state database
(web/store.py, fleetwatch/actions/console.py ``Actions``, web/context.py ``Web``): a session ends
on the
server (logout, the user removed, a new password, its hours over), a user removed and added
again does not get the old sessions back, an older database gets the sessions table, and an
acknowledgement or a downtime made in the console is kept together with its audit row or not
at all (issue 31, items 7 and 8)."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("argon2")
pytest.importorskip("fastapi")

from sqlalchemy import MetaData, inspect, insert, select, text  # noqa: E402

from fleetwatch.actions.console import Actions  # noqa: E402
from fleetwatch.store import db, schema  # noqa: E402
from support.clock import Clock  # noqa: E402
from web import store  # noqa: E402
from web.console import Refused  # noqa: E402

PASSWORD = "correct horse battery"


@pytest.fixture(autouse=True)
def cheap_hashes(monkeypatch):
    """argon2 at its lowest cost: these tests are about sessions, not about the hash."""
    from argon2 import PasswordHasher
    hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    monkeypatch.setattr(store.auth, "_hasher", hasher)
    monkeypatch.setattr(store.auth, "DUMMY_HASH", hasher.hash("dummy"))


@pytest.fixture
def state(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    engine = db.engine(url)
    for owner in ("registry", "alerting", "web"):
        db.create(engine, owner)
    yield url, engine
    engine.dispose()


def test_a_session_ends_on_logout_and_when_its_hours_are_over(state):
    _, engine = state
    clock = Clock(1000.0)
    store.add_user(engine, "alice", "operator", PASSWORD, "root", clock)
    assert store.login(engine, "alice", "not her password", "a", 12, clock) is None
    who, sid = store.login(engine, "alice", PASSWORD, "a", 12, clock)
    assert who == store.Who("alice", "operator")
    assert store.session(engine, sid, clock) == who
    with engine.connect() as conn:                  # kept as a digest, never the id itself
        (digest,) = conn.execute(select(schema.web_sessions.c.digest)).scalars()
    assert sid not in digest
    _, other = store.login(engine, "alice", PASSWORD, "b", 12, clock)
    store.logout(engine, sid)
    assert store.session(engine, sid, clock) is None            # the copied cookie too
    assert store.session(engine, other, clock) == who           # another login goes on
    clock.advance(12 * 3600)
    assert store.session(engine, other, clock) is None


def test_removing_a_user_or_a_new_password_ends_their_sessions(state):
    _, engine = state
    clock = Clock(1000.0)
    store.add_user(engine, "bob", "viewer", PASSWORD, "root", clock)
    store.add_user(engine, "carol", "viewer", PASSWORD, "root", clock)
    _, bob = store.login(engine, "bob", PASSWORD, "a", 12, clock)
    _, carol = store.login(engine, "carol", PASSWORD, "a", 12, clock)
    store.set_password(engine, "carol", "a new password!", "root", clock)
    assert store.session(engine, carol, clock) is None
    assert store.login(engine, "carol", PASSWORD, "a", 12, clock) is None
    assert store.login(engine, "carol", "a new password!", "a", 12, clock) is not None
    # removed, then added again under the same name with another role: nothing of before
    store.remove_user(engine, "bob", "root", clock)
    assert store.session(engine, bob, clock) is None
    store.add_user(engine, "bob", "admin", PASSWORD, "root", clock)
    assert store.session(engine, bob, clock) is None
    with pytest.raises(store.auth.AuthError, match="no user nobody"):
        store.set_password(engine, "nobody", "a new password!", "root", clock)
    actions = [r["action"] for r in store.trail(engine)]
    assert "user.password" in actions and "user.remove" in actions


def test_a_user_keeps_a_bounded_number_of_sessions(state, monkeypatch):
    _, engine = state
    clock = Clock(1000.0)
    monkeypatch.setattr(store, "SESSIONS_PER_USER", 3)
    store.add_user(engine, "alice", "operator", PASSWORD, "root", clock)
    sids = []
    for _ in range(5):
        clock.advance(1)
        sids.append(store.login(engine, "alice", PASSWORD, "a", 12, clock)[1])
    assert [store.session(engine, s, clock) is not None for s in sids] == \
        [False, False, True, True, True]


def test_an_older_database_gets_the_sessions_table(tmp_path):
    engine = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        old = MetaData()
        for table in (schema.web_users, schema.web_tokens, schema.web_audit):
            table.to_metadata(old)
        old.create_all(engine)
        store.create(engine)
        assert "web_sessions" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


# ---------------------------------------------------------------- one transaction

def web_over(url: str, engine):
    """The console's side of a change (web.context.Web) over the real Actions, no server."""
    from web.context import Web
    console = types.SimpleNamespace(engine=engine, clock=lambda: 2000.0, changed=lambda: None,
                                    actions=Actions(url, clock=lambda: 2000.0))
    return Web(console, templates=None)


def a_problem(engine) -> None:
    """Host db-1 (uuid u1) known, its check ``disk`` CRITICAL."""
    with engine.begin() as conn:
        conn.execute(insert(schema.agents).values(uuid="u1", hostname="db-1", first_seen=1.0,
                                                  last_seen=1.0))
        conn.execute(insert(schema.check_state).values(
            uuid="u1", plugin="disk", status=2, hard=True, attempt=1, max_attempts=1,
            hard_status=2, since=1.0, last_change=1.0, last_result=1.0, history="2",
            percent=0.0, flapping=False, notified=0, flap_notified=False, updated=1.0))


def count(engine, table: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table}")).scalar()


def test_an_action_and_its_audit_row_are_kept_together(state):
    url, engine = state
    a_problem(engine)
    web = web_over(url, engine)
    alice = store.Who("alice", "operator")
    (ack_id, _, _), = web.acknowledge(alice, "db-1", "disk", "on it")
    downtime_id = web.schedule(alice, "db-1", None, "2h", "upgrade")
    web.end_ack(alice, ack_id)
    web.end_downtime(alice, downtime_id)
    assert [(r["who"], r["action"]) for r in reversed(store.trail(engine))] == [
        ("alice", "ack.add"), ("alice", "downtime.add"), ("alice", "ack.remove"),
        ("alice", "downtime.remove")]
    with pytest.raises(Refused, match="no running acknowledgement"):
        web.end_ack(alice, ack_id)                  # nothing ended: nothing recorded
    assert count(engine, "web_audit") == 4


def test_when_the_audit_row_cannot_be_written_the_action_is_not_kept(state):
    """The audit write fails (a trigger refuses it): the acknowledgement, the downtime and
    their ends are rolled back with it, so there is never a change without its record."""
    url, engine = state
    a_problem(engine)
    web = web_over(url, engine)
    alice = store.Who("alice", "operator")
    (ack_id, _, _), = web.acknowledge(alice, "db-1", "disk", "on it")
    downtime_id = web.schedule(alice, "db-1", None, "2h", "upgrade")
    with engine.begin() as conn:
        conn.execute(text("CREATE TRIGGER no_audit BEFORE INSERT ON web_audit "
                          "BEGIN SELECT RAISE(ABORT, 'audit refused'); END"))
    for change in (lambda: web.acknowledge(alice, "db-1", "disk", "again"),
                   lambda: web.schedule(alice, "db-1", None, "1h", "another"),
                   lambda: web.end_ack(alice, ack_id),
                   lambda: web.end_downtime(alice, downtime_id)):
        with pytest.raises(Refused, match="audit refused") as refused:
            change()
        assert refused.value.status == 503
    assert count(engine, "acknowledgements") == 1 and count(engine, "downtimes") == 1
    assert count(engine, "acknowledgements WHERE ended IS NULL") == 1
    assert count(engine, "web_audit") == 2
