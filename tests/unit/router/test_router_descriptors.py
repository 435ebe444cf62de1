"""The router's descriptors: the unit's LimitNOFILE= from max_agents, the headroom metrics in
its STATS and the warning when little is left (router/descriptors.py), on injected numbers."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from fleetwatch import config as fwconfig, limits
from fleetwatch.cli import units
from fleetwatch.cli.service.install import router_sizes
from router import descriptors
from router.config import RouterConfig
from router.descriptors import Descriptors, nofile
from support.clock import Clock

EXE = "/opt/fleetwatch/venv/bin/fleetwatch"


def numbers(used, limit):
    """Injected ``count`` and ``limit`` whose values the test changes through ``state``."""
    state = SimpleNamespace(used=used, limit=limit)
    return state, (lambda: state.used), (lambda: state.limit)


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "router.descriptors" and r.levelno == logging.WARNING]


# ---------------------------------------------------------------- the unit

def test_the_limit_gives_two_descriptors_per_agent_and_1024_more():
    assert nofile(10000) == 21024 and nofile(1) == 1026
    assert RouterConfig().max_agents == 10000


def test_the_router_unit_sets_limitnofile_from_max_agents():
    default = units.render(units.Service("router"), EXE)
    assert "\nLimitNOFILE=21024\n" in default
    assert "\n# sized for 10000 agents (max_agents in its config)" in default
    sized = units.render(units.Service("router"), EXE, max_agents=15000)
    assert "\nLimitNOFILE=31024\n" in sized and "LimitNOFILE=21024" not in sized
    assert sized.count("LimitNOFILE=") == 1
    for process in ("agent", "scheduler"):
        assert "LimitNOFILE" not in units.render(units.Service(process), EXE, max_agents=5)
    assert "LimitNOFILE" not in units.render(units.Service("sink", "alerting"), EXE)


def test_install_reads_max_agents_and_nice_from_the_router_config(tmp_path):
    path = tmp_path / "router.yaml"
    router = units.Service("router")
    assert router_sizes(router, str(path)) == {}                   # none yet: the defaults
    path.write_text("id: r1\nmax_agents: 40000\nnice: -5\n")
    assert router_sizes(router, str(path)) == {"max_agents": 40000, "nice": -5}
    assert router_sizes(units.Service("agent"), str(path)) == {}
    path.write_text("id: r1\nmax_agents: 0\n")                    # broken: the defaults
    assert router_sizes(router, str(path)) == {}


def test_the_router_unit_goes_first_under_contention_unless_told_not_to():
    default = units.render(units.Service("router"), EXE)
    assert "\nNice=-10\nCPUWeight=931\n" in default
    assert "\nNice=-3\nCPUWeight=195\n" in units.render(units.Service("router"), EXE, nice=-3)
    plain = units.render(units.Service("router"), EXE, nice=0)
    assert "Nice=" not in plain and "CPUWeight=" not in plain
    for process in ("agent", "scheduler"):
        assert "Nice=" not in units.render(units.Service(process), EXE)
    assert "Nice=" not in units.render(units.Service("sink", "alerting"), EXE)


@pytest.mark.parametrize("value", [0, -5, descriptors.MAX_AGENTS + 1])
def test_max_agents_out_of_range_is_refused(tmp_path, value):
    path = tmp_path / "router.yaml"
    path.write_text(f"id: r1\nmax_agents: {value}\n")
    with pytest.raises(fwconfig.ConfigError, match="max_agents"):
        fwconfig.load(RouterConfig, str(path))


# ---------------------------------------------------------------- the headroom

def test_metrics_say_used_limit_and_headroom():
    _, count, limit = numbers(2500, 21024)
    assert Descriptors(count, limit).metrics() == {
        "router.fd_used": 2500, "router.fd_limit": 21024, "router.fd_headroom_pct": 88.1}


def test_unknown_numbers_give_no_metrics():
    assert Descriptors(lambda: None, lambda: 1024).metrics() == {}
    assert Descriptors(lambda: 10, lambda: None).metrics() == {}


def test_warns_once_under_20_percent_and_again_only_after_it_came_back(caplog):
    state, count, limit = numbers(100, 1000)
    clock = Clock()
    fds = Descriptors(count, limit, clock)
    with caplog.at_level(logging.WARNING, "router.descriptors"):
        fds.metrics()
        state.used = 800                        # 20.0 % left: not under
        fds.metrics()
        assert warnings(caplog) == []
        state.used = 801                        # 19.9 %
        assert fds.metrics()["router.fd_headroom_pct"] == 19.9
        for used in (900, 990, 810, 780):       # still low, or not yet back above 25 %
            clock.advance(4000)
            state.used = used
            fds.metrics()
        assert len(warnings(caplog)) == 1
        assert warnings(caplog)[0].startswith("file descriptors: 801 of 1000 in use, 19.9 % "
                                              "left (under 20 %)")
        state.used = 700                        # 30 % left: came back
        fds.metrics()
        state.used = 850                        # low again, an hour on: a new warning
        clock.advance(4000)
        fds.metrics()
        assert len(warnings(caplog)) == 2 and "850 of 1000" in warnings(caplog)[1]


def test_a_flapping_headroom_warns_at_most_once_an_hour(caplog):
    state, count, limit = numbers(850, 1000)
    clock = Clock()
    fds = Descriptors(count, limit, clock)
    with caplog.at_level(logging.WARNING, "router.descriptors"):
        for _ in range(5):                      # low, back, low, ... within minutes
            state.used = 850
            fds.metrics()
            state.used = 500
            fds.metrics()
            clock.advance(60)
        assert len(warnings(caplog)) == 1


def test_raise_limit_goes_up_to_the_hard_limit_and_never_down(monkeypatch):
    calls = []

    class FakeResource:
        RLIMIT_NOFILE, RLIM_INFINITY = 7, -1

        def __init__(self, soft, hard):
            self.limits = (soft, hard)

        def getrlimit(self, which):
            return self.limits

        def setrlimit(self, which, limits):
            calls.append(limits)
            self.limits = limits

    monkeypatch.setattr(limits, "resource", FakeResource(1024, 20000))
    assert limits.raise_limit(21024) == (1024, 20000)       # as far as the hard allows
    monkeypatch.setattr(limits, "resource", FakeResource(1024, 524288))
    assert limits.raise_limit(21024) == (1024, 21024)
    monkeypatch.setattr(limits, "resource", FakeResource(65536, 65536))
    assert limits.raise_limit(21024) == (65536, 65536)      # never lowered
    assert calls == [(20000, 20000), (21024, 524288)]


def test_count_open_counts_this_process():
    before = descriptors.count_open()
    with open(__file__):
        assert descriptors.count_open() == before + 1
