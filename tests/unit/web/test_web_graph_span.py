"""The time range of a page's graphs (web/pages.py graph_range): a preset, or from and until
in UTC as a datetime-local field sends them, and a clear line for a range that is not one."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from web.pages import RANGE_MAX, graph_range  # noqa: E402

NOW = 1_800_000_000.0                   # 2027-01-15 08:00:00 UTC


@pytest.mark.parametrize("custom, span", [
    ({"from": "", "until": ""}, (NOW - 3600, NOW)),
    ({"from": "2027-01-15T06:00", "until": ""}, (NOW - 7200, NOW)),
    ({"from": "2027-01-14T08:00", "until": "2027-01-15T07:30"}, (NOW - 86400, NOW - 1800)),
])
def test_a_preset_or_from_and_until_in_utc(custom, span):
    assert graph_range(custom, 3600, NOW) == span


@pytest.mark.parametrize("custom, said", [
    ({"from": "yesterday", "until": ""}, "from: expected a date and time like"),
    ({"from": "2027-01-15T06:00", "until": "soon"}, "until: expected a date and time"),
    ({"from": "2027-01-15T06:00", "until": "2027-01-15T05:00"}, "ends before it starts"),
    ({"from": "2026-01-01T00:00", "until": ""}, f"at most {RANGE_MAX // 86400} days"),
])
def test_a_range_that_is_not_one_is_said(custom, said):
    with pytest.raises(ValueError, match=said):
        graph_range(custom, 3600, NOW)
