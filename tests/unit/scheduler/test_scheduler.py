"""The scheduler's logic without sockets: slots, command ids, the job table and its diffs,
the plan firing on a fake clock, the config, and the ``--list`` table."""

from __future__ import annotations

import hashlib
import random
from collections import Counter

import pytest

from fleetwatch.config import ConfigError, build
from scheduler import slots
from scheduler.config import SchedulerConfig
from scheduler.jobs import JobSpec, Plan, diff, jobs_from_rows
from scheduler.main import job_table

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
U2 = "b9a1c7d2-0e6f-4b3a-8c9d-2e1f0a3b4c5d"
T0 = 1_800_000_000.0


def row(uuid=U1, name="load", source="agent", hostname="web-1", **spec):
    return {"uuid": uuid, "name": name, "source": source, "hostname": hostname,
            "spec": spec, "declared_at": T0}


# ---------------------------------------------------------------- slots

def test_command_id_is_the_shared_formula():
    expected = "s:" + hashlib.sha256(f"{U1}|load|1800000060".encode()).hexdigest()[:24]
    assert slots.command_id(U1, "load", 1_800_000_060.0) == expected
    assert len(expected) == 26
    assert slots.command_id(U1, "load", 1_800_000_060.0) != slots.command_id(U1, "load",
                                                                               1_800_000_120.0)
    assert slots.command_id(U1, "load", 60.0) != slots.command_id(U2, "load", 60.0)
    assert slots.command_id(U1, "load", 60.0) != slots.command_id(U1, "disk", 60.0)


def test_phase_is_stable_in_milliseconds_and_below_the_interval():
    # the same on every machine and every run (no PYTHONHASHSEED): a fixed value
    digest = hashlib.sha256(f"{U1}|load".encode()).digest()
    assert slots.phase(U1, "load", 60) == (int.from_bytes(digest[:8], "big") % 60000) / 1000
    for interval in (1, 2.5, 7, 60, 300, 86400):
        for plugin in ("load", "disk", "swap"):
            p = slots.phase(U1, plugin, interval)
            assert 0 <= p < interval and round(p, 3) == p


def test_a_one_second_job_never_sits_on_a_half_second():
    """Round-half-to-even would give the slots 11.5 and 12.5 one command id."""
    assert f"{11.5:.0f}" == f"{12.5:.0f}"
    phases = [slots.phase(f"agent-{i}", "load", 1) for i in range(20000)]
    assert 0.5 not in phases and 0.501 in phases


def test_phases_spread_a_fleet_over_the_interval():
    phases = [slots.phase(f"agent-{i}", "load", 60) for i in range(1000)]
    per_second = Counter(int(p) for p in phases)
    assert len(per_second) == 60            # every second of the minute is used
    assert max(per_second.values()) < 40    # about 17 each, not 1,000 at once
    assert len(set(phases)) > 990           # and spread within the second
    one_second = [slots.phase(f"agent-{i}", "load", 1) for i in range(1000)]
    assert Counter(int(p * 10) for p in one_second).most_common(1)[0][1] < 150


@pytest.mark.parametrize("interval", [1, 1.5, 10, 60, 3600])
def test_slots_are_on_the_grid(interval):
    p = slots.phase(U1, "x", interval)
    t = T0 + 12.345
    s = slots.slot_at(t, p, interval)
    assert s <= t < s + interval
    assert abs((s - p) / interval - round((s - p) / interval)) < 1e-6
    assert slots.next_slot(t, p, interval) == pytest.approx(s + interval)
    assert slots.slot_at(s, p, interval) == s           # a slot is its own latest slot


def test_consecutive_slots_have_distinct_command_ids():
    for interval in (1, 1.5, 2, 2.5):
        for i in range(50):
            p = slots.phase(f"agent-{i}", "x", interval)
            s = slots.slot_at(T0, p, interval)
            ids = {slots.command_id(U1, "x", round(s + k * interval, 3)) for k in range(200)}
            assert len(ids) == 200, (interval, p)


def test_jitter_is_at_most_a_tenth_of_the_interval():
    assert slots.jitter_bound(5.0, 60) == 5.0
    assert slots.jitter_bound(5.0, 10) == 1.0
    assert slots.jitter_bound(0.0, 60) == 0.0


# ---------------------------------------------------------------- the job table

def test_jobs_from_rows_takes_intervals_and_timeouts():
    notes = Counter()
    jobs = jobs_from_rows([
        row(interval=60, timeout=10),
        row(name="disk", interval=300),
        row(name="manual"),                                  # no interval: on demand
        row(name="bad", interval="60"),                      # not a number
        row(name="neg", interval=-5),
        row(name="fast", interval=0.2),                      # raised to min_interval
        row(uuid=U2, name="load", hostname=None, interval=60, timeout=0),
    ], min_interval=1.0, counts=notes)
    assert set(jobs) == {(U1, "load"), (U1, "disk"), (U1, "fast"), (U2, "load")}
    assert jobs[(U1, "load")] == JobSpec(U1, "load", 60.0, 10.0, "web-1", "agent")
    assert jobs[(U1, "disk")].timeout is None
    assert jobs[(U1, "fast")].interval == 1.0
    assert jobs[(U2, "load")].timeout is None
    assert notes == Counter(on_demand=3, interval_raised=1)


def test_a_passive_check_is_never_scheduled():
    """A device's SNMP checks are made by its poller at each poll (SPEC 4.5): declared with
    an interval for their freshness, ``passive``, never a job."""
    notes = Counter()
    jobs = jobs_from_rows([row(name="if_eth0", interval=60, passive=True),
                           row(name="ping", interval=60, passive=False)], counts=notes)
    assert set(jobs) == {(U1, "ping")}
    assert notes == Counter(passive=1)


def test_an_interval_no_date_can_follow_is_lowered_and_its_slots_are_dates():
    """A declared interval of 1e15 s (any sender may REGISTER one) would put the next slot
    past year 9999: the job table lowers it to MAX_INTERVAL, counted."""
    from datetime import datetime, timezone

    from scheduler.jobs import MAX_INTERVAL
    notes = Counter()
    jobs = jobs_from_rows([row(interval=1e15), row(name="disk", interval=1e300),
                           row(name="year", interval=MAX_INTERVAL)], counts=notes)
    assert {k[1]: j.interval for k, j in jobs.items()} == {
        "load": MAX_INTERVAL, "disk": MAX_INTERVAL, "year": MAX_INTERVAL}
    assert notes == Counter(interval_lowered=2)
    for job in jobs.values():
        assert datetime.fromtimestamp(job.next_run(1_795_000_000.0), timezone.utc).year < 2030


def test_one_job_per_plugin_name_and_the_agent_wins():
    notes = Counter()
    jobs = jobs_from_rows([row(source="zeta", interval=30), row(source="agent", interval=60),
                           row(source="alpha", interval=90)], counts=notes)
    assert jobs[(U1, "load")].interval == 60 and jobs[(U1, "load")].source == "agent"
    assert notes["duplicate"] == 2
    jobs = jobs_from_rows([row(source="zeta", interval=30), row(source="alpha", interval=90)])
    assert jobs[(U1, "load")].source == "alpha"


def test_diff_adds_removes_reschedules_and_updates():
    old = jobs_from_rows([row(interval=60), row(name="disk", interval=300),
                          row(name="swap", interval=60, timeout=5)])
    new = jobs_from_rows([row(interval=60), row(name="disk", interval=120),
                          row(name="swap", interval=60, timeout=9),
                          row(uuid=U2, interval=60)])
    d = diff(old, new)
    assert [j.key for j in d.added] == [(U2, "load")]
    assert [j.key for j in d.rescheduled] == [(U1, "disk")]
    assert [j.key for j in d.updated] == [(U1, "swap")]
    assert d.removed == []
    d = diff(new, old)
    assert d.removed == [(U2, "load")]
    assert not diff(new, dict(new))
    assert diff(new, dict(new)).summary() == "0 added, 0 removed, 0 rescheduled, 0 updated"


# ---------------------------------------------------------------- the plan, on a fake clock

def plan_with(*rows, jitter=0.0, seed=1):
    plan = Plan(min_interval=1.0, jitter=jitter, rng=random.Random(seed))
    plan.update(list(rows))
    return plan


def test_fire_at_a_slot_makes_its_run():
    plan = plan_with(row(interval=60, timeout=10))
    job = plan.jobs[(U1, "load")]
    slot = job.next_run(T0)
    run = plan.fire((U1, "load"), slot + 0.002)
    assert run.slot == slot and run.uuid == U1 and run.plugin == "load"
    assert run.command_id == slots.command_id(U1, "load", slot)
    assert run.timeout == 10.0
    assert run.due == slot and run.expires == slot + 60
    # a fire a hair early (clock rounding) is still that slot
    assert plan.fire((U1, "load"), slot + 60 - 0.001).slot == slot + 60


def test_two_plans_agree_on_every_command_id():
    """Two schedulers: same slots, same ids, whatever their jitter."""
    a = plan_with(row(interval=10), row(uuid=U2, interval=10), jitter=5.0, seed=1)
    b = plan_with(row(interval=10), row(uuid=U2, interval=10), jitter=5.0, seed=2)
    ids_a, ids_b = set(), set()
    for key in a.jobs:
        first = a.jobs[key].next_run(T0)
        for k in range(20):
            ra = a.fire(key, first + k * 10 + 0.01)
            rb = b.fire(key, first + k * 10 + 0.3)
            assert ra.command_id == rb.command_id and ra.slot == rb.slot
            assert ra.slot <= ra.due <= ra.slot + 1.0       # jitter: a tenth of 10 s at most
            ids_a.add(ra.command_id)
            ids_b.add(rb.command_id)
    assert ids_a == ids_b and len(ids_a) == 40


def test_missed_slots_are_skipped_and_counted_not_caught_up():
    plan = plan_with(row(interval=10))
    key = (U1, "load")
    slot = plan.jobs[key].next_run(T0)
    assert plan.fire(key, slot).slot == slot
    # the scheduler stalled for 35 s: the latest slot is sent once, three are skipped
    run = plan.fire(key, slot + 35)
    assert run.slot == slot + 30
    assert plan.counts["skipped"] == 2
    assert plan.fire(key, slot + 36) is None                # that slot again: nothing
    assert plan.counts["fired_twice"] == 1
    assert plan.fire((U2, "gone"), slot) is None
    assert plan.counts["fired_unknown"] == 1
    assert plan.counts["fired"] == 2


def test_rescheduling_forgets_the_last_slot():
    plan = plan_with(row(interval=10))
    key = (U1, "load")
    plan.fire(key, plan.jobs[key].next_run(T0))
    d = plan.update([row(interval=20)])
    assert [j.key for j in d.rescheduled] == [key]
    run = plan.fire(key, plan.jobs[key].next_run(T0 + 100))
    assert run.expires - run.slot == 20 and plan.counts["skipped"] == 0
    plan.update([])
    assert plan.jobs == {} and plan.last == {}


# ---------------------------------------------------------------- config and --list

def test_config_defaults_and_checks():
    cfg = build(SchedulerConfig, {"routers": ["tcp://127.0.0.1:5556"]}, "s.yaml")
    assert cfg.refresh_interval == 30 and cfg.jitter == 5 and cfg.min_interval == 1
    assert cfg.sender_id.startswith("scheduler@")
    assert build(SchedulerConfig, {"routers": ["tcp://r:1"], "id": "sched-a"}).sender_id \
        == "sched-a"
    ok = ["tcp://r1:5556", "tcp://[::1]:5556", "ipc:///run/fw/control"]
    assert build(SchedulerConfig, {"routers": ok}).routers == ok
    r = ["tcp://r1:5556"]
    for bad, key in [({}, "routers"), ({"routers": ["r1:5556"]}, "routers"),
                     ({"routers": r, "id": "-bad"}, "id"),
                     ({"routers": r, "jitter": -1}, "jitter"),
                     ({"routers": r, "min_interval": 0.5}, "min_interval"),
                     ({"routers": r, "refresh_interval": 0}, "refresh_interval"),
                     ({"routers": r, "refresh": 5}, "refresh")]:
        with pytest.raises(ConfigError) as e:
            build(SchedulerConfig, bad, "s.yaml")
        assert e.value.key == key, bad


def test_job_table_lists_next_runs_by_host():
    cfg = build(SchedulerConfig, {"routers": ["tcp://r:1"]})
    doc = job_table([row(uuid=U2, hostname="db-1", interval=60, timeout=10),
                     row(interval=300), row(name="manual")], cfg, T0)
    assert [(e["hostname"], e["plugin"]) for e in doc["jobs"]] == [("db-1", "load"),
                                                                    ("web-1", "load")]
    first = doc["jobs"][0]
    assert first["interval"] == 60 and first["timeout"] == 10 and first["uuid"] == U2
    assert first["next_run"].endswith("Z") and first["next_run"] > "2027-01-15T08:00:00"
    assert doc["on_demand"] == 1
