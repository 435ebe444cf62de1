"""The console's :class:`fleetwatch.actions.console.Actions` on a real SQLite state
database, and a check run now (fleetwatch/actions/checks/) without a router: what each
refuses and with which status (404 nothing there, 422 a field, 503 no database), and the
document a check's RESULT becomes, as ``fleetwatch run --wait --json`` prints it."""

from __future__ import annotations

import pytest

pytest.importorskip("sqlalchemy")

from sqlalchemy import insert  # noqa: E402

from fleetwatch import protocol  # noqa: E402
from fleetwatch.actions import checks  # noqa: E402
from fleetwatch.actions.console import Actions, Refused  # noqa: E402
from fleetwatch.ask import Answer  # noqa: E402
from fleetwatch.protocol import Relayed  # noqa: E402
from fleetwatch.store import db, schema  # noqa: E402

NOW = 1_800_000_000.0


@pytest.fixture
def url(tmp_path):
    """A state database where db-1 (u1) is known and well."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    engine = db.engine(url)
    db.create(engine, "registry")
    with engine.begin() as conn:
        conn.execute(insert(schema.agents).values(uuid="u1", hostname="db-1", first_seen=1.0,
                                                  last_seen=NOW))
        conn.execute(insert(schema.plugins).values(uuid="u1", source="", name="disk", spec={},
                                                   declared_at=1.0))
    engine.dispose()
    return url


def refusal(change) -> tuple[int, str]:
    with pytest.raises(Refused) as refused:
        change()
    return refused.value.status, str(refused.value)


def test_the_console_s_refusals_carry_their_status(url, tmp_path):
    actions = Actions(url, clock=lambda: NOW)
    assert refusal(lambda: actions.ack("db-1", "disk", "alice", "", False, None)) == (
        404, "no current problem for db-1 disk (its latest result is OK or it never ran)")
    status, text = refusal(lambda: actions.ack("db-9", "disk", "alice", "", False, None))
    assert status == 422 and "closest known: db-1" in text and "--force" not in text
    status, text = refusal(lambda: actions.downtime("alice", "db-1", None, "forever", ""))
    assert status == 422 and "--for" not in text
    assert refusal(lambda: actions.downtime("alice", "db-1", None, "2h", "a\nb"))[0] == 422
    assert actions.end_ack(7) is False and actions.end_downtime(7) is False
    downtime_id = actions.downtime("alice", "db-1", None, "2h", "swap", children=True)
    (listed,) = actions.downtimes()
    assert (listed["id"], listed["children"], listed["by"]) == (downtime_id, True, "alice")
    assert actions.end_downtime(downtime_id) is True
    assert actions.acks() == [] and actions.alerts(10) == ([], 0)
    gone = Actions(f"sqlite:///{tmp_path / 'none.db'}", clock=lambda: NOW)
    for change in (lambda: gone.ack("db-1", "disk", "alice", "", False, None),
                   lambda: gone.end_ack(1), lambda: gone.end_downtime(1)):
        assert refusal(change)[0] == 503


def test_a_check_that_cannot_be_run_is_refused(url, monkeypatch):
    actions = Actions(url, checks.Mesh(["tcp://127.0.0.1:9"], timeout=0.1))
    assert refusal(lambda: actions.run_check("", "disk")) == (
        422, "run: which host and which check?")
    assert refusal(lambda: actions.run_check("-x", "disk"))[0] == 422
    assert refusal(lambda: Actions(url).run_check("db-1", "disk"))[0] == 503
    assert refusal(lambda: actions.run_check("db-1", "not a name"))[0] == 422
    asked = []

    def ask_all(endpoints, types, timeout, **kwargs):
        asked.append((endpoints, timeout))
        return [Answer(e, problem="no answer within 0.1s") for e in endpoints]
    monkeypatch.setattr(checks, "ask_all", ask_all)
    assert refusal(lambda: actions.run_check("db-1", "disk")) == (
        404, "no router answered: the RUN cannot be sent")
    assert asked == [(["tcp://127.0.0.1:9"], 0.1)]


def test_a_check_run_tells_what_it_could_not_do_and_checks_the_registry(url, monkeypatch):
    welcome = protocol.Message("WELCOME", {"router": "r1"})
    peers = protocol.Message("PEERS", {"router": "r1", "agents": []})
    monkeypatch.setattr(checks, "ask_all", lambda endpoints, *a, **k: [
        Answer("tcp://r1", replies={"WELCOME": welcome, "PEERS": peers}),
        Answer("tcp://r2", problem="no answer within 2s")][:len(endpoints)])
    told = []
    mesh = checks.Mesh(["tcp://r1", "tcp://r2"])
    with pytest.raises(checks.CannotCheck, match="did not declare 'load' .*it declared disk"):
        checks.run(mesh, url, "db-1", "load", warn=told.append)
    assert told == ["router tcp://r2: no answer within 2s"]
    with pytest.raises(checks.Usage, match="neither a known hostname nor a valid uuid"):
        checks.run(mesh, url, "no such host!", "disk")


def test_a_result_is_the_document_run_json_prints():
    body = {"plugin": "disk", "command_id": "cli:1", "status": 1, "output": "DISK WARNING",
            "long_output": "/ 91%", "perfdata": None, "started": 1_800_000_000,
            "duration": 0.25}
    relayed = Relayed("u1", "r1", protocol.Message("RESULT", body))
    assert checks.result(relayed, "db-1") == {
        "uuid": "u1", "hostname": "db-1", "plugin": "disk", "command_id": "cli:1",
        "router": "r1", "state": "WARNING", "status": 1, "output": "DISK WARNING",
        "long_output": "/ 91%", "perfdata": [], "started": "2027-01-15T08:00:00.000Z",
        "duration": 0.25}
    assert checks.who("web\x1b-1", "u1") == "web\\x1b-1 (u1)"


def test_the_console_runs_a_check_in_process_with_its_timeout(url, monkeypatch):
    """No process is started: the console calls the action the command calls, waiting its
    60 s for the RESULT."""
    import subprocess

    def no_process(*args, **kwargs):
        raise AssertionError("the console started a process")
    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    calls = []
    monkeypatch.setattr(checks, "run", lambda *args: calls.append(args) or {"status": 0})
    mesh = checks.Mesh(["tcp://r1"], ["tcp://r1-tail"], 0.5)
    assert Actions(url, mesh).run_check("db-1", "disk") == {"status": 0}
    assert calls == [(mesh, url, "db-1", "disk", True, 60.0)]
