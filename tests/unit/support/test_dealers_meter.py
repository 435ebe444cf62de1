"""The simulated agents' bookkeeping (tests/support/dealers.py ``Meter``): round trips matched
first in, first out per connection, a restart's 401s turned into HELLOs, reports."""

from __future__ import annotations

from support.dealers import Meter


def test_round_trips_are_matched_oldest_first_in_tenth_of_ms_buckets():
    meter = Meter(2)
    meter.beat(0, 10.0)
    meter.beat(0, 11.0)
    meter.beat(1, 10.5)
    meter.heartbeat(0, 10.0123)         # answers the HEARTBEAT sent at 10.0
    meter.heartbeat(1, 10.502)
    meter.heartbeat(0, 11.25)
    meter.heartbeat(1, 12.0)            # nothing in flight: ignored
    report = meter.report()
    assert report["hist"] == {123: 1, 20: 1, 2500: 1}
    assert (report["sent"], report["answered"], report["attached"]) == (3, 3, 2)
    assert meter.report()["hist"] == {}     # each report has the answers since the last


def test_a_restart_detaches_every_agent_until_its_welcome():
    meter = Meter(3)
    meter.beat(0, 1.0)
    meter.detach()                      # the router restarted: what was in flight is lost
    assert meter.report()["attached"] == 0
    assert meter.refused_401(0, 2.0)    # the first 401 says HELLO at once...
    meter.hello(0, 2.0)
    assert not meter.refused_401(0, 2.5)    # ...then at most one a second
    assert meter.overdue(2.9) == [] and meter.overdue(3.0) == [0]
    meter.welcome(0)
    assert meter.report()["attached"] == 1 and meter.overdue(10.0) == []
    meter.heartbeat(0, 11.0)            # the HEARTBEAT lost in the restart is not timed
    assert meter.report()["answered"] == 0
