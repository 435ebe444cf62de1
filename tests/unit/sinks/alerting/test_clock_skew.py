"""A sender's clock against the sink's (sinks/alerting/hosts/skew.py): what is off, what is
written, and how status and the console say it."""

from __future__ import annotations

from fleetwatch.display import skew as said
from sinks.alerting.hosts import skew

T = 1_700_000_000.0


def test_only_a_clock_further_off_than_the_setting_is_a_skew():
    assert skew.beyond(T + 7200.4, T, 60) == 7200
    assert skew.beyond(T - 61, T, 60) == -61
    assert skew.beyond(T + 60, T, 60) is None and skew.beyond(T - 0.05, T, 60) is None
    assert skew.beyond(T + 7200, T, 0) is None                  # 0: never


def test_a_skew_is_written_when_it_changes_only():
    shown = skew.Shown()
    assert shown.changed({"a": 7200, "b": None}) == {"a": 7200, "b": None}   # first: both
    assert shown.changed({"a": 7200, "b": None}) == {}
    assert shown.changed({"a": None, "b": -90}) == {"a": None, "b": -90}


def test_it_is_said_with_its_sign():
    assert said(7200) == "clock skew +7200 s" and said(-61) == "clock skew -61 s"
    assert said(None) is None
