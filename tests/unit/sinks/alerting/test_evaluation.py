"""The alerting sink's evaluation (sinks/alerting/evaluation.py) on a recording port, without
a database: a result's SOFT and HARD path, and every reason an alert is held back
(sinks/alerting/holds.py), each asked of the one predicate and raised again once the hold
is over."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sinks.alerting import holds
from sinks.alerting.acks.rules import RECOVERED, Ack
from sinks.alerting.checks.rules import CRITICAL, OK, WARNING, owed
from sinks.alerting.config import AlertingConfig
from sinks.alerting.downtimes.rules import Downtime
from sinks.alerting.evaluation import Evaluation
from sinks.alerting.freshness.rules import DOWN
from sinks.alerting.hosts.rules import HostState
from sinks.alerting.silences.rules import Silence
from support.alertport import T0, WEB, RecordingPort

LOAD = (WEB, "load")
KEY = f"{WEB}/check/load"
#: three attempts before a problem is HARD; no flapping
THREE = AlertingConfig(max_check_attempts=3, flap_detection=False)
#: HARD at the first non-OK result
ONE = AlertingConfig(max_check_attempts=1, flap_detection=False)


def row(status: int, at: float, plugin: str = "load", uuid: str = WEB) -> dict:
    """The ``checks`` row of a RESULT run at ``at`` (:func:`sinks.alerting.rows.check_row`)."""
    return {"uuid": uuid, "plugin": plugin, "status": status, "output": f"{plugin} {status}",
            "long_output": "", "perfdata": [], "command_id": f"s:{at}", "slot": None,
            "started": at, "duration": None, "last_result": at, "router": "r1",
            "received_at": at, "boot": None, "seq": None}


def results(port: RecordingPort, *rows: dict) -> list[tuple[str, str, str]]:
    """The rows evaluated in one transaction: (key, action, severity) of what went out."""
    Evaluation(port).results(list(rows))
    return [(e["key"], e["action"], e["severity"]) for e in port.enqueued]


def test_a_problem_is_soft_until_its_last_attempt_then_hard_and_told_once():
    port = RecordingPort(config=THREE)
    assert results(port, row(CRITICAL, T0)) == []
    assert (port.state().hard, port.state().attempt) == (False, 1)
    assert results(port.at(T0 + 60), row(CRITICAL, T0 + 60)) == []
    assert (port.state().hard, port.state().attempt) == (False, 2)
    assert results(port.at(T0 + 120), row(CRITICAL, T0 + 120)) == [
        (KEY, "trigger", "critical")]
    state = port.state()
    assert (state.hard, state.hard_status, state.notified) == (True, CRITICAL, CRITICAL)
    assert port.enqueued[0]["hostname"] == "web-1" and port.numbered == [KEY]
    assert port.counts["alert_check_trigger"] == 1 and port.heard_keys == {LOAD}
    assert results(port.at(T0 + 180), row(CRITICAL, T0 + 180)) == []     # told already
    assert results(port.at(T0 + 240), row(OK, T0 + 240)) == [(KEY, "resolve", "ok")]
    assert port.state().notified == OK


def test_a_soft_problem_that_recovers_tells_nobody():
    port = RecordingPort(config=THREE)
    assert results(port, row(WARNING, T0), row(WARNING, T0 + 1), row(OK, T0 + 2)) == []
    assert port.state().notified == OK and len(port.stored) == 1    # the newest stored


def test_a_result_not_newer_than_the_state_is_not_applied():
    port = RecordingPort(config=ONE)
    results(port, row(CRITICAL, T0))
    assert results(port.at(T0 + 10), row(OK, T0 - 5)) == []
    assert port.state().status == CRITICAL and port.counts["result_recorded"] == 0


#: each reason an alert is held back: how a test sets it up, and its counter
HOLDS = {
    holds.SILENCED: lambda port: port.active_silences.append(
        Silence(7, "web-*", "lo*", T0 - 10, T0 + 3600)),
    holds.DOWNTIME: lambda port: port.active_downtimes.append(
        Downtime(3, "web-1", None, T0 - 10, T0 + 3600)),
    holds.ACKNOWLEDGED: lambda port: port.acknowledged.update(
        {LOAD: Ack(5, KEY, WEB, "load", CRITICAL, T0 - 10, "ops")}),
    holds.PARENT_DOWN: lambda port: port.parents.update({LOAD: "sw-3"}),
}


@pytest.mark.parametrize("reason", list(HOLDS))
def test_a_held_problem_is_not_told_and_goes_out_once_the_hold_is_over(reason):
    port = RecordingPort(config=ONE)
    HOLDS[reason](port)
    assert results(port, row(CRITICAL, T0)) == []
    assert port.counts[holds.COUNTS[reason]] == 1
    assert port.state().notified == OK              # not told: owed
    recorded = [r for r, _, _ in port.held]
    assert recorded == ([reason] if reason in (holds.SILENCED, holds.DOWNTIME) else [])
    assert [(r, e["key"]) for r, _, e in port.noted] == [(reason, KEY)]     # every hold
    event = {"key": KEY, "kind": "check", "action": "trigger", "severity": "critical",
             "uuid": WEB, "hostname": "web-1"}
    ack = port.acknowledged.get(LOAD)
    hold = holds.held_back(port, event, "load", T0, ack, port.parents.get(LOAD))
    assert hold is not None and hold[0] == reason
    if reason == holds.PARENT_DOWN:
        assert port.state().unreachable == "sw-3"
    # the hold is over: the tick's pass over owed checks tells it, once
    port = RecordingPort(config=ONE)
    HOLDS[reason](port)
    results(port, row(CRITICAL, T0))
    port.active_silences, port.active_downtimes, port.acknowledged, port.parents = [], [], {}, {}
    told = Evaluation(port.at(T0 + 7200)).owed([LOAD], lambda state: bool(owed(state)))
    assert [s.notified for s in told] == [CRITICAL]
    assert [(e["key"], e["action"]) for e in port.enqueued] == [(KEY, "trigger")]
    assert Evaluation(port.at(T0 + 7300)).owed([LOAD], lambda s: bool(owed(s))) == []


def test_nothing_holds_an_alert_back_when_nothing_applies():
    port = RecordingPort()
    port.active_silences.append(Silence(1, "db-*", None, T0 - 10, T0 + 3600))
    port.active_downtimes.append(Downtime(2, "web-1", "disk", T0 - 10, T0 + 3600))
    event = {"key": KEY, "kind": "check", "action": "trigger", "uuid": WEB,
             "hostname": "web-1"}
    assert holds.held_back(port, event, "load") is None


def test_an_acknowledgement_holds_before_a_silence_and_a_recovery_is_never_held():
    port = RecordingPort()
    HOLDS[holds.SILENCED](port)
    ack = Ack(5, KEY, WEB, "load", CRITICAL, T0 - 10)
    trigger = {"key": KEY, "kind": "check", "action": "trigger", "uuid": WEB,
               "hostname": "web-1"}
    assert holds.held_back(port, trigger, "load", ack=ack)[0] == holds.ACKNOWLEDGED
    resolve = {**trigger, "action": "resolve"}
    assert holds.held_back(port, resolve, "load", ack=ack, parent="sw-3")[0] == holds.SILENCED
    port.active_silences.clear()
    assert holds.held_back(port, resolve, "load", ack=ack, parent="sw-3") is None


def test_a_recovery_ends_the_acknowledgement_and_goes_out():
    port = RecordingPort(config=ONE)
    HOLDS[holds.ACKNOWLEDGED](port)
    port.parents[LOAD] = "sw-3"
    results(port, row(CRITICAL, T0))
    port.checks[LOAD] = (replace(port.state(), notified=CRITICAL), 1)     # told before
    assert results(port.at(T0 + 60), row(OK, T0 + 60)) == [(KEY, "resolve", "ok")]
    assert port.ended == [(5, RECOVERED)] and port.state().unreachable is None


def test_a_host_unreachable_behind_its_parent_pages_nobody_until_the_parent_is_fine():
    port = RecordingPort()
    port.hosts[(WEB, "")] = HostState(up=True, last_heard=T0 - 100, interval=1.0,
                                      since=T0 - 1000, routers={"r1": T0 - 100})
    port.due = [(WEB, "")]
    port.host_parents[WEB] = ("sw-3", DOWN)
    assert Evaluation(port).expire() == {}
    assert port.enqueued == [] and port.counts["alert_unreachable"] == 1
    assert [(r, by, e["key"]) for r, by, e in port.noted] == [
        (holds.UNREACHABLE, "sw-3", f"{WEB}/host")]
    state = port.hosts[(WEB, "")]
    assert (state.up, state.unreachable, state.notified) == (False, "sw-3", False)
    del port.host_parents[WEB]
    Evaluation(port.at(T0 + 10)).expire()
    assert [(e["key"], e["action"]) for e in port.enqueued] == [(f"{WEB}/host", "trigger")]
    assert port.hosts[(WEB, "")].notified and port.hosts[(WEB, "")].unreachable is None


def test_a_notification_is_held_by_a_silence_of_its_source():
    port = RecordingPort()
    port.active_silences.append(Silence(9, "web-1", "disk-*", T0 - 10, T0 + 3600))
    note = {"msg_id": "m1", "uuid": WEB, "hostname": "web-1", "severity": "warning",
            "text": "disk almost full", "source": "disk-watch", "sent_at": T0,
            "received_at": T0, "router": "r1"}
    other = {**note, "msg_id": "m2", "source": "cron"}
    Evaluation(port).notifications([note, other, note])
    assert [e["key"] for e in port.enqueued] == [f"{WEB}/notify/m2"]
    assert [(r, by.id) for r, by, _ in port.held] == [(holds.SILENCED, 9)]
    assert port.counts["notify_recorded"] == 2 and port.counts["notify_already_recorded"] == 1


def test_the_recording_port_and_the_sinks_port_offer_what_the_port_says():
    """The fake is honest: it and the sink's adapter (sinks/alerting/transaction.py) have
    every member of sinks/alerting/port.py's EvaluationPort (a Port and more)."""
    from sinks.alerting.port import EvaluationPort, Port
    from sinks.alerting.transaction import Transaction
    wanted = {name for port in (Port, EvaluationPort) for name in vars(port)
              if not name.startswith("_")} | set(Port.__annotations__)
    assert wanted - set(dir(RecordingPort())) == set()

    class Sink:
        config, tz, started_at = AlertingConfig(), None, T0
    assert wanted - set(dir(Transaction(Sink(), None, T0))) == set()
