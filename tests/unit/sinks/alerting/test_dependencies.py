"""Dependencies (sinks/alerting/dependencies/rules.py) and the one rule that holds a silent child
behind its parents (sinks/alerting/freshness/rules.py): references, rules, the graph from config
and agents' declarations, ancestors, cycles refused in config and broken in declarations;
the verdict table (UNREACHABLE, held, DOWN) with its boundaries."""

from __future__ import annotations

import math

import pytest

from fleetwatch.config import ConfigError, build
from sinks.alerting.hosts import rules as hosts
from sinks.alerting.config import AlertingConfig
from sinks.alerting.dependencies.rules import (Dependency, Graph, Ref, config_cycle, declared_refs,
                                         parse, path_text)
from sinks.alerting.freshness.rules import DOWN, QUIET, Host, blocking, held


@pytest.mark.parametrize("text, host, expected", [
    ("sw-3", None, Ref("sw-3")),
    ("poller-1/ping_sw3", None, Ref("poller-1", "ping_sw3")),
    ("nginx_proc", "web-1", Ref("web-1", "nginx_proc")),        # a check of the same host
    ("db-1/mysql", "web-1", Ref("db-1", "mysql")),
    ("10.0.0.1", None, Ref("10.0.0.1")),
])
def test_parse(text, host, expected):
    assert parse(text, host) == expected
    assert str(expected) == (text if host is None or "/" in text else f"{host}/{text}")


@pytest.mark.parametrize("text", ["", " sw", "sw ", "sw/", "/ping", "a/b/c", "x" * 513, 3, None])
def test_parse_refuses(text):
    with pytest.raises(ValueError):
        parse(text)


def test_declared_refs_skip_what_is_not_a_reference():
    assert declared_refs(["sw-3", "a/b/c", "sw-3", "p/ping", 7]) == (
        (Ref("sw-3"), Ref("p", "ping")), 2)
    assert declared_refs(None) == ((), 0)
    assert declared_refs("sw-3") == ((), 1)
    refs, bad = declared_refs([f"h{i}" for i in range(70)])
    assert len(refs) == 64 and bad == 6


def config(*rules) -> AlertingConfig:
    return build(AlertingConfig, {"dependencies": list(rules)}, "sink.yaml", "alerting")


@pytest.mark.parametrize("rules, line", [
    ([{"hosts": "a", "parents": ["b"]}, {"hosts": "b", "parents": ["a"]}],
     "sink.yaml: alerting.dependencies: cycle a -> b -> a"),
    ([{"hosts": "rack1-*", "parents": ["sw-1"]}, {"hosts": "sw-*", "parents": ["core"]},
      {"hosts": "core", "parents": ["rack1-web"]}],
     "sink.yaml: alerting.dependencies: cycle core -> rack1-web -> sw-1 -> core"),
    ([{"hosts": "*", "checks": "http", "parents": ["nginx"]},
      {"hosts": "web-*", "checks": "nginx", "parents": ["http"]}],
     "sink.yaml: alerting.dependencies: cycle web-*/http -> web-*/nginx -> web-*/http"),
    ([{"hosts": "web-1", "parents": ["web-1/nginx"]}],       # its own check needs it up
     "sink.yaml: alerting.dependencies: cycle web-1 -> web-1/nginx -> web-1"),
    ([{"hosts": "a", "parents": ["b/"]}],
     "sink.yaml: alerting.dependencies[0].parents: 'b/' is not a reference (HOST or "
     "HOST/CHECK)"),
    ([{"hosts": "a", "parents": []}],
     "sink.yaml: alerting.dependencies[0].parents: expected at least one parent"),
    ([{"hosts": "a"}], "sink.yaml: alerting.dependencies[0].parents: required setting "
                       "missing (a list of strings)"),
    ([{"hosts": "a", "parent": ["b"]}], None),
])
def test_a_bad_config_is_refused_with_one_line(rules, line):
    with pytest.raises(ConfigError) as e:
        config(*rules)
    assert "\n" not in str(e.value)
    if line is not None:
        assert str(e.value) == line
    else:
        assert str(e.value).startswith("sink.yaml: alerting.dependencies[0].parent: unknown")


@pytest.mark.parametrize("rules", [
    [{"hosts": "*", "parents": ["core"]}],                  # core matches * too: not itself
    [{"hosts": "rack-*", "parents": ["sw-1"]}, {"hosts": "sw-*", "parents": ["core"]},
     {"hosts": "*", "checks": "http*", "parents": ["nginx_proc", "db-1/mysql"]}],
    [{"hosts": "web-*", "parents": ["web-1"]}],             # web-1 itself: no parent
])
def test_configs_without_cycles_load(rules):
    assert config_cycle(config(*rules).dependencies) is None


RULES = config({"hosts": "rack-*", "parents": ["sw-1", "poller/ping_sw1"]},
               {"hosts": "sw-*", "parents": ["core"]},
               {"hosts": "*", "checks": "http*", "parents": ["nginx_proc"]}).dependencies


@pytest.mark.parametrize("node, parents", [
    (Ref("rack-7"), (Ref("sw-1"), Ref("poller", "ping_sw1"))),
    (Ref("sw-1"), (Ref("core"),)),
    (Ref("core"), ()),
    (Ref("rack-7", "https"), (Ref("rack-7", "nginx_proc"),)),
    (Ref("rack-7", "load"), ()),
    (Ref("edge"), (Ref("isp"),)),                             # declared by the agent
])
def test_parents_from_config_and_declarations(node, parents):
    graph = Graph(RULES, {"edge": [Ref("isp")], "edge-2": []})
    assert graph.parents(node) == parents


def test_ancestors_are_transitive_and_include_the_hosts_of_parent_checks():
    graph = Graph(RULES, {"core": [Ref("isp")]})
    assert graph.ancestors("rack-7") == {"sw-1", "poller", "core", "isp"}
    assert graph.ancestors("core") == {"isp"}
    assert graph.ancestors("lonely") == set()
    assert not Graph() and Graph(RULES) and Graph((), {"a": [Ref("b")]})
    assert not Graph((), {"a": []})


def test_a_cycle_of_declarations_is_broken_at_its_last_declared_edge():
    graph = Graph((), {"a": [Ref("b")], "b": [Ref("c")], "c": [Ref("a")], "d": [Ref("a")]})
    assert [path_text(c) for c in graph.broken] == ["a -> b -> c -> a"]
    assert graph.parents(Ref("c")) == ()
    assert graph.ancestors("d") == {"a", "b", "c"}
    assert graph.cycle([Ref(h) for h in "abcd"]) is None


def test_a_cycle_through_config_and_a_declaration_drops_the_declaration():
    # poller declares rack-9 as its parent; rack-9 is behind poller/ping_sw1 by config
    graph = Graph(RULES, {"poller": [Ref("rack-9")]})
    assert [path_text(c) for c in graph.broken] == [
        "poller -> rack-9 -> poller/ping_sw1 -> poller"]
    assert graph.parents(Ref("poller")) == ()
    assert graph.parents(Ref("rack-9")) == (Ref("sw-1"), Ref("poller", "ping_sw1"))


def test_a_declaration_naming_itself_is_ignored():
    assert Graph((), {"a": [Ref("a")]}).parents(Ref("a")) == ()


# ---------------------------------------------------------------- the verdict

UP = Host(up=True, heard=1e12)


@pytest.mark.parametrize("name, parents, expected", [
    ("no parents: DOWN as usual", {}, None),
    ("parent heard since: DOWN as usual", {"sw": Host(True, 100.001)}, None),
    ("parent DOWN: UNREACHABLE", {"sw": Host(False, 50.0)}, ("sw", DOWN)),
    ("parent not heard since the deadline: held", {"sw": Host(True, 99.0)}, ("sw", QUIET)),
    ("heard exactly at the deadline: held", {"sw": Host(True, 100.0)}, ("sw", QUIET)),
    ("unknown parent holds nothing", {"sw": None}, None),
    ("parent check HARD: UNREACHABLE", {"p/ping": Host.of_check(True, True)},
     ("p/ping", DOWN)),
    ("parent check SOFT: held", {"p/ping": Host.of_check(True, False)}, ("p/ping", QUIET)),
    ("parent check OK: DOWN", {"p/ping": Host.of_check(False, True)}, None),
    ("any parent DOWN wins over one undecided",
     {"a": Host(True, 99.0), "b": Host(False, 0.0)}, ("b", DOWN)),
    ("one parent down of two: UNREACHABLE", {"a": UP, "b": Host(False, 0.0)}, ("b", DOWN)),
    ("first by reference", {"b": Host(False, 0.0), "a": Host(False, 0.0)}, ("a", DOWN)),
])
def test_blocking(name, parents, expected):
    assert blocking(parents, 100.0) == expected


def test_a_parent_check_as_a_host():
    assert Host.of_check(False, True) == Host(True, math.inf)
    assert held(Host.of_check(True, True), 1e12) == DOWN
    assert held(Host.of_check(True, False), 0.0) == QUIET


def test_a_host_heard_again_is_reachable():
    policy = hosts.Policy(timeout=10)
    state = hosts.HostState(up=False, last_heard=100.0, unreachable="sw")
    step = hosts.heard(state, "r1", 200.0, 1.0, policy)
    assert step.state.up and step.state.unreachable is None
    assert step.alerts == ()                    # never paged DOWN: nothing to resolve


# ---------------------------------------------------------------- the agent's side

def agent_config(**settings):
    from agent.config import AgentConfig
    return build(AgentConfig, {"routers": ["tcp://r1:5555"], **settings}, "agent.yaml")


def test_an_agent_declares_its_parents():
    from agent.routers import parents
    cfg = agent_config(parents=["sw-3", "poller-1/ping_sw3"])
    assert cfg.parents == ["sw-3", "poller-1/ping_sw3"]
    assert parents(cfg.parents) == {"parents": ["sw-3", "poller-1/ping_sw3"]}
    assert parents(agent_config().parents) == {}             # none: the field is left out
    # what the agent accepts, the sinks read as the same references
    assert [str(parse(p)) for p in cfg.parents] == cfg.parents


@pytest.mark.parametrize("value, line", [
    (["sw-3/"], "agent.yaml: parents: 'sw-3/' is not HOST or HOST/CHECK"),
    (["a/b/c"], "agent.yaml: parents: 'a/b/c' is not HOST or HOST/CHECK"),
    ([" sw"], "agent.yaml: parents: ' sw' is not HOST or HOST/CHECK"),
    ([f"h{i}" for i in range(65)], "agent.yaml: parents: expected at most 64"),
    ("sw-3", "agent.yaml: parents: expected a list of strings, got string 'sw-3'"),
])
def test_an_agent_refuses_bad_parents_with_one_line(value, line):
    with pytest.raises(ConfigError) as e:
        agent_config(parents=value)
    assert str(e.value).startswith(line), str(e.value)


def test_an_agent_reload_announces_new_parents_in_a_register(tmp_path):
    """agent/reload.py on a real Agent object (its loop not started): new parents go out in
    a new REGISTER at once, and in every HELLO after."""
    import yaml
    from agent.config import AgentConfig
    from agent.daemon import Agent
    from agent.spool import Spool

    class Collectors:
        failures = 0

        def prime(self):
            pass

    base = {"routers": ["tcp://127.0.0.1:9"], "state_dir": str(tmp_path),
            "intake": f"ipc://{tmp_path}/in.sock", "parents": ["sw-1"]}
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(base))
    spool = Spool(str(tmp_path / "spool.db"))
    agent = Agent(build(AgentConfig, base), "5e1f" + "0" * 28, "host", spool, Collectors(),
                  config_path=str(path))
    try:
        assert agent.register().get("parents") == ["sw-1"]
        assert agent.routers.parents == ("sw-1",)
        path.write_text(yaml.safe_dump({**base, "parents": ["sw-2", "poller/ping_sw2"]}))
        assert agent.reloader.reload()
        assert agent.routers.parents == ("sw-2", "poller/ping_sw2")
        registers = [m for m in spool.due(float("inf")) if m.type == "REGISTER"]
        assert registers[-1].get("parents") == ["sw-2", "poller/ping_sw2"]
        path.write_text(yaml.safe_dump({**base, "parents": []}))
        assert agent.reloader.reload()
        registers = [m for m in spool.due(float("inf")) if m.type == "REGISTER"]
        assert registers[-1].get("parents") is None          # none declared: left out
    finally:
        agent.close()


@pytest.mark.parametrize("name, parent, expected", [
    ("back after the child fell silent, within its timeout: not judged yet",
     Host(True, 130.0, since=125.0), "site"),
    ("back a whole timeout ago: judged", Host(True, 129.0, since=105.0), None),
    ("up all along (since before the child fell silent): judged",
     Host(True, 130.0, since=50.0), None),
    ("still down: not this rule (blocking says UNREACHABLE)", Host(False, 90.0, since=95.0),
     None),
    ("unknown parent", None, None),
])
def test_a_parent_back_gives_its_child_a_timeout(name, parent, expected):
    """The child fell silent at 90 (timeout 20); now is 130: a site router back at 125
    relays its agents' heartbeats a moment later, so the agent is not DOWN yet."""
    from sinks.alerting.freshness.rules import returned
    assert returned({"site": parent}, 90.0, 20.0, 130.0) == expected
