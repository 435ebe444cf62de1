"""The demo's supervision (fleetwatch/cli/demo/supervise.py) with fake children and the one
fake clock: a child that dies is started again after a growing wait, with a line naming how
it died; one that keeps dying, or refuses its config (78), stops the demo with the reason
(issue 31, item 9: a sink killed by SIGBUS was left dead, a half fleet)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetwatch.cli.demo.supervise import BACKOFF, GIVE_UP, STEADY, Supervisor, death
from support.clock import Clock


@dataclass
class FakePopen:
    pid: int
    returncode: int | None = None

    def poll(self):
        return self.returncode


@dataclass
class FakeChild:
    name: str
    log: str = "logs/x.log"
    popen: FakePopen = field(default_factory=lambda: FakePopen(100))


def supervised(*names):
    clock, lines, started = Clock(0.0), [], []
    children = [FakeChild(n, f"logs/{n}.log") for n in names]

    def start(child):
        started.append(child.name)
        child.popen = FakePopen(child.popen.pid + 1)
    return Supervisor(children, start, clock=clock, say=lines.append), children, clock, \
        lines, started


def test_deaths_read_as_people_say_them():
    assert death(-7) == "died of SIGBUS (signal 7)"
    assert death(-9) == "died of SIGKILL (signal 9)"
    assert death(74) == "exited with status 74 (a file it needs cannot be written)"
    assert death(1) == "exited with status 1"


def test_a_dead_child_is_started_again_after_its_wait_and_said_so():
    sup, (router, sink), clock, lines, started = supervised("router-1", "sink-alerting")
    clock.advance(100)
    assert sup.check() is None and lines == []
    sink.popen.returncode = -7
    assert sup.check() is None
    assert lines == [f"  sink-alerting died of SIGBUS (signal 7); starting it again in "
                     f"{BACKOFF[0]:g} s (see logs/sink-alerting.log)"]
    assert sup.check() is None and started == []        # not before its wait
    clock.advance(BACKOFF[0])
    assert sup.check() is None and started == ["sink-alerting"]
    assert lines[-1] == "  sink-alerting started again (pid 101)"
    assert router.popen.pid == 100                      # the others untouched


def test_one_that_keeps_dying_stops_the_demo_and_a_steady_life_starts_the_count_again():
    sup, (sink,), clock, lines, started = supervised("sink-registry")
    waits = []
    for n in range(GIVE_UP - 1):
        sink.popen.returncode = -7
        assert sup.check() is None
        waits.append(float(lines[-1].split(" in ")[1].split(" s")[0]))
        clock.advance(waits[-1])
        sup.check()
    assert waits == list(BACKOFF[:GIVE_UP - 1]) and len(started) == GIVE_UP - 1
    clock.advance(STEADY)                                 # a long life: forgiven
    sink.popen.returncode = 74
    assert sup.check() is None and lines[-1].endswith(f"again in {BACKOFF[0]:g} s "
                                                      f"(see logs/sink-registry.log)")
    clock.advance(BACKOFF[0])
    sup.check()
    for _ in range(GIVE_UP - 1):
        sink.popen.returncode = 74
        reason = sup.check()
        if reason:
            break
        clock.advance(BACKOFF[-1])
        sup.check()
    assert reason == (f"sink-registry exited with status 74 (a file it needs cannot be "
                      f"written) after 0 s, {GIVE_UP} deaths in a row: stopping; see "
                      f"logs/sink-registry.log")


def test_a_config_refused_stops_the_demo_at_once():
    sup, (agent,), clock, lines, started = supervised("agent")
    agent.popen.returncode = 78
    assert sup.check() == ("agent exited with status 78 (its config or keys are wrong) after "
                           "0 s: a restart does not fix that; see logs/agent.log")
    assert started == [] and lines == []
