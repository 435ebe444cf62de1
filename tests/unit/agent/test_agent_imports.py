"""What the agent loads at start: its RSS is mostly the modules it imports, so the import set
of ``fleetwatch agent`` is guarded here (bench/agent_footprint.py measures the result).

A fresh interpreter does what the agent's start does before its loop (the command's entry
and argument parser, the daemon's modules, psutil for the collectors) and prints
``sys.modules``; none of :data:`NEVER` may be among them.
"""

from __future__ import annotations

import subprocess
import sys

from support import ROOT

START = """
import sys
from fleetwatch import cli
cli.entry("agent")
cli.parser_for("agent").parse_args(["--config", "agent.yaml"])
import psutil
import agent.collectors, agent.daemon, agent.identity, agent.spool, fleetwatch.security
print("\\n".join(sorted(sys.modules)))
"""

#: module (or package) -> why the agent's start must not load it
NEVER = {
    "sinks": "a component's code: the agent imports the core and plugins only",
    "router": "a component's code",
    "scheduler": "a component's code",
    "sqlalchemy": "the state database is the sinks' and the scheduler's",
    "pyspark": "the history lake is the history sink's",
    "croniter": "downtimes are the alerting sink's",
    "apscheduler": "the scheduler's",
    "http": "the agent serves nothing over HTTP",
    "email": "alert channels are the alerting sink's",
    "asyncio": "the agent's loop is one zmq.Poller",
    "ssl": "OpenSSL's libcrypto and libssl: 3 MiB of RSS",
    "hashlib": "maps OpenSSL's libcrypto (3 MiB of RSS): random ids come from os.urandom",
    "hmac": "imports hashlib",
    "secrets": "imports hmac: use os.urandom",
    "shutil": "loads zlib, bz2 and lzma (argparse imports it unless given a width)",
    "uuid": "needed only to mint the agent's uuid once (agent.identity.uuid4)",
    "plugins.output": "the plugin output parser: loaded at the first plugin result",
    "plugins.nagios": "the plugin helper library: for plugins, not the agent",
    "ctypes": "libffi and a large module, for nothing the agent does",
    "multiprocessing": "the agent runs plugins with subprocess",
    "concurrent": "the agent's workers are plain threads",
}


def loaded_at_start() -> set[str]:
    out = subprocess.run([sys.executable, "-c", START], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def forbidden(modules: set[str]) -> dict[str, str]:
    """The modules of ``modules`` that :data:`NEVER` names (a package's submodules too)."""
    return {m: why for m in modules for name, why in NEVER.items()
            if m == name or m.startswith(name + ".")}


def test_the_agent_start_loads_none_of_the_heavy_or_foreign_modules():
    modules = loaded_at_start()
    assert "agent.daemon" in modules and "zmq" in modules     # the script did start it
    assert forbidden(modules) == {}
    assert not {m for m in modules if m.startswith("fleetwatch.cli.")}, \
        "the agent's start imports another command's module"


def test_the_rule_names_submodules_too():
    assert forbidden({"sinks.registry", "sqlalchemy.orm", "zmq", "plugins"}) == {
        "sinks.registry": NEVER["sinks"], "sqlalchemy.orm": NEVER["sqlalchemy"]}
