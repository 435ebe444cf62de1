"""The strict config loader (fleetwatch/config.py) against every process's config classes.

A config error is one line, ``FILE: KEY: EXPECTATION``, and the command line exits 78
(EX_CONFIG) with that line on stderr.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from agent.config import COLLECTORS, AgentConfig, SpoolConfig
from fleetwatch import config as fwconfig
from fleetwatch.config import ConfigError, build, load, setting
from fleetwatch.cli.operator import OperatorConfig
from router.config import DEFAULT_ROUTES, RouterBind, RouterConfig, RouterLimits
from sinks.config import SinkConfig
from support.configs import write, write_data

ENDPOINT = "tcp://127.0.0.1:5555"

#: class -> the least a file must say for it to load (everything else has a default).
MINIMAL = {
    RouterConfig: {},
    AgentConfig: {"routers": [ENDPOINT]},
    SinkConfig: {"routers": [ENDPOINT]},
    OperatorConfig: {"routers": [ENDPOINT]},
}
CLASSES = list(MINIMAL)
IDS = [c.__name__ for c in CLASSES]


def config_error(cls, path: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(cls, path)
    err = info.value
    text = str(err)
    assert "\n" not in text and "\r" not in text, f"not one line: {text!r}"
    assert text.startswith(f"{path}: "), text
    assert err.path == path
    return err


def assert_names(err: ConfigError, path: str, key: str, *expect: str) -> None:
    assert err.key == key, str(err)
    assert str(err).startswith(f"{path}: {key}: "), str(err)
    for phrase in expect:
        assert phrase in err.expected, str(err)


def nested(dotted: str, value) -> dict:
    """{"a": {"b": value}} for "a.b"."""
    out: dict = {}
    here = out
    *parents, last = dotted.split(".")
    for part in parents:
        here = here.setdefault(part, {})
    here[last] = value
    return out


def leaf_fields(cls, prefix: str = ""):
    """(dotted name, type) of every setting of ``cls``, descending into nested dataclasses."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield name, tp
            yield from leaf_fields(tp, f"{name}.")
        else:
            yield name, tp


# ---------------------------------------------------------------- defaults

@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_minimal_file_gives_the_defaults(tmp_path, cls):
    path = write_data(tmp_path, MINIMAL[cls]) if MINIMAL[cls] else write(tmp_path, "")
    assert load(cls, path) == cls(**MINIMAL[cls])


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "---\n", "~\n"],
                         ids=["empty", "newline", "comment", "document-marker", "null"])
def test_router_loads_defaults_from_an_empty_file(tmp_path, text):
    cfg = load(RouterConfig, write(tmp_path, text))
    assert cfg == RouterConfig()
    assert cfg.routes == DEFAULT_ROUTES and cfg.bind == RouterBind()
    assert cfg.limits == RouterLimits() and cfg.limits.max_message_bytes == 256 * 1024


@pytest.mark.parametrize("cls", [AgentConfig, OperatorConfig], ids=["AgentConfig",
                                                                    "OperatorConfig"])
def test_empty_file_names_the_required_setting(tmp_path, cls):
    path = write(tmp_path, "")
    err = config_error(cls, path)
    assert_names(err, path, "routers", "required setting missing", "a list of strings")


def test_empty_sink_file_fails_validation_on_routers(tmp_path):
    path = write(tmp_path, "")
    assert_names(config_error(SinkConfig, path), path, "routers", "at least one")


def test_agent_defaults_are_what_the_docs_say(tmp_path):
    cfg = load(AgentConfig, write_data(tmp_path, MINIMAL[AgentConfig]))
    assert cfg.collectors == list(COLLECTORS) and cfg.spool == SpoolConfig()
    assert cfg.heartbeat_interval == 2.0 and cfg.liveness == 3
    assert cfg.intake_endpoint.startswith("ipc://") and cfg.intake_endpoint.endswith(
        "intake.sock")


def test_an_intake_socket_path_too_long_to_bind_is_one_clear_line(tmp_path):
    """A Unix socket's path is at most 107 bytes: past it the agent could not bind its
    intake, so its config says so (and which setting to change), before it starts."""
    deep = "/var/lib/" + "fleetwatch-agent-state-of-a-long-name/" * 3
    for data, change in (({"state_dir": deep}, "state_dir, or set intake:"),
                         ({"intake": "ipc://" + deep + "intake.sock"}, "path")):
        error = str(config_error(AgentConfig, write_data(tmp_path, {**MINIMAL[AgentConfig],
                                                                    **data})))
        assert "a Unix socket's path at most 107: choose a shorter " + change in error
        assert "\n" not in error
    fits = load(AgentConfig, write_data(tmp_path, {**MINIMAL[AgentConfig],
                                                  "intake": "tcp://127.0.0.1:5599",
                                                  "state_dir": deep}))
    assert fits.intake_endpoint == "tcp://127.0.0.1:5599"


def test_null_section_means_defaults(tmp_path):
    cfg = load(RouterConfig, write(tmp_path, "bind:\nlimits: ~\n"))
    assert cfg.bind == RouterBind() and cfg.limits == RouterLimits()


def test_values_are_typed_and_config_is_frozen(tmp_path):
    path = write(tmp_path, """\
        id: r9
        stats_interval: 5        # an int where a float is declared: becomes 5.0
        limits: {drain: 64}
        bind: {sinks: {alerting: "tcp://*:7000"}}
        routes: {NOTIFY: [alerting]}
        """)
    cfg = load(RouterConfig, path)
    assert cfg.stats_interval == 5.0 and type(cfg.stats_interval) is float
    assert cfg.limits.drain == 64 and cfg.limits.sink_hwm == 10000
    assert cfg.bind.sinks == {"alerting": "tcp://*:7000"} and cfg.bind.agents == "tcp://*:5555"
    assert cfg.routes == {"NOTIFY": ["alerting"]}
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.id = "other"


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_dump_then_load_round_trips(tmp_path, cls):
    cfg = cls(**MINIMAL[cls])
    path = str(tmp_path / "out.yaml")
    fwconfig.dump(cfg, path)
    assert load(cls, path) == cfg
    assert os.stat(path).st_mode & 0o777 == 0o640


def test_overrides_win_and_are_checked(tmp_path):
    path = write(tmp_path, "id: from-file\n")
    assert load(RouterConfig, path, overrides={"id": "r2"}).id == "r2"
    with pytest.raises(ConfigError) as info:
        load(RouterConfig, path, overrides={"stats_interval": "soon"})
    assert info.value.key == "stats_interval"


# ---------------------------------------------------------------- unknown keys

@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_unknown_top_level_key(tmp_path, cls):
    path = write_data(tmp_path, {**MINIMAL[cls], "heartbeat_intervall": 2})
    err = config_error(cls, path)
    assert_names(err, path, "heartbeat_intervall", "unknown setting")
    for f in dataclasses.fields(cls):
        assert f.name in err.expected, "the message lists the known settings"


@pytest.mark.parametrize("cls, dotted", [
    (RouterConfig, "bind.agent"),
    (RouterConfig, "limits.max_message_size"),
    (AgentConfig, "spool.ack_timeout_s"),
], ids=["router-bind", "router-limits", "agent-spool"])
def test_unknown_nested_key_is_named_with_dots(tmp_path, cls, dotted):
    path = write_data(tmp_path, {**MINIMAL[cls], **nested(dotted, 1)})
    assert_names(config_error(cls, path), path, dotted, "unknown setting")


def test_unknown_key_with_a_newline_stays_one_line(tmp_path):
    path = write(tmp_path, '"bad\\nkey": 1\n')
    err = config_error(RouterConfig, path)
    assert "unknown setting" in str(err)


def test_non_string_key(tmp_path):
    path = write(tmp_path, "1: x\n")
    assert_names(config_error(RouterConfig, path), path, "1", "unknown setting")


# ---------------------------------------------------------------- wrong types

def _wrong_values(tp):
    """(value, expectation phrase, key suffix) that the loader must refuse for type ``tp``."""
    origin = typing.get_origin(tp)
    if tp is float:
        return [("fast", "expected a number, got string 'fast'", ""),
                (True, "expected a number, got boolean true", ""),
                ([1], "expected a number, got a list", ""),
                (None, "expected a number, got nothing", "")]
    if tp is int:
        return [("3", "expected a whole number, got string '3'", ""),
                (False, "expected a whole number, got boolean false", ""),
                (2.5, "expected a whole number, got number 2.5", ""),
                ({"a": 1}, "expected a whole number, got a mapping", "")]
    if tp is bool:
        return [("yes", "expected true or false, got string 'yes'", ""),
                (1, "expected true or false, got number 1", ""),
                (None, "expected true or false, got nothing", "")]
    if tp is str:
        return [(5, "expected a string, got number 5", ""),
                (True, "expected a string, got boolean true", ""),
                (["x"], "expected a string, got a list", "")]
    if origin is list and dataclasses.is_dataclass(typing.get_args(tp)[0]):
        return [({"a": "b"}, "expected a list of mappings, got a mapping", ""),
                ("tcp://x:1", "expected a list of mappings, got string", ""),
                (["ok"], "expected a mapping of settings", "[0]")]
    if origin is list:
        return [({"a": "b"}, "expected a list of strings, got a mapping", ""),
                ("tcp://x:1", "expected a list of strings, got string", ""),
                (["ok", 7], "expected a string, got number 7", "[1]")]
    if origin is dict and typing.get_args(tp)[1] is str:
        return [(["tcp://x:1"], "expected a mapping, got a list", ""),
                ({"alerting": 5561}, "expected a string, got number 5561", ".alerting")]
    if origin is dict and typing.get_origin(typing.get_args(tp)[1]) is dict:
        # dict[str, dict[str, Any]]: alert channels, each checked by its type's dataclass
        return [(["x"], "expected a mapping, got a list", ""),
                ({"pager": "webhook"}, "expected a mapping, got string", ".pager")]
    if origin is dict:  # dict[str, list[str]]
        return [("NOTIFY", "expected a mapping, got string", ""),
                ({"NOTIFY": "alerting"}, "expected a list of strings, got string", ".NOTIFY"),
                ({"NOTIFY": ["alerting", 1]}, "expected a string, got number 1", ".NOTIFY[1]")]
    if dataclasses.is_dataclass(tp):
        return [("tcp://*:1", "expected a mapping of settings", ""),
                ([1, 2], "expected a mapping of settings", "")]
    raise AssertionError(f"no wrong values for {tp!r}: extend this test")


def _wrong_type_cases():
    for cls in CLASSES:
        for name, tp in leaf_fields(cls):
            for value, expect, suffix in _wrong_values(tp):
                yield pytest.param(cls, name, value, expect, suffix,
                                   id=f"{cls.__name__}.{name}={value!r}"[:60])


@pytest.mark.parametrize("cls, name, value, expect, suffix", list(_wrong_type_cases()))
def test_every_setting_refuses_a_wrong_type(tmp_path, cls, name, value, expect, suffix):
    path = write_data(tmp_path, {**MINIMAL[cls], **nested(name, value)})
    err = config_error(cls, path)
    assert_names(err, path, name + suffix, expect)


@pytest.mark.parametrize("text, key", [
    ("stats_interval: .nan\n", "stats_interval"),
    ("stats_interval: .inf\n", "stats_interval"),
    ("expiry_intervals: -.inf\n", "expiry_intervals"),
    ("stats_interval: 1" + "0" * 400 + "\n", "stats_interval"),
])
def test_non_finite_numbers_are_refused(tmp_path, text, key):
    path = write(tmp_path, text)
    assert_names(config_error(RouterConfig, path), path, key, "expected a finite number")


def test_agent_nan_interval_is_refused(tmp_path):
    # NaN slips through "<= 0" checks in validate(): the loader must stop it
    path = write_data(tmp_path, MINIMAL[AgentConfig])
    Path(path).write_text(Path(path).read_text() + "heartbeat_interval: .nan\n")
    assert_names(config_error(AgentConfig, path), path, "heartbeat_interval", "finite")


def test_yaml_1_1_booleans_are_not_strings(tmp_path):
    # YAML 1.1 reads an unquoted `off` as false: the message shows what the loader saw
    path = write(tmp_path, "log_level: off\n")
    assert_names(config_error(RouterConfig, path), path, "log_level",
                 "expected a string, got boolean false")


def test_dates_are_not_strings(tmp_path):
    path = write(tmp_path, "id: 2024-01-31\n")
    assert_names(config_error(RouterConfig, path), path, "id", "expected a string, got date")


def test_top_level_must_be_a_mapping(tmp_path):
    for text in ("- a\n- b\n", "just a string\n", "42\n"):
        path = write(tmp_path, text)
        assert_names(config_error(RouterConfig, path), path, "(top level)",
                     "expected a mapping of settings")


# ---------------------------------------------------------------- files and YAML

def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    err = config_error(RouterConfig, path)
    assert err.key == "" and "no such file" in str(err) and "--config" in str(err)


def test_directory_instead_of_file(tmp_path):
    err = config_error(RouterConfig, str(tmp_path))
    assert "cannot be read" in str(err)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads anything")
def test_unreadable_file(tmp_path):
    path = write(tmp_path, "id: r1\n")
    os.chmod(path, 0)
    assert "cannot be read" in str(config_error(RouterConfig, path))


def test_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"id: caf\xe9\n")
    assert "not UTF-8" in str(config_error(RouterConfig, str(path)))


@pytest.mark.parametrize("text, line, problem", [
    ("id: r1\nbind:\n  agents: tcp://a:1\n   control: tcp://a:2\n", 4, "mapping values"),
    ("id: r1\nbind:\n\tagents: x\n", 3, "'\\t'"),
    ("id: r1\npeers: [tcp://a:1\n", 3, "expected ',' or ']'"),
    ("id: a\n---\nid: b\n", 2, "another document"),
    ("id: a\nlog_level: INFO\nid: b\n", 3, "'id' is set twice"),
    ("bind:\n  agents: a\n  control: b\n  agents: c\n", 4, "'agents' is set twice"),
], ids=["indent", "tab", "unclosed-flow", "two-documents", "duplicate-key",
        "duplicate-nested-key"])
def test_invalid_yaml_names_the_line(tmp_path, text, line, problem):
    path = write(tmp_path, text)
    err = config_error(RouterConfig, path)
    assert err.key == ""
    assert f"is not valid YAML at line {line}" in str(err)
    assert problem in str(err)


def test_yaml_merge_keys_may_override(tmp_path):
    path = write(tmp_path, "bind:\n  <<: {agents: 'tcp://a:1', control: 'tcp://a:2'}\n"
                           "  agents: 'tcp://b:1'\n")
    cfg = load(RouterConfig, path)
    assert (cfg.bind.agents, cfg.bind.control) == ("tcp://b:1", "tcp://a:2")


@pytest.mark.parametrize("text", [
    "peers: " + "[" * 700 + "]" * 700 + "\n",     # recursion in PyYAML's composer
    "id: 2024-02-30\n",                            # a timestamp PyYAML cannot build
    "stats_interval: " + "9" * 5000 + "\n",        # past Python's int digit limit
    "!!python/object:os.system {}\n",              # safe loader: no python tags
    "? [a, b]\n: 1\n",                             # unhashable key
], ids=["deep", "bad-date", "5000-digits", "python-tag", "unhashable-key"])
def test_hostile_yaml_is_a_config_error(tmp_path, text):
    err = config_error(RouterConfig, write(tmp_path, text))
    assert "is not valid YAML" in str(err)


# ---------------------------------------------------------------- validate()

@pytest.mark.parametrize("cls, data, key, phrase", [
    (AgentConfig, {"routers": []}, "routers", "at least one"),
    (AgentConfig, {"routers": [ENDPOINT], "collectors": ["cpu", "gpu"]}, "collectors",
     "unknown collector 'gpu'"),
    (AgentConfig, {"routers": [ENDPOINT], "heartbeat_interval": 0}, "heartbeat_interval",
     "positive"),
    (AgentConfig, {"routers": [ENDPOINT], "reconnect_max": -1}, "reconnect_max", "positive"),
    (AgentConfig, {"routers": [ENDPOINT], "liveness": 0}, "liveness", "at least 1"),
    (AgentConfig, {"routers": [ENDPOINT], "routers_k": -1}, "routers_k", "0 (every router)"),
    (AgentConfig, {"routers": [ENDPOINT], "routers_k": 65}, "routers_k", "to 64"),
    (AgentConfig, {"routers": [ENDPOINT], "routers_k": "3"}, "routers_k", "whole number"),
    (RouterConfig, {"routes": {"NOTIFY": ["alerting", "pager"]}}, "routes.NOTIFY",
     "'pager' has no endpoint"),
    (RouterConfig, {"bind": {"sinks": {"alerting": "tcp://*:1"}},
                    "routes": {"HELLO": ["registry"]}}, "routes.HELLO",
     "'registry' has no endpoint"),
    (RouterConfig, {"routes": {"ACK": ["alerting"]}}, "routes.ACK", "expected one of"),
    (RouterConfig, {"id": ""}, "id", "1 to 64 letters, digits or ._:@-"),
    (RouterConfig, {"id": "r" * 65}, "id", "1 to 64 letters, digits or ._:@-"),
    (RouterConfig, {"id": "r\u00e9"}, "id", "letters, digits or ._:@-"),
    # an id stands between the slashes of every ENVELOPE the router stamps
    (RouterConfig, {"id": "router/1"}, "id", "letters, digits or ._:@-"),
    (RouterConfig, {"id": "router 1"}, "id", "letters, digits or ._:@-"),
    (RouterConfig, {"id": "-router"}, "id", "starting with a letter or digit"),
    (RouterConfig, {"id": ".r"}, "id", "starting with a letter or digit"),
    (RouterConfig, {"id": "r\n"}, "id", "letters, digits or ._:@-"),
    (RouterConfig, {"expiry_intervals": 0.5}, "expiry_intervals", "at least 1"),
    (SinkConfig, {"routers": []}, "routers", "at least one"),
    (SinkConfig, {"routers": [ENDPOINT], "batch": 0}, "batch", "at least 1"),
    (OperatorConfig, {"routers": []}, "routers", "at least one"),
], ids=lambda v: v.__name__ if isinstance(v, type) else None)
def test_validate_errors_name_the_key(tmp_path, cls, data, key, phrase):
    path = write_data(tmp_path, data)
    assert_names(config_error(cls, path), path, key, phrase)


@pytest.mark.parametrize("router_id", ["r", "0", "router-1", "r1.example.com", "r_1",
                                       "r1:5555", "ops@r1", "R" * 64])
def test_valid_router_ids(tmp_path, router_id):
    from fleetwatch.protocol import ID_PATTERN
    assert ID_PATTERN.fullmatch(router_id)
    assert load(RouterConfig, write_data(tmp_path, {"id": router_id})).id == router_id


def test_valid_route_to_a_configured_sink_type(tmp_path):
    path = write_data(tmp_path, {"bind": {"sinks": {"pager": "tcp://*:1"}},
                                 "routes": {"NOTIFY": ["pager"]}})
    assert load(RouterConfig, path).routes == {"NOTIFY": ["pager"]}


# ---------------------------------------------------------------- the loader itself

@dataclass(frozen=True)
class Inner:
    level: int = setting(1, "a nested setting")
    tags: tuple[str, ...] = setting(factory=tuple, help="a tuple")

    def validate(self):
        if self.level > 9:
            raise ValueError("level: expected at most 9")


@dataclass(frozen=True)
class Outer:
    name: str = setting(help="required")
    flag: bool = setting(False, "a boolean")
    ratio: float | None = setting(None, "optional number")
    inner: Inner = setting(factory=Inner, help="nested")
    items: list[Inner] = setting(factory=list, help="a list of sections")
    weights: dict[str, float] = setting(factory=dict, help="name -> number")


def test_build_nested_validate_gets_the_dotted_key():
    with pytest.raises(ConfigError) as info:
        build(Outer, {"name": "x", "inner": {"level": 10}}, "o.yaml")
    assert str(info.value) == "o.yaml: inner.level: expected at most 9"


def test_build_list_of_sections_names_the_index():
    with pytest.raises(ConfigError) as info:
        build(Outer, {"name": "x", "items": [{}, {"levle": 1}]}, "o.yaml")
    assert info.value.key == "items[1].levle"
    with pytest.raises(ConfigError) as info:
        build(Outer, {"name": "x", "items": "no"}, "o.yaml")
    assert info.value.expected == "expected a list of mappings, got string 'no'"


def test_build_types():
    o = build(Outer, {"name": "x", "flag": True, "ratio": 2, "inner": {"tags": ["a", "b"]},
                      "weights": {"a": 1}})
    assert o == Outer("x", True, 2.0, Inner(1, ("a", "b")), [], {"a": 1.0})
    assert build(Outer, {"name": "x", "ratio": None}).ratio is None
    for value, got in [("yes", "string 'yes'"), (1, "number 1"), (None, "nothing")]:
        with pytest.raises(ConfigError) as info:
            build(Outer, {"name": "x", "flag": value}, "o.yaml")
        assert info.value.expected == f"expected true or false, got {got}"
    with pytest.raises(ConfigError) as info:
        build(Outer, {"name": "x", "ratio": "half"}, "o.yaml")
    assert info.value.key == "ratio" and "expected a number" in info.value.expected
    with pytest.raises(ConfigError) as info:
        build(Outer, {"name": "x", "weights": {"a": "heavy"}}, "o.yaml")
    assert info.value.key == "weights.a"


def test_build_missing_required():
    with pytest.raises(ConfigError) as info:
        build(Outer, {}, "o.yaml")
    assert str(info.value) == "o.yaml: name: required setting missing (a string)"


def test_config_error_is_one_line_whatever_it_is_given():
    e = ConfigError("a\nb.yaml", "k\r\ney", "expected\nthis")
    assert "\n" not in str(e) and "\r" not in str(e)
    assert (e.path, e.key, e.expected) == ("a\nb.yaml", "k\r\ney", "expected\nthis")
    assert str(ConfigError("f.yaml", "", "no such file")) == "f.yaml: no such file"


# ---------------------------------------------------------------- the command line


def test_cli_main_in_process_with_a_stand_in(tmp_path, monkeypatch, capsys):
    from types import ModuleType

    from fleetwatch import cli

    stand_in = ModuleType("router.main")
    stand_in.add_arguments = lambda parser: parser.add_argument("--config", required=True)
    stand_in.run = lambda args: load(RouterConfig, args.config) and 0
    monkeypatch.setitem(sys.modules, "router.main", stand_in)
    path = write(tmp_path, "routes:\n  NOTIFY: [pager]\n", "BAD.yaml")
    assert cli.main(["router", "--config", path]) == os.EX_CONFIG
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"fleetwatch router: {path}: routes.NOTIFY: sink type 'pager' has no endpoint "
        f"in bind.sinks"]


@pytest.mark.parametrize("text, key, phrase", [
    ("mesh: {interval: 0}\n", "mesh.interval", "0.05 to 60 seconds"),
    ("mesh: {expire_intervals: 1}\n", "mesh.expire_intervals", "2 to 1000"),
    ("mesh: {fanout: 0}\n", "mesh.fanout", "1 to 64"),
    ("mesh: {seeds: [router-2:5556]}\n", "mesh.seeds[0]", "a control endpoint"),
    ("mesh: {seeds: tcp://r2:5556}\n", "mesh.seeds", "expected a list"),
    ("mesh: {seed: [tcp://r2:5556]}\n", "mesh.seed", "unknown setting"),
    ("mesh: {seeds: [tcp://r2:5556]}\nsecurity: {curve: true, server_key: k, agent_keys: a, "
     "backend_keys: b}\n", "security.routers", "required with curve when mesh.seeds"),
])
def test_router_mesh_settings_are_checked(tmp_path, text, key, phrase):
    path = write(tmp_path, text)
    assert_names(config_error(RouterConfig, path), path, key, phrase)


def test_router_mesh_defaults():
    mesh = RouterConfig().mesh
    assert (mesh.seeds, mesh.interval, mesh.expire_intervals, mesh.fanout, mesh.key) == \
        ([], 1.0, 5, 3, "")
