"""The operator commands (`fleetwatch status`, `alerts`, `tail`) against a fake router."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from support.clock import Clock
from support.fakerouter import BackendFacingRouter, relayed, tailed
from fleetwatch import protocol

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from fleetwatch.store import db  # noqa: E402
from sinks.alerting.sink import AlertingSink  # noqa: E402
from sinks.registry import RegistrySink  # noqa: E402

KNOWN = "a" * 32       # in the registry, attached to the fake router
ATTACHED = "b" * 32    # attached, but no sink has recorded it yet
GONE = "c" * 32        # in the registry, attached nowhere


@pytest.fixture
def router():
    fake = BackendFacingRouter("fake-1", agents=[
        {"uuid": KNOWN, "hostname": "web-1", "since": 1_700_000_000.0,
         "last_heard": 1_700_000_100.0},
        {"uuid": ATTACHED, "hostname": "db-1", "since": 1_700_000_000.0,
         "last_heard": 1_700_000_050.0}])
    yield fake
    fake.close()


#: the ports :func:`unreachable_endpoint` holds, for the worker's life
_HELD: list[socket.socket] = []


def unreachable_endpoint() -> str:
    """A tcp endpoint on 127.0.0.1 nobody listens on: a port bound and held, never
    listened on (a connection is refused). Bound then closed, the port was free for any
    process of the suite to take meanwhile: once a fleet's socket of another test did, and
    the "unreachable" router answered."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def operator_config(fleet, control: list[str], **extra):
    return str(fleet.write("fleetwatch.yaml", {"routers": control, "state_url": fleet.state_url,
                                               "timeout": 1.0, **extra}))


def fill_registry(fleet):
    sink = RegistrySink(db.engine(fleet.state_url), clock=lambda: 1_700_000_000.0)
    sink.start()
    for uuid, host in ((KNOWN, "web-1"), (GONE, "old-1")):
        _, frames = relayed("HELLO", uuid, hostname=host, heartbeat=1.0)
        sink.write([protocol.decode_relayed(frames)])
    sink.close()


def test_status_merges_the_registry_and_live_routers(fleet, router):
    fill_registry(fleet)
    op = operator_config(fleet, [router.control_endpoint, unreachable_endpoint()])
    started = time.monotonic()
    res = fleet.cli("status", "--config", op, "--json", check=False)
    # the router that never answers costs its timeout (1 s) and no more: a command that
    # waited for it would hang till fleet.cli's 30 s (the bound is not a speed: a loaded
    # machine once took 4.2 s, interpreter start included)
    assert time.monotonic() - started < 20, "status waited for the silent router"
    assert res.returncode == 1                        # one of the two routers did not answer
    out = json.loads(res.stdout)
    agents = {a["uuid"]: a for a in out["agents"]}
    assert set(agents) == {KNOWN, ATTACHED, GONE}
    assert agents[KNOWN] == {"uuid": KNOWN, "hostname": "web-1", "version": None,
                             "alive": True, "last_seen": "2023-11-14T22:15:00.000Z",
                             "routers": ["fake-1"], "ack": None, "handled": {
                                 "ack": None, "downtime": None, "unreachable": None,
                                 "host": None, "stale": None}}
    assert agents[ATTACHED]["alive"] and agents[ATTACHED]["hostname"] == "db-1"
    # attached to neither: not on the router that answered, unknown on the other
    assert agents[GONE]["alive"] is None and agents[GONE]["routers"] == []
    assert agents[GONE]["last_seen"] == "2023-11-14T22:13:20.000Z"
    assert [(r["id"], r["reachable"]) for r in out["routers"]] == [("fake-1", True), (None, False)]
    # The human table names every agent and the unreachable router.
    text = fleet.cli("status", "--config", op, check=False).stdout
    assert "web-1" in text and "db-1" in text and "old-1" in text and "no answer" in text
    assert text.splitlines()[-1] == "3 agents, 2 alive, 1 unknown"


def test_status_on_a_fresh_fleet(fleet, router):
    op = operator_config(fleet, [router.control_endpoint])
    out = json.loads(fleet.cli("status", "--config", op, "--json").stdout)
    assert {a["uuid"] for a in out["agents"]} == {KNOWN, ATTACHED}
    assert not (fleet.root / "state.db").exists(), "status must not create the database"


def hear(fleet, uuid: str, at: float) -> None:
    """The alerting sink records a heartbeat of ``uuid`` at ``at`` (its ``host_state``)."""
    sink = AlertingSink(db.engine(fleet.state_url), clock=lambda: at)
    sink.start()
    _, frames = relayed("HEARTBEAT", uuid, interval=1.0)
    sink.write([protocol.decode_relayed(frames)])
    sink.close()


def agent_line(text: str, hostname: str) -> str:
    """The agents table's row of ``hostname`` (columns HOSTNAME UUID ALIVE STATE LAST_SEEN
    ROUTERS)."""
    assert text.splitlines()[0].split()[:5] == ["HOSTNAME", "UUID", "ALIVE", "STATE",
                                                "LAST_SEEN"]
    return next(line for line in text.splitlines() if line.split()[:1] == [hostname])


def test_status_last_seen_is_the_last_heartbeat(fleet, router):
    fill_registry(fleet)                            # HELLO at 1_700_000_000 (22:13:20)
    hear(fleet, GONE, 1_700_000_600.0)              # a heartbeat ten minutes later
    op = operator_config(fleet, [router.control_endpoint])
    out = json.loads(fleet.cli("status", "--config", op, "--json").stdout)
    gone = next(a for a in out["agents"] if a["uuid"] == GONE)
    assert gone["last_heartbeat"] == "2023-11-14T22:23:20.000Z"
    assert gone["last_seen"] == gone["last_heartbeat"]
    row = agent_line(fleet.cli("status", "--config", op).stdout, "old-1")
    assert "22:23:20" in row and "22:13:20" not in row    # the table says what --json says
    # No alerting sink ran since: UP is overdue, DOWN by the sinks' rule since its deadline.
    assert gone["state"] == "DOWN" and gone["state_since"] == "2023-11-14T22:23:30.000Z"
    assert row.split()[2:4] == ["no", "DOWN"]


def test_status_exits_69_when_no_router_answers(fleet):
    fill_registry(fleet)
    hear(fleet, KNOWN, 1_700_000_600.0)
    op = operator_config(fleet, [unreachable_endpoint(), unreachable_endpoint()])
    res = fleet.cli("status", "--config", op, "--json", check=False)
    assert res.returncode == 69
    assert "no router answered" in res.stderr
    out = json.loads(res.stdout)
    # Nobody could say whether the agents are attached: unknown, not "no".
    assert {a["uuid"]: a["alive"] for a in out["agents"]} == {KNOWN: None, GONE: None}
    text = fleet.cli("status", "--config", op, check=False)
    assert text.returncode == 69
    assert agent_line(text.stdout, "web-1").split()[2:4] == ["-", "DOWN"]


def test_status_exit_statuses_are_in_its_help(fleet):
    text = fleet.cli("status", "--help").stdout
    assert "69" in text and "exit" in text.lower()


def test_alerts_json(fleet):
    clock = Clock(1_700_000_000.0)
    eng = db.engine(fleet.state_url)
    sink = AlertingSink(eng, clock=clock)
    sink.start()
    ids = {}
    for severity in ("info", "warning", "critical"):
        clock.advance(60)
        msg, frames = relayed("NOTIFY", KNOWN, severity=severity, text=f"{severity} text",
                              hostname="web-1")
        sink.write([protocol.decode_relayed(frames)])
        ids[severity] = msg.msg_id
    sink.close()
    op = operator_config(fleet, [unreachable_endpoint()])
    out = json.loads(fleet.cli("alerts", "--config", op, "--json").stdout)
    assert [a["severity"] for a in out["alerts"]] == ["critical", "warning", "info"]
    first = out["alerts"][0]
    assert first["msg_id"] == ids["critical"] and first["uuid"] == KNOWN
    assert first["hostname"] == "web-1" and first["text"] == "critical text"
    assert first["received_at"] == "2023-11-14T22:16:20.000Z"
    out = json.loads(fleet.cli("alerts", "--config", op, "--json", "--severity", "warning",
                               "--limit", "1").stdout)
    assert [a["msg_id"] for a in out["alerts"]] == [ids["critical"]]
    text = fleet.cli("alerts", "--config", op).stdout
    assert "critical text" in text


def test_alerts_on_a_fresh_fleet(fleet):
    op = operator_config(fleet, [unreachable_endpoint()])
    assert json.loads(fleet.cli("alerts", "--config", op, "--json").stdout) == \
        {"alerts": [], "total": 0, "truncated": False}


def test_tail_prints_the_requested_type(fleet, router):
    op = operator_config(fleet, [router.control_endpoint])
    result = []
    runner = threading.Thread(target=lambda: result.append(fleet.cli(
        "tail", "--config", op, "--type", "NOTIFY", "--json", "--count", "2",
        "--timeout", "20")))
    runner.start()
    try:
        router.xpub.rcvtimeo = 15000
        assert router.xpub.recv() == b"\x01" + b"NOTIFY/"
        sent = []
        for i, (type_, fields) in enumerate([
                ("HEARTBEAT", {}),
                ("NOTIFY", {"severity": "error", "text": "one"}),
                ("STATS", {"metrics": {"cpu.user": 1.5}}),
                ("NOTIFY", {"severity": "info", "text": "two"})]):
            msg, frames = tailed(type_, KNOWN, **fields)
            router.xpub.send_multipart(frames)
            sent.append(msg)
            if i == 1:
                # NOTIFYs whose frames are not ENVELOPE, SIGNATURE, BODY: skipped and counted
                _, rel = relayed("NOTIFY", KNOWN, severity="error", text="wrong order")
                router.xpub.send_multipart([rel[1], rel[2], rel[0]])
                router.xpub.send_multipart([b"NOTIFY/" + KNOWN.encode(), rel[0], b"NOTIFY",
                                            KNOWN.encode(), b"fake-1", rel[2]])  # old layout
    finally:
        runner.join(30)
    res = result[0]
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [(x["type"], x["body"]["text"]) for x in lines] == [("NOTIFY", "one"), ("NOTIFY", "two")]
    assert lines[0]["uuid"] == KNOWN and lines[0]["hostname"] == "web-1"
    assert lines[0]["router"] == "fake-1" and lines[0]["body"]["msg_id"] == sent[1].msg_id
    assert "2 undecodable messages skipped" in res.stderr, res.stderr


def test_tail_agent_hostname_subscribes_to_its_uuid(fleet, router):
    op = operator_config(fleet, [router.control_endpoint])
    result = []
    runner = threading.Thread(target=lambda: result.append(fleet.cli(
        "tail", "--config", op, "--type", "NOTIFY", "--agent", "db-1", "--count", "1",
        "--timeout", "20")))
    runner.start()
    try:
        router.xpub.rcvtimeo = 15000
        # exactly this agent's uuid, slash-terminated: not a prefix of another uuid
        assert router.xpub.recv() == b"\x01" + b"NOTIFY/" + ATTACHED.encode() + b"/"
        for uuid, text in ((KNOWN, "not me"), (ATTACHED + "0", "a longer uuid"),
                           (ATTACHED, "me")):
            _, frames = tailed("NOTIFY", uuid, severity="info", text=text)
            router.xpub.send_multipart(frames)
    finally:
        runner.join(30)
    out = result[0].stdout.splitlines()
    assert len(out) == 1 and "db-1" in out[0] and '"text":"me"' in out[0], out


def test_tail_says_what_it_lost_and_strict_stops_there(fleet, router):
    """The SEQ numbers of a router's tail (SPEC 4.1) skip: ``tail`` says how many messages
    it lost and from which router, and ``--strict`` exits 75 at the first loss."""
    op = operator_config(fleet, [router.control_endpoint])

    def follow(*args):
        result = []
        runner = threading.Thread(target=lambda: result.append(fleet.cli(
            "tail", "--config", op, "--type", "NOTIFY", "--timeout", "20", *args,
            check=False)))
        runner.start()
        try:
            router.xpub.rcvtimeo = 15000
            assert router.xpub.recv() == b"\x01" + b"NOTIFY/"
            for n, text in ((7, "first"), (8, "second"), (11, "after a gap"), (12, "last")):
                _, frames = tailed("NOTIFY", KNOWN, severity="info", text=text)
                router.xpub.send_multipart(frames + [protocol.TAIL_SEQ.pack(n, n - 6)])
        finally:
            runner.join(30)
        assert router.xpub.recv() == b"\x00" + b"NOTIFY/"     # it unsubscribed: gone
        return result[0]
    res = follow("--count", "4")
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 4
    assert "lost 2 NOTIFY messages from router fake-1" in res.stderr, res.stderr
    assert "2 messages lost in all" in res.stderr
    res = follow("--strict")
    assert res.returncode == 75, res.stderr
    assert len(res.stdout.splitlines()) == 2 and "second" in res.stdout
    assert "after a gap" not in res.stdout
    assert "lost 2 NOTIFY messages from router fake-1" in res.stderr


def test_tail_timeout_ends_quietly(fleet, router):
    op = operator_config(fleet, [router.control_endpoint])
    res = fleet.cli("tail", "--config", op, "--timeout", "0.3")
    assert res.stdout == ""


@pytest.mark.parametrize("command", ["status", "alerts", "tail"])
def test_bad_operator_config_exits_78_with_one_line(fleet, command):
    path = fleet.write("bad.yaml", {"routers": ["tcp://127.0.0.1:1"], "timeout": "soon"})
    res = fleet.cli(command, "--config", str(path), check=False)
    assert res.returncode == 78
    assert res.stderr.count("\n") == 1
    assert "bad.yaml: timeout: expected a number" in res.stderr
    missing = fleet.cli(command, "--config", str(fleet.root / "nope.yaml"), check=False)
    assert missing.returncode == 78 and "no such file" in missing.stderr


def test_status_summary_counts_agents():
    from fleetwatch.cli.status import summary
    assert summary([]) == "0 agents, 0 alive"
    assert summary([{"alive": True}]) == "1 agent, 1 alive"
    assert summary([{"alive": True}, {"alive": None}, {"alive": False}]) == \
        "3 agents, 1 alive, 1 unknown"
