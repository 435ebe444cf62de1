"""``fleetwatch downtime add|list|remove`` run in-process: what ``add`` plans from its
options (times in the local zone, the next day's end), usage errors in one line, exit
statuses (the sinks' side is tests/integration/test_downtimes_e2e.py)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from support.cli import fw, operator_config, register

pytest.importorskip("sqlalchemy")

from fleetwatch.actions.downtimes import parse_time, plan  # noqa: E402

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 25, 18, 0, tzinfo=BERLIN).timestamp()
H = 3600.0


@pytest.fixture
def op(tmp_path):
    path = operator_config(tmp_path)
    register(path, {"web-1": ["load"], "db-1": []})           # (hosts the fleet has seen: query.known)
    return path


def args(host="web-1", check=None, **options) -> argparse.Namespace:
    base = dict(duration=None, start=None, end=None, every=None, flexible=None,
                children=False, comment="")
    base.update(options)
    return argparse.Namespace(host=host, check=check, **base)


def local(**fields) -> float:
    return datetime(**{"year": 2026, "month": 11, "day": 25, **fields},
                    tzinfo=BERLIN).timestamp()


@pytest.mark.parametrize("text, expected", [
    ("20:30", local(hour=20, minute=30)),
    ("2026-11-26 02:00", local(day=26, hour=2, minute=0)),
    ("2026-11-26T02:00", local(day=26, hour=2, minute=0)),
    ("2026-11-26T02:00:00+00:00", datetime(2026, 11, 26, 2, tzinfo=ZoneInfo("UTC"))
     .timestamp()),
])
def test_times_are_local_unless_they_say_otherwise(text, expected):
    assert parse_time(text, NOW, BERLIN, "--start") == expected


@pytest.mark.parametrize("options, window", [
    (dict(duration="2h"), (NOW, NOW + 2 * H)),
    (dict(start="20:00", duration="1h"), (local(hour=20, minute=0), local(hour=21, minute=0))),
    (dict(start="23:00", end="01:00"), (local(hour=23, minute=0),       # the next day's
                                        local(day=26, hour=1, minute=0))),
    (dict(start="17:00", end="19:00"), (local(hour=17, minute=0), local(hour=19, minute=0))),
    (dict(every="sun 02:00-04:00"), (NOW, None)),
    (dict(every="sun 02:00-04:00", start="2026-12-01 00:00", end="2027-01-01 00:00"),
     (local(month=12, day=1, hour=0, minute=0), local(year=2027, month=1, day=1, hour=0,
                                                      minute=0))),
])
def test_the_window_asked_for(options, window):
    d = plan(args(**options), NOW, BERLIN, "alice")
    assert (d.start, d.end) == window and d.author == "alice" and d.created == NOW


def test_a_cron_schedule_keeps_its_length_and_a_flexible_one_its_duration():
    d = plan(args(every="0 2 * * 0", duration="2h", flexible="30m", children=True), NOW,
             BERLIN, "bob")
    assert (d.every, d.duration, d.flexible, d.children) == ("0 2 * * 0", 2 * H, 1800, True)


@pytest.mark.parametrize("options, message", [
    (dict(), "give --for DURATION, --start TIME --end TIME, or --every"),
    (dict(duration="1h", end="20:00"), "--for and --end: give one"),
    (dict(start="2026-11-25 19:00", end="2026-11-25 18:30"), "is not after the start"),
    (dict(start="2026-11-24 10:00", end="2026-11-24 12:00"), "is in the past"),
    (dict(start="soon", end="20:00"), "--start: 'soon' is not a time"),
    (dict(duration="2x"), "is not a duration"),
    (dict(flexible="1h", duration="2h"), "--flexible needs a window"),
    (dict(every="sun 02:00-04:00", duration="1h"), "--for: a day schedule"),
    (dict(every="0 2 * * 0"), "needs --for"),
    (dict(every="sundays"), "is not a schedule"),
    (dict(every="sun 02:00-04:00", end="2026-11-26 00:00"), "no window before its end"),
    (dict(duration="400d"), "at most 366 days"),
    (dict(duration="1h", comment="a\nb"), "--comment"),
])
def test_what_cannot_be_planned_says_why(options, message):
    with pytest.raises(ValueError, match=message):
        plan(args(**options), NOW, BERLIN, "alice")


@pytest.mark.parametrize("argv, message", [
    (["add", "web-1", "--for", "2x"], "is not a duration"),
    (["add", "", "--for", "1h"], "HOST"),
    (["add", "web-1", "--for", "1h", "--by", ""], "--by"),
    (["add", "web-1"], "give --for"),
])
def test_usage_errors_exit_2_with_one_line(op, capsys, argv, message):
    code, out, err = fw(capsys, "downtime", *argv, "--config", op)
    assert (code, out) == (2, "") and message in err and err.count("\n") == 1
    assert err.startswith("fleetwatch downtime: ")


def test_add_list_remove(op, capsys):
    code, out, _ = fw(capsys, "downtime", "add", "web-*", "load", "--for", "1h", "--comment",
                      "disk swap", "--by", "alice", "--config", op)
    assert code == 0 and out.startswith("downtime 1: web-* load from ")
    assert out.rstrip().endswith("by alice: disk swap")
    # two nights, neither tonight nor last night (this test's own clock is the machine's)
    today = datetime.now().weekday()
    days = ",".join(("mon", "tue", "wed", "thu", "fri", "sat", "sun")[(today + k) % 7]
                    for k in (2, 3))
    code, out, _ = fw(capsys, "downtime", "add", "db-1", "--every", f"{days} 23:00-01:00",
                      "--children", "--config", op)
    assert code == 0 and f"every '{days} 23:00-01:00', next " in out
    code, out, _ = fw(capsys, "downtime", "list", "--json", "--config", op)
    listed = json.loads(out)["downtimes"]
    assert [(d["id"], d["state"], d["held"]) for d in listed] == [(2, "planned", 0),
                                                                  (1, "active", 0)]
    assert listed[0]["children"] is True and listed[0]["window"][0].endswith("Z")
    code, out, _ = fw(capsys, "downtime", "list", "--config", op)
    assert code == 0 and out.splitlines()[0].split()[:4] == ["ID", "HOST", "CHECK", "STATE"]
    assert fw(capsys, "downtime", "remove", "1", "--config", op)[:2] == \
        (0, "downtime 1 removed\n")
    code, _, err = fw(capsys, "downtime", "remove", "1", "--config", op)
    assert (code, err) == (1, "fleetwatch downtime: no running or planned downtime 1\n")
    code, out, _ = fw(capsys, "downtime", "list", "--all", "--json", "--config", op)
    assert [(d["id"], d["state"]) for d in json.loads(out)["downtimes"]] == \
        [(2, "planned"), (1, "removed")]


def test_a_missing_database_exits_69(tmp_path, capsys):
    path = tmp_path / "fleetwatch.yaml"
    path.write_text(f"routers: [tcp://127.0.0.1:9]\nstate_url: sqlite:///{tmp_path}/none.db\n")
    code, _, err = fw(capsys, "downtime", "add", "web-1", "--for", "1h", "--config", str(path))
    assert code == 69 and "no state database" in err
    assert fw(capsys, "downtime", "list", "--config", str(tmp_path / "missing.yaml"))[0] == 78
