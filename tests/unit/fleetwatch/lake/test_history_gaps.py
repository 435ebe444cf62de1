"""fleetwatch/lake/gaps.py: buckets, a drop entry's count spread over the time it spans, and
the verdict per bucket (pure logic: no Spark)."""

import pytest

from fleetwatch.lake.gaps import (DROPPED, MAX_BUCKETS, NO_DATA, OK, Drop, buckets, number,
                                report, spread, verdict)

H = 3600.0
DAY = 86400.0
T = 1_795_000_000.0 - 1_795_000_000.0 % DAY        # a UTC midnight


def test_buckets_are_aligned_to_the_epoch_and_cut_to_the_window():
    assert buckets(T, T + 3 * H, H) == [(T, T + H), (T + H, T + 2 * H), (T + 2 * H, T + 3 * H)]
    assert buckets(T + 1800, T + 2 * H + 60, H) == [
        (T + 1800, T + H), (T + H, T + 2 * H), (T + 2 * H, T + 2 * H + 60)]
    assert buckets(T + 10, T + 20, DAY) == [(T + 10, T + 20)]
    assert number(T + H - 0.001, H) == number(T, H) == T // H
    assert number(T + H, H) == T // H + 1


@pytest.mark.parametrize("since, until, every, message", [
    (T, T, H, "ends after it starts"),
    (T + 1, T, H, "ends after it starts"),
    (T, T + H, 0, "above 0"),
    (T, T + H, -5, "above 0"),
    (T, T + H, float("nan"), "above 0"),
    (T, T + H, float("inf"), "above 0"),
    (T, T + (MAX_BUCKETS + 1) * 60, 60, f"at most {MAX_BUCKETS}"),
])
def test_bad_windows_and_sizes_are_refused(since, until, every, message):
    with pytest.raises(ValueError, match=message):
        buckets(since, until, every)


def test_the_most_buckets_are_taken():
    assert len(buckets(T, T + MAX_BUCKETS * 60, 60)) == MAX_BUCKETS


@pytest.mark.parametrize("first, last, start, end, share", [
    (T, T + 2 * H, T, T + H, 5.0),                  # evenly over the time it spans
    (T, T + 2 * H, T + H, T + 2 * H, 5.0),
    (T + 1800, T + 5400, T, T + H, 5.0),            # half of it in each hour
    (T + 1800, T + 2400, T, T + H, 10.0),           # all inside
    (T - H, T + H, T, T + 10 * H, 5.0),             # the part outside is not here
    (T, T + 2 * H, T + 3 * H, T + 4 * H, 0.0),      # after it
    (T, T + H, T + H, T + 2 * H, 0.0),              # ends where the bucket starts: no time in it
    (T + 60, T + 60, T, T + H, 10.0),               # first == last: whole in its bucket
    (T + H, T + H, T + H, T + 2 * H, 10.0),         # ... a bucket's start is in it
    (T + H, T + H, T, T + H, 0.0),                  # ... its end is not
])
def test_spread(first, last, start, end, share):
    assert spread(Drop("HEARTBEAT", "history", 10, first, last), start, end) == \
        pytest.approx(share)


@pytest.mark.parametrize("landed, dropped, want", [
    (0, 0.0, NO_DATA), (5, 0.0, OK), (0, 0.5, DROPPED), (5, 3.0, DROPPED)])
def test_verdict(landed, dropped, want):
    assert verdict(landed, dropped) == want


def test_report_puts_landed_and_dropped_side_by_side():
    base = number(T, H)
    landed = {("heartbeats", base): 6, ("stats", base): 40, ("results", base + 2): 1,
              ("notifications", base + 9): 3}         # outside the window: not shown
    drops = [Drop("HEARTBEAT", "history", 11, T + H + 600, T + 2 * H + 600),   # hours 1, 2
             Drop("STATS", "graphite", 2, T + 3000, T + 3000),                # hour 0
             Drop("STATS", "graphite", 4, T - 1800, T + 1800),                # half before
             Drop("HEARTBEAT", "history", 1, T + H + 60, T + H + 60)]         # hour 1
    rows = report(T, T + 4 * H, H, landed, drops)
    assert [(r["start"], r["end"]) for r in rows] == buckets(T, T + 4 * H, H)
    assert [(r["heartbeats"], r["results"], r["stats"], r["notifications"]) for r in rows] == [
        (6, 0, 40, 0), (0, 0, 0, 0), (0, 1, 0, 0), (0, 0, 0, 0)]
    assert [r["verdict"] for r in rows] == [DROPPED, DROPPED, DROPPED, NO_DATA]
    assert rows[0]["drops"] == [{"type": "STATS", "sink": "graphite", "count": 4.0}]
    assert rows[1]["drops"] == [{"type": "HEARTBEAT", "sink": "history",
                                 "count": pytest.approx(11 * 3000 / 3600 + 1)}]
    assert rows[2]["drops"] == [{"type": "HEARTBEAT", "sink": "history",
                                 "count": pytest.approx(11 * 600 / 3600)}]
    assert rows[3]["drops"] == [] and rows[3]["dropped"] == 0.0
    assert [r["dropped"] for r in rows] == pytest.approx([4.0, 11 * 3000 / 3600 + 1,
                                                          11 * 600 / 3600, 0.0])


def test_report_of_a_window_cut_inside_buckets():
    """Drops are spread over the cut buckets' own time; landed counts go by bucket number."""
    since, until = T + 1800, T + H + 900
    base = number(since, H)
    rows = report(since, until, H, {("heartbeats", base): 3, ("heartbeats", base + 1): 2},
                  [Drop("RESULT", "alerting", 6, T, T + 3 * H)])
    assert [(r["start"], r["end"], r["heartbeats"]) for r in rows] == [
        (since, T + H, 3), (T + H, until, 2)]
    assert [r["dropped"] for r in rows] == pytest.approx([1.0, 0.5])
    assert all(r["verdict"] == DROPPED for r in rows)


def test_report_sums_entries_per_type_and_sink_in_order():
    rows = report(T, T + H, H, {}, [Drop("STATS", "history", 1, T + 1, T + 1),
                                    Drop("HEARTBEAT", "history", 2, T + 2, T + 2),
                                    Drop("HEARTBEAT", "alerting", 3, T + 3, T + 3),
                                    Drop("STATS", "history", 4, T + 4, T + 4)])
    assert [(d["type"], d["sink"], d["count"]) for d in rows[0]["drops"]] == [
        ("HEARTBEAT", "alerting", 3.0), ("HEARTBEAT", "history", 2.0),
        ("STATS", "history", 5.0)]
    assert rows[0]["dropped"] == 10.0 and isinstance(rows[0]["dropped"], float)


def test_a_report_begins_at_the_host_s_first_message_or_drop():
    """Issue 31 item 12: no "no data" for the time before the host existed."""
    from fleetwatch.lake.gaps import begins
    assert begins(0.0, [7200.5, None, 9000.0]) == 7200.5
    assert begins(3600.0, [1800.0, 7200.0]) == 3600.0          # it existed before: all of it
    assert begins(0.0, [None]) == 0.0 and begins(0.0, []) == 0.0   # not known: all of it
    rows = report(begins(0.0, [5400.0]), 4 * 3600.0, 3600.0, {("heartbeats", 1): 2}, [])
    assert [(r["start"], r["verdict"]) for r in rows] == [
        (5400.0, "ok"), (7200.0, "no data"), (10800.0, "no data")]
    assert report(3600.0, 3600.0, 3600.0, {}, []) == []        # first heard of at the end
