"""The command line and config errors, through a real ``python -m fleetwatch`` process: one
line and exit 78 for a bad config file, 2 with the usage for a bad command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetwatch import __version__
from support.configs import write

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = "tcp://127.0.0.1:5555"


def fleetwatch(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleetwatch", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd or ROOT)


BAD_CONFIGS = {
    # command, its module, the arguments before --config, a bad file, the key it must name
    "router": ("router.main", [], "id: r1\nlimits:\n  drain: lots\n", "limits.drain"),
    "agent": ("agent.main", [], f"routers: ['{ENDPOINT}']\nspool:\n  ack_timeout: soon\n",
              "spool.ack_timeout"),
    "sink": ("sinks.main", ["alerting"], f"routers: ['{ENDPOINT}']\nbatchsize: 5\n",
             "batchsize"),
    # a rule on series: the line names the rule and what is wrong in it
    "sink-rule": ("sinks.main", ["alerting"],
                  f"routers: ['{ENDPOINT}']\nalerting:\n  rules:\n"
                  "    - {name: disk_full, expr: 'avgg(disk.root.used_percent, 10m)', "
                  "critical: '> 90'}\n",
                  "alerting.rules[0].expr: rule disk_full: column 1: unknown function"),
}


@pytest.mark.parametrize("command", sorted(BAD_CONFIGS))
def test_cli_bad_config_exits_78_with_one_line(tmp_path, command):
    module, before, text, key = BAD_CONFIGS[command]
    path = write(tmp_path, text, "BAD.yaml")
    name = command.partition("-")[0]
    res = fleetwatch(name, *before, "--config", path)
    assert res.returncode == os.EX_CONFIG, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"fleetwatch {name}: {path}: {key}"), lines[0]


STAND_IN = """
import runpy, sys, types
from fleetwatch.config import load
from router.config import RouterConfig

def add_arguments(parser):
    parser.add_argument("--config", required=True)

def run(args):
    load(RouterConfig, args.config)
    return 0

stand_in = types.ModuleType("router.main")
stand_in.add_arguments, stand_in.run = add_arguments, run
sys.modules["router.main"] = stand_in
sys.argv = ["fleetwatch", *sys.argv[1:]]
runpy.run_module("fleetwatch", run_name="__main__")
"""


def test_cli_config_error_path_with_a_stand_in_router(tmp_path):
    """The CLI's ConfigError -> 78 path, through ``python -m fleetwatch``'s __main__, with a
    stand-in ``router.main`` that only loads its config (independent of the real router)."""
    path = write(tmp_path, "id: r1\nbind:\n  agent: tcp://*:1\n", "BAD.yaml")
    res = subprocess.run([sys.executable, "-c", STAND_IN, "router", "--config", path],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == os.EX_CONFIG, res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.endswith("\n"), res.stderr
    assert res.stderr.startswith(f"fleetwatch router: {path}: bind.agent: unknown setting")
    ok = write(tmp_path, "id: r1\n", "ok.yaml")
    res = subprocess.run([sys.executable, "-c", STAND_IN, "router", "--config", ok],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (res.returncode, res.stderr) == (0, "")


def test_cli_without_arguments_exits_2_with_usage():
    res = fleetwatch()
    assert res.returncode == 2
    assert "usage: fleetwatch" in res.stdout + res.stderr


def test_cli_unknown_command_exits_2_with_usage():
    res = fleetwatch("bogus")
    assert res.returncode == 2
    assert "usage: fleetwatch" in res.stderr and "invalid choice" in res.stderr


def test_cli_version():
    res = fleetwatch("--version")
    assert (res.returncode, res.stdout.strip()) == (0, f"fleetwatch {__version__}")


def test_cli_help_lists_every_command():
    from fleetwatch.cli import COMMANDS

    res = fleetwatch("--help")
    assert res.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in res.stdout
