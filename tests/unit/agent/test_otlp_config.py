"""The agent's ``otlp`` section, and what the agent loads with it off and on: off (the
default), nothing of the OTLP intake is imported (the footprint is unchanged); on, protobuf
and the OpenTelemetry messages, still none of the heavy modules the agent never loads
(tests/unit/agent/test_agent_imports.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import ROOT
from agent.config import AgentConfig, OtlpConfig
from fleetwatch.config import ConfigError, build

pytestmark = pytest.mark.timeout(60)


def agent_config(**otlp) -> AgentConfig:
    return build(AgentConfig, {"routers": ["tcp://127.0.0.1:5555"], "otlp": otlp},
                 "agent.yaml")


def test_defaults_off_on_otlp_s_port_of_this_machine():
    cfg = agent_config()
    assert cfg.otlp == OtlpConfig()
    assert (cfg.otlp.enabled, cfg.otlp.address, cfg.otlp.max_body, cfg.otlp.max_series,
            cfg.otlp.max_labels) == (False, ("127.0.0.1", 4318), 4 * 1024 * 1024, 1000, 32)
    assert agent_config(listen="[::1]:0").otlp.address == ("::1", 0)
    assert agent_config(listen="localhost:9999").otlp.address == ("localhost", 9999)


@pytest.mark.parametrize("otlp, key, expected", [
    ({"listen": "4318"}, "otlp.listen", "'4318' is not HOST:PORT (e.g. 127.0.0.1:4318)"),
    ({"listen": "127.0.0.1:70000"}, "otlp.listen", "is not HOST:PORT"),
    ({"listen": "::1:4318"}, "otlp.listen", "is not HOST:PORT"),
    ({"max_series": 0}, "otlp.max_series", "expected at least 1"),
    ({"max_labels": 0}, "otlp.max_labels", "expected at least 1"),
    ({"max_body": 10}, "otlp.max_body", "expected at least 1024 bytes"),
    ({"interval": 0}, "otlp.interval", "expected a positive number of seconds"),
    ({"enable": True}, "otlp.enable", "unknown setting"),
])
def test_a_wrong_otlp_setting_names_its_key(otlp, key, expected):
    with pytest.raises(ConfigError) as e:
        agent_config(**otlp)
    assert e.value.key == key and expected in str(e.value), str(e.value)


START = """
import sys
from fleetwatch import cli
cli.entry("agent")
cli.parser_for("agent").parse_args(["--config", "agent.yaml"])
import psutil
import agent.collectors, agent.daemon, agent.identity, agent.spool, fleetwatch.security
from agent.config import OtlpConfig
ON = {on}
if ON:
    from agent.daemon import otlp_intake
    from agent.otlp.listener import Listener
    intake = otlp_intake(OtlpConfig(enabled=True), __import__("time").monotonic)
    listener = Listener("127.0.0.1", 0, intake)
    listener.start()
    listener.close()
print("\\n".join(sorted(sys.modules)))
"""

#: never loaded by an agent with OTLP on (the footprint: see test_agent_imports.NEVER)
NEVER_ON = ("http", "email", "ssl", "hashlib", "asyncio", "concurrent", "ctypes", "uuid",
            "multiprocessing", "sinks", "shutil")
#: never loaded by an agent with OTLP off
NEVER_OFF = ("agent.otlp", "google", "opentelemetry", "socketserver")


def loaded(on: bool) -> set[str]:
    out = subprocess.run([sys.executable, "-c", START.format(on=on)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def heavy(modules: set[str], names) -> set[str]:
    return {m for m in modules for n in names if m == n or m.startswith(n + ".")}


def test_off_the_agent_imports_nothing_of_otlp():
    modules = loaded(False)
    assert "agent.daemon" in modules
    assert heavy(modules, NEVER_OFF) == set()


def test_on_the_agent_imports_protobuf_and_no_heavy_module():
    pytest.importorskip("opentelemetry.proto", reason="the otlp extra is not installed")
    modules = loaded(True)
    assert {"agent.otlp.intake", "agent.otlp.listener", "google.protobuf"} <= modules
    assert heavy(modules, NEVER_ON) == set()
    # Google's JSON parser comes with the first JSON body, not before
    assert "google.protobuf.json_format" not in modules
