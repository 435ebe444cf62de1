"""What the ``alertmanager`` channel posts (sinks/alerting/delivery/services/alertmanager.py), pure,
and the demo's stand-in refusing what a real Alertmanager refuses."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from fleetwatch.config import build
from sinks.alerting.delivery.services import alertmanager as am
from sinks.alerting.delivery.channeltypes import AlertmanagerChannel

pytestmark = pytest.mark.timeout(60)

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
NOW = 1_800_000_000.0
CHANNEL = build(AlertmanagerChannel, {"url": "http://am:9093", "labels": {"team": "ops"},
                                      "ends_after": 3600})


def event(action="trigger", severity="critical", **more) -> dict:
    return {"key": f"{U1}/check/check_disk", "kind": "check", "action": action,
            "severity": severity, "uuid": U1, "hostname": "web-1", "check": "check_disk",
            "status": 2, "summary": "DISK CRITICAL", "text": "/ 95%", "created": NOW - 5,
            **more}


def test_the_labels_come_from_the_key_and_stable_fields_only():
    trigger = am.labels(event(text="output one"), CHANNEL)
    assert trigger == {"team": "ops", "alertname": "check_disk", "host": "web-1", "uuid": U1,
                       "check": "check_disk", "severity": "critical",
                       "fleetwatch_key": f"{U1}/check/check_disk"}
    assert am.labels(event(text="other output", summary="x", created=NOW), CHANNEL) == trigger


@pytest.mark.parametrize("kind, key, check, name", [
    ("check", "U/check/check_disk", "check_disk", "check_disk"),
    ("check", "U/check/x", "my check (v2)!", "my_check_v2"),
    ("flapping", "U/flapping/check_load", "check_load", "check_load_flapping"),
    ("host", "U/host", None, "host_down"),
    ("host", "U/process/backup", "backup", "process_down"),
    ("notify", "U/notify/7", None, "notify"),
    ("channel", "channel/slack", "slack", "channel_failing"),
    ("test", "test/am/1.0", "am", "fleetwatch_test"),
])
def test_alertname_by_kind(kind, key, check, name):
    assert am.alertname({"kind": kind, "key": key, "check": check}) == name


def test_the_fingerprint_is_the_alertmanagers():
    # seen in GET /api/v2/alerts of prometheus-alertmanager 0.25.0 for these labels
    assert am.fingerprint({"alertname": "check_disk", "host": "web-1", "severity": "critical",
                           "fleetwatch_key": 'u1/check/we"ird\\k\u00e9 y'}) == \
        "23b7cbc92ad98510"


def test_a_trigger_fires_until_ends_after_and_resolves_the_keys_other_severity():
    warning = {"labels": am.labels(event(), CHANNEL, "warning"),
               "annotations": {"summary": "WARNING ..."}, "startsAt": "2027-01-15T08:00:00Z"}
    posted = am.alerts_for(event(since=NOW - 600, link="https://fleet/hosts/x"), [warning],
                           CHANNEL, NOW)
    firing, old = posted
    assert firing["labels"]["severity"] == "critical"
    assert (firing["startsAt"], firing["endsAt"]) == ("2027-01-15T07:50:00.000Z",
                                                      "2027-01-15T09:00:00.000Z")
    assert firing["generatorURL"] == firing["annotations"]["console"] == "https://fleet/hosts/x"
    assert old == {"labels": warning["labels"], "annotations": {"summary": "WARNING ..."},
                   "endsAt": "2027-01-15T08:00:00.000Z"}


def test_a_recovery_resolves_what_the_alertmanager_holds_and_nothing_else():
    held = {"labels": am.labels(event(), CHANNEL), "annotations": {"summary": "CRITICAL"}}
    (resolved,) = am.alerts_for(event("resolve", "ok", summary="DISK OK"), [held], CHANNEL,
                                NOW)
    assert resolved["labels"]["severity"] == "critical" and "startsAt" not in resolved
    assert resolved["annotations"]["summary"] == "RECOVERY web-1/check_disk: DISK OK"
    assert am.alerts_for(event("resolve", "ok"), [], CHANNEL, NOW) == []


def test_an_acknowledgement_is_an_annotation_on_the_firing_alert():
    held = {"labels": am.labels(event(), CHANNEL), "annotations": {"summary": "CRITICAL"},
            "startsAt": "2027-01-15T07:00:00.000Z"}
    (acked,) = am.alerts_for(event("acknowledge", summary="acknowledged by @alice: on it"),
                             [held], CHANNEL, NOW)
    assert acked["labels"] == held["labels"] and acked["startsAt"] == held["startsAt"]
    assert acked["annotations"] == {"summary": "CRITICAL",
                                    "acknowledged": "acknowledged by @\u200balice: on it"}


def test_the_gets_matchers_are_escaped_and_other_channels_alerts_are_not_mine():
    keys = ['a"b\\c', "x.y|z"]
    assert am.filters(keys[:1], CHANNEL) == ['fleetwatch_key="a\\"b\\\\c"', 'team="ops"']
    assert am.filters(keys, CHANNEL)[0] == 'fleetwatch_key=~"a\\"b\\\\\\\\c|x\\\\.y\\\\|z"'
    ours = {"labels": {**am.labels(event(), CHANNEL)}}
    theirs = {"labels": {**ours["labels"], "route": "other"}}
    key = ours["labels"]["fleetwatch_key"]
    assert am.mine([ours, theirs, "junk", {"labels": None}], {key}, CHANNEL) == \
        {key: [{**ours, "annotations": {}}]}


def test_the_stand_in_matches_filters_as_the_alertmanager_reads_them():
    from fleetwatch.cli.demo.receivers.alertmanager import matcher
    labels = {"fleetwatch_key": 'a"b\\c', "k": "x.y"}
    assert matcher('fleetwatch_key="a\\"b\\\\c"')(labels)
    assert matcher(am.filters(['a"b\\c', "q"], CHANNEL)[0])(labels)
    assert not matcher('k=~"x"')(labels) and matcher('k!="z"')(labels)
    assert matcher("no quotes") is None


@pytest.fixture
def stand_in():
    from fleetwatch.cli.demo.receivers.alertmanager import Alertmanager
    server = Alertmanager(None, 0).start()
    yield server
    server.stop()


def post(server, body) -> tuple[int, str]:
    req = urllib.request.Request(server.url + "/api/v2/alerts", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("body, code, said", [
    ({"labels": {"a": "b"}}, 400, "cannot unmarshal object"),
    ([{"labels": {}}], 400, "at least one label pair required"),
    ([{"labels": {"a": ""}}], 400, "at least one label pair required"),
    ([{"labels": {"a b": "x"}}], 400, 'invalid label set: invalid name \\"a b\\"'),
    ([{"labels": {"a": "x"}, "startsAt": "yesterday"}], 400, "parsing time"),
    ([{"labels": {"a": "x"}, "startsAt": "2027-01-02T00:00:00Z",
       "endsAt": "2027-01-01T00:00:00Z"}], 400, "start time must be before end time"),
    ([{"labels": {"a": "x"}, "generatorURL": "not a url"}], 422, "must be of type uri"),
])
def test_the_stand_in_refuses_what_the_alertmanager_refuses(stand_in, body, code, said):
    assert post(stand_in, body)[0] == code and said in post(stand_in, body)[1]
    assert stand_in.alerts == {}


def test_the_stand_in_keeps_alerts_by_label_set_firing_then_resolved(stand_in):
    alert = {"labels": {"alertname": "x", "empty": ""}, "startsAt": "2020-01-01T00:00:00Z",
             "endsAt": "2999-01-01T00:00:00.123456789Z"}
    assert post(stand_in, [alert]) == (200, "")
    (held,) = stand_in.firing()
    assert held["labels"] == {"alertname": "x"}
    assert held["fingerprint"] == am.fingerprint({"alertname": "x"})
    assert post(stand_in, [{"labels": {"alertname": "x"},
                            "endsAt": "2021-01-01T00:00:00Z"}])[0] == 200
    assert stand_in.firing() == [] and len(stand_in.alerts) == 1
