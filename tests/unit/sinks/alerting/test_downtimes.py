"""Downtimes (sinks/alerting/downtimes/rules.py): schedules, windows across midnight and DST,
matching a subject, fixed and flexible covers at their edges, ends."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from sinks.alerting.downtimes.rules import (DaySchedule, Downtime, cover, covering, ended, names,
                                      occurrences, parse_schedule)
from sinks.alerting.silences.rules import Subject

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
UUID = "3f2c" + "0" * 28
H = 3600.0


def at(tz, *fields) -> float:
    return datetime(*fields, tzinfo=tz).timestamp()


def local(tz, t: float) -> str:
    return datetime.fromtimestamp(t, tz).strftime("%m-%d %H:%M%z")


def dt(every=None, start=0.0, end=None, duration=None, flexible=None, host="web-*",
       check=None, children=False, removed=None, id_=1) -> Downtime:
    return Downtime(id_, host, check, start, end, every, duration, flexible, children,
                    removed=removed)


# ---------------------------------------------------------------- schedules

@pytest.mark.parametrize("text, expected", [
    ("sun 02:00-04:00", DaySchedule(frozenset({6}), (2, 0), (4, 0))),
    ("Sat,Sun  23:00-01:00", DaySchedule(frozenset({5, 6}), (23, 0), (1, 0))),
    ("mon-fri 12:00-13:30", DaySchedule(frozenset(range(5)), (12, 0), (13, 30))),
    ("fri-mon 22:00-24:00", DaySchedule(frozenset({4, 5, 6, 0}), (22, 0), (24, 0))),
    ("daily 02:00-03:00", DaySchedule(frozenset(range(7)), (2, 0), (3, 0))),
])
def test_day_schedules(text, expected):
    assert parse_schedule(text) == expected


@pytest.mark.parametrize("text, duration, message", [
    ("sun 02:00-02:00", None, "starts and ends at the same time"),
    ("sun 25:00-02:00", None, "HH:MM"),
    ("sunday 02:00-04:00", None, "expected days"),
    ("sun 02:00-04:00", H, "--for"),
    ("0 2 * * 0", None, "needs --for"),
    ("0 2 * *", H, "is not a schedule"),
    ("every sunday", H, "is not a schedule"),
])
def test_bad_schedules_say_why_in_one_line(text, duration, message):
    with pytest.raises(ValueError, match=message):
        parse_schedule(text, duration)


def test_a_cron_schedule_is_kept_with_its_length():
    assert parse_schedule("0  2 * * 0", H) == "0 2 * * 0"


# ---------------------------------------------------------------- windows

@pytest.mark.parametrize("tz, every, duration, since, expected", [
    # spring forward: 02:00-03:00 does not exist, the window is 03:00-04:00 (one hour)
    (BERLIN, "sun 02:00-04:00", None, (2026, 3, 28), [("03-29 03:00+0200", 1.0)]),
    (NEW_YORK, "sun 02:00-04:00", None, (2026, 3, 7), [("03-08 03:00-0400", 1.0)]),
    # fall back: 02:00-03:00 happens twice, the window covers both (three hours)
    (BERLIN, "sun 02:00-04:00", None, (2026, 10, 24), [("10-25 02:00+0200", 3.0)]),
    (NEW_YORK, "sun 01:00-03:00", None, (2026, 10, 31), [("11-01 01:00-0400", 3.0)]),
    # across midnight, and across midnight on the fall-back night
    (BERLIN, "sat 23:00-01:00", None, (2026, 11, 27), [("11-28 23:00+0100", 2.0)]),
    (BERLIN, "sat 23:00-03:00", None, (2026, 10, 23), [("10-24 23:00+0200", 5.0)]),
    (BERLIN, "fri,sat 22:00-24:00", None, (2026, 11, 26, 12),
     [("11-27 22:00+0100", 2.0), ("11-28 22:00+0100", 2.0)]),
    # cron: each window lasts its duration in real time; on the fall-back night the
    # repeated wall-clock run is one window, not two
    (BERLIN, "0 2 * * 0", 2 * H, (2026, 10, 24), [("10-25 02:00+0200", 2.0)]),
    (BERLIN, "30 2 * * *", H, (2026, 10, 24, 12),
     [("10-25 02:30+0200", 1.0), ("10-26 02:30+0100", 1.0)]),
    (BERLIN, "30 2 * * *", H, (2026, 3, 28, 12),         # 02:30 does not exist: 03:00
     [("03-29 03:00+0200", 1.0), ("03-30 02:30+0200", 1.0)]),
])
def test_windows_keep_wall_clock_hours_across_midnight_and_dst(tz, every, duration, since,
                                                              expected):
    start = at(tz, *since)
    found = occurrences(dt(every, duration=duration), start, start + 2.5 * 86400, tz)
    assert [(local(tz, b), (e - b) / H) for b, e in found] == expected


def test_windows_are_cut_to_the_downtime_start_and_end():
    tz = BERLIN
    start, end = at(tz, 2026, 11, 29, 3, 0), at(tz, 2026, 12, 6, 3, 30)
    d = dt("sun 02:00-04:00", start=start, end=end)
    found = occurrences(d, at(tz, 2026, 11, 1), at(tz, 2027, 1, 1), tz)
    assert [(local(tz, b), local(tz, e)) for b, e in found] == [
        ("11-29 03:00+0100", "11-29 04:00+0100"), ("12-06 02:00+0100", "12-06 03:30+0100")]


@pytest.mark.parametrize("since, until, expected", [
    (0, 100, [(10, 20)]),
    (19.9, 30, [(10, 20)]),
    (20, 30, []),                   # the end is exclusive
    (0, 10, []),                    # so is the window asked about
])
def test_a_fixed_downtime_has_one_window(since, until, expected):
    assert occurrences(dt(start=10, end=20), since, until) == expected


def test_a_removed_downtime_keeps_its_windows_for_the_history():
    assert occurrences(dt(start=10, end=20, removed=15), 0, 100) == [(10, 20)]


def test_a_row_mapping_is_accepted():
    row = {"id": 3, "host": "h", "check_name": None, "start": 10.0, "end": 20.0,
           "every": None, "duration": None, "flexible": None, "children": 0, "comment": None,
           "author": "a", "created": 1.0, "removed": None}
    assert occurrences(row, 0, 100) == [(10.0, 20.0)]


# ---------------------------------------------------------------- matching

@pytest.mark.parametrize("host, check, children, subject, named", [
    ("web-*", None, False, Subject(UUID, "web-1"), True),
    ("web-*", None, False, Subject(UUID, "web-1", "load"), True),
    ("WEB-1", "load", False, Subject(UUID, "web-1", "load"), True),
    ("web-1", "load", False, Subject(UUID, "web-1", "disk"), False),
    ("web-1", "load", False, Subject(UUID, "web-1"), False),
    ("3f2c*", None, False, Subject(UUID, None, "disk"), True),
    ("sw-3", None, False, Subject(UUID, "web-1"), False),
    ("sw-3", None, True, Subject(UUID, "web-1"), True),            # web-1 behind sw-3
    ("sw-*", "load", True, Subject(UUID, "web-1", "load"), True),
    ("sw-3", None, True, Subject(UUID, "db-1"), False),             # not behind it
    ("core", None, True, Subject(UUID, "web-1", "load"), True),      # however far
])
def test_naming_a_subject(host, check, children, subject, named):
    parents = {"web-1": {"sw-3", "core"}, "sw-3": {"core"}}
    d = dt(host=host, check=check, children=children, start=0, end=10)
    assert names(d, subject, lambda h: parents.get(h, set())) is named


# ---------------------------------------------------------------- covers

@pytest.mark.parametrize("now, removed, expected", [
    (9.99, None, None),
    (10, None, (10, 20)),           # from its start
    (19.99, None, (10, 20)),
    (20, None, None),               # to its end, exclusive: the problem is delivered then
    (12, 15, (10, 15)),             # removed: cut there
    (15, 15, None),
])
def test_a_fixed_cover_at_its_edges(now, removed, expected):
    assert cover(dt(start=10, end=20, removed=removed), now) == expected


W0, W1, D = 1000.0, 2000.0, 500.0       # a flexible window [W0, W1), lasting D


@pytest.mark.parametrize("problem, now, expected", [
    (W0, W0, (W0, W0 + D)),                  # a problem at the window's start
    (W1 - 1, W1 + 100, (W1 - 1, W1 - 1 + D)),  # late in it: lasts past the window
    (W1 - 1, W1 - 1 + D, None),              # D later: over, delivered then
    (W1, W1 + 1, None),                      # at its end: outside
    (W0 - 1, W0 + 1, None),                  # began before the window: not covered
    (None, W0 + 1, None),                    # no problem: nothing to cover
    (W0 + 10, W0 + 5, None),                 # not begun yet
])
def test_a_flexible_cover_starts_with_a_problem_beginning_in_its_window(problem, now,
                                                                      expected):
    assert cover(dt(start=W0, end=W1, flexible=D), now, problem) == expected


def test_a_flexible_recurring_window_in_local_time():
    tz = NEW_YORK
    d = dt("sun 02:00-04:00", flexible=H)
    problem = at(tz, 2026, 3, 8, 3, 30)         # the spring-forward day's one hour
    assert cover(d, problem + 10, problem, tz) == (problem, problem + H)
    assert cover(d, problem + 10, at(tz, 2026, 3, 8, 1, 59), tz) is None


def test_the_longest_cover_wins():
    a = dt(start=0, end=50, id_=1)
    b = dt(start=0, end=80, id_=2)
    c = dt(start=0, end=80, host="db-*", id_=3)
    assert covering([a, b, c], Subject(UUID, "web-1"), 10).id == 2
    assert covering([a, c], Subject(UUID, "web-1"), 60) is None


# ---------------------------------------------------------------- ends

@pytest.mark.parametrize("d, since, now, expected", [
    (dt(start=0, end=100), 90, 100, True),         # the end in (since, now]
    (dt(start=0, end=100), 100, 110, False),       # looked at already
    (dt(start=0, end=100), 80, 99, False),
    (dt(start=0, end=100, removed=50), 40, 60, True),
    (dt(start=0, end=100, removed=50), 60, 110, False),   # removed: its end is gone
    (dt(start=0, end=100, removed=50), 50, 60, True),     # removed as it was looked at
    (dt(start=0, end=100, flexible=30), 110, 120, True),  # a cover may end up to end + D
    (dt(start=0, end=100, flexible=30), 130, 140, False),
])
def test_ends_since_the_last_look(d, since, now, expected):
    assert ended(d, since, now) is expected


def test_a_recurring_window_ends_each_occurrence():
    tz = BERLIN
    d = dt("daily 23:00-01:00")
    end = at(tz, 2026, 11, 26, 1, 0)
    assert ended(d, end - 5, end, tz)
    assert not ended(d, end, end + 5, tz)
    assert not ended(d, end - 3600, end - 5, tz)


def test_the_freshness_rule_holds_a_check_whose_host_is_in_a_downtime():
    from sinks.alerting.freshness import rules as freshness
    assert freshness.held(freshness.Host(True, 100.0, downtime=True), 50.0) == \
        freshness.DOWNTIME
    assert freshness.held(freshness.Host(True, 100.0), 50.0) is None
