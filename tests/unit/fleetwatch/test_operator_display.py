"""What the operator commands show of what senders wrote: the display helpers escape every
control character visibly and survive any number as a time (the commands run against a real
fleet: tests/integration/test_operator_hostile.py)."""

from __future__ import annotations

import json

import pytest

from fleetwatch.display import escape, human, iso, table

TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
FORGED = "ok\rfine\n2026-01-01 00:00:00 UTC  critical  db-1  forged"
HOSTILE = f"{TITLE}{CLEAR}disk {FORGED}"


# ---------------------------------------------------------------- display helpers (units)

def test_escape_shows_control_characters_visibly():
    assert escape(HOSTILE) == ("\\x1b]0;pwned\\x07\\x1b[2Jdisk ok\\rfine\\n2026-01-01 00:00:00 "
                               "UTC  critical  db-1  forged")
    assert escape("tab\there \x7f \x9b1m \u202eevil \u2028") == \
        "tab\\there \\x7f \\x9b1m \\u202eevil \\u2028"
    assert escape("plain ünïcödé, 日本") == "plain ünïcödé, 日本"


def test_table_escapes_every_cell_and_header():
    text = table([{"name": HOSTILE, "n": 1}], ["name", "n"])
    assert "\x1b" not in text and "\r" not in text and len(text.splitlines()) == 2


@pytest.mark.parametrize("value", [1e15, -1e15, 1e300, 253402300800.0, -62135596801.0,
                                   float("inf"), float("nan")])
def test_times_survive_any_number(value):
    assert iso(value) is not None and "out of range" in human(value)
    assert table([{"t": iso(value)}], ["t"])


def test_one_human_format_with_the_zone():
    assert iso(1_700_000_000.5) == "2023-11-14T22:13:20.500Z"
    assert human(1_700_000_000.5) == "2023-11-14 22:13:20 UTC"
    assert human(iso(1_700_000_000.5)) == "2023-11-14 22:13:20 UTC"
    assert table([{"at": iso(1_700_000_000.5)}], ["at"]).splitlines()[1] == \
        "2023-11-14 22:13:20 UTC"
    assert json.dumps(iso(1_700_000_000.5)) == '"2023-11-14T22:13:20.500Z"'
