"""A STATS's labelled series as every receiver reads them (fleetwatch/series.py, SPEC 4.7):
which entries are taken, how the sinks' renaming and merging of label keys go."""

from __future__ import annotations

from collections import Counter

import pytest

from fleetwatch.series import (MAX_KEY, MAX_LABELS, MAX_NAME, MAX_VALUE, Entry, entries,
                               entry_of, relabelled)

pytestmark = pytest.mark.timeout(30)

GOOD = {"name": "http.server.duration_bucket", "labels": {"le": "0.005", "service.name": "shop"},
        "value": 3, "kind": "counter"}


@pytest.mark.parametrize("item, taken", [
    (GOOD, Entry("http.server.duration_bucket", (("le", "0.005"), ("service.name", "shop")),
                 3, True)),
    ({"name": "q", "value": 2.5}, Entry("q", (), 2.5, False)),             # no labels: gauge
    ({"name": "q", "value": 1, "labels": None, "kind": None}, Entry("q", (), 1, False)),
    ({"name": "q", "value": 1, "kind": "gauge", "extra": 1}, Entry("q", (), 1, False)),
    ({"name": "q", "value": 1, "labels": {"a": "", "b": "x"}},              # empty: no label
     Entry("q", (("b", "x"),), 1, False)),
    ({"name": "n" * MAX_NAME, "value": 0}, Entry("n" * MAX_NAME, (), 0, False)),
    ({"name": "q", "value": 1, "labels": {"k" * MAX_KEY: "v" * MAX_VALUE}},
     Entry("q", (("k" * MAX_KEY, "v" * MAX_VALUE),), 1, False)),
    ({**GOOD, "name": ""}, None),
    ({**GOOD, "name": "n" * (MAX_NAME + 1)}, None),
    ({**GOOD, "name": 5}, None),
    ({**GOOD, "value": "3"}, None),                                          # a string
    ({**GOOD, "value": True}, None),
    ({**GOOD, "value": float("nan")}, None),
    ({**GOOD, "value": float("inf")}, None),
    ({**GOOD, "value": None}, None),
    ({**GOOD, "kind": "histogram"}, None),
    ({**GOOD, "kind": 1}, None),
    ({**GOOD, "labels": ["le", "0.005"]}, None),
    ({**GOOD, "labels": {"le": 0.005}}, None),                               # not a string
    ({**GOOD, "labels": {"": "x"}}, None),
    ({**GOOD, "labels": {"k" * (MAX_KEY + 1): "x"}}, None),
    ({**GOOD, "labels": {"k": "v" * (MAX_VALUE + 1)}}, None),
    ({**GOOD, "labels": {f"k{i}": "v" for i in range(MAX_LABELS + 1)}}, None),
    ({k: v for k, v in GOOD.items() if k != "value"}, None),
    ("junk", None),
    (None, None),
    ([GOOD], None),
])
def test_entry_of(item, taken):
    assert entry_of(item) == taken


def test_entries_counts_what_it_skips():
    counts = Counter()
    assert entries(None, counts) == [] and not counts            # no series: nothing
    assert entries([GOOD, "junk", {"name": "q"}, GOOD], counts) == [entry_of(GOOD)] * 2
    assert counts == Counter(series_bad=2)
    assert entries({"name": "q", "value": 1}, counts) == []        # not a list: one bad
    assert counts == Counter(series_bad=3)


def test_relabelled_renames_the_fleets_keys_and_joins_keys_made_equal():
    pairs = (("a.b", "1"), ("a_b", "2"), ("host", "evil"), ("instance", "x"),
             ("site", "s"), ("uuid", "u"), ("zone", "z"))
    assert relabelled(pairs, lambda k: k.replace(".", "_")) == (
        ("a_b", "1;2"), ("exported_host", "evil"), ("exported_instance", "x"),
        ("exported_site", "s"), ("exported_uuid", "u"), ("zone", "z"))
    # a key that becomes one of the fleet's is renamed too; other reserved names on demand
    assert relabelled((("Host", "h"), ("name", "n")), str.lower, {"host", "name"}) == (
        ("exported_host", "h"), ("exported_name", "n"))
