"""Silences (sinks/alerting/silences/rules.py): matching by host and check glob, time window, durations."""

from __future__ import annotations

import pytest

from sinks.alerting.silences.rules import (MAX_DURATION, Silence, Subject, check_pattern, first_match, matches,
                            parse_duration)

UUID = "3f2c" + "0" * 28
NOW = 10_000.0


def silence(host="web-*", check=None, created=NOW - 60, until=NOW + 3600, id_=1):
    return Silence(id_, host, check, created, until, "planned work", "alice@ops")


@pytest.mark.parametrize("host, check, subject, muted", [
    ("web-*", None, Subject(UUID, "web-1"), True),                 # a host alert
    ("web-*", None, Subject(UUID, "web-1", "load"), True),         # any check of the host
    ("web-*", None, Subject(UUID, "db-1", "load"), False),
    ("WEB-1", None, Subject(UUID, "web-1"), True),                  # host names ignore case
    ("3f2c*", None, Subject(UUID, None, "disk"), True),            # by uuid
    (UUID, None, Subject(UUID, "db-1"), True),
    ("web-*", "check_disk*", Subject(UUID, "web-1", "check_disk_root"), True),
    ("web-*", "check_disk*", Subject(UUID, "web-1", "load"), False),
    ("web-*", "check_disk*", Subject(UUID, "web-1"), False),        # DOWN is not a check
    ("web-*", "Load", Subject(UUID, "web-1", "load"), False),       # check names keep case
    ("*", None, Subject("router-1", None), True),
])
def test_matching(host, check, subject, muted):
    assert matches(silence(host, check), subject, NOW) is muted


@pytest.mark.parametrize("created, until, muted", [
    (NOW - 10, NOW + 10, True),
    (NOW, NOW + 10, True),              # from its start
    (NOW - 10, NOW, False),             # until is exclusive
    (NOW + 5, NOW + 10, False),         # not begun
    (NOW - 20, NOW - 10, False),        # over
])
def test_time_window(created, until, muted):
    s = silence(created=created, until=until)
    assert matches(s, Subject(UUID, "web-1"), NOW) is muted
    assert s.active(NOW) is muted


def test_first_match_is_the_longest_lasting():
    short = silence(id_=1, until=NOW + 60)
    long_ = silence(id_=2, until=NOW + 7200)
    other = silence(id_=3, host="db-*", until=NOW + 99999)
    assert first_match([short, long_, other], Subject(UUID, "web-1"), NOW) == long_
    assert first_match([other], Subject(UUID, "web-1"), NOW) is None
    assert first_match([], Subject(UUID, "web-1"), NOW) is None


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1w", 604800),
    ("1h30m", 5400), ("1.5h", 5400), ("45", 45), (" 2H ", 7200), ("366d", MAX_DURATION),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "2x", "h", "2h junk", "1h 30m", "nan", "inf",
                                  "367d", "0s", "1e9"])
def test_bad_durations(text):
    with pytest.raises(ValueError) as e:
        parse_duration(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text, ok", [("web-*", True), ("a", True), ("", False),
                                      ("x" * 256, False), ("web\n1", False)])
def test_patterns(text, ok):
    if ok:
        assert check_pattern(text, "HOST") == text
    else:
        with pytest.raises(ValueError, match="HOST"):
            check_pattern(text, "HOST")
