"""The ``plugins:`` section of ``agent.yaml``: where plugins live and which ones run.

    plugins:
      dirs: [/opt/fleetwatch/plugins/bin, /usr/lib/nagios/plugins]   # default
      max_running: 4
      checks:
        - {name: load, command: check_fw_load, args: ["-w", "4", "-c", "8"], interval: 60}
        - {name: backup, command: check_backup, interval: 3600, freshness: 90000}

A check's ``command`` is a file name (or a relative path) looked up in ``dirs``, in order,
at each run; it never names a file outside them (see :mod:`agent.runner`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fleetwatch.config import setting
from fleetwatch.protocol import ID_PATTERN

DEBIAN_DIR = "/usr/lib/nagios/plugins"
#: Longest a plugin may be given to run (seconds).
MAX_TIMEOUT = 3600.0
#: Largest ``output_limit``: a RESULT must stay far below the protocol's body limit.
MAX_OUTPUT_LIMIT = 1024 * 1024
#: Plugins that run a command given in their arguments (Debian's ``negate`` and ``urlize``
#: exec their argv, ``check_by_ssh -C`` runs one through ssh): a local process never
#: declares them, whatever ``local.plugins`` says (SECURITY.md, "Who can do what").
EXEC_WRAPPERS = frozenset({"negate", "urlize", "check_by_ssh"})


def default_dirs() -> list[str]:
    from plugins import bundled_dir
    return [bundled_dir(), DEBIAN_DIR]


def command_problem(command: str) -> str | None:
    """Why ``command`` cannot name a plugin inside the plugin directories (None: it can)."""
    if not command or "\x00" in command:
        return "expected a file name or a relative path"
    if os.path.isabs(command):
        return f"{command[:64]!r} is absolute: give a name inside plugins.dirs"
    if ".." in command.split("/"):
        return f"{command[:64]!r} leaves the plugin directories (..)"
    return None


def local_command_problem(command: str, allowed, real: str | None = None) -> str | None:
    """Why a plugin a local process declares may not run ``command`` (None: it may).

    ``allowed`` is the config's ``local.plugins``; ``real``, when known, the executable it
    resolves to, so that a listed name linked to an exec-wrapper is refused too.
    """
    for name in (command, real):
        if name is not None and os.path.basename(name) in EXEC_WRAPPERS:
            what = f"{command[:64]!r}" + (f" ({name})" if name is real else "")
            return f"{what} runs its arguments as a command: never from a local process"
    if command not in allowed:
        return f"{command[:64]!r} is not one of local.plugins in the agent's config"
    return None


def plugin_problem(name, command, args, interval, timeout) -> tuple[str, str] | None:
    """(the key, what was expected) when a declared plugin is not valid, else None; the
    same rules for config checks and for plugins local processes REGISTER."""
    if not isinstance(name, str) or not ID_PATTERN.fullmatch(name):
        return "name", (f"{str(name)[:64]!r} is not 1 to 64 letters, digits or ._:@- "
                        f"starting with a letter or a digit")
    if not isinstance(command, str):
        return "command", "expected a string"
    problem = command_problem(command)
    if problem:
        return "command", problem
    if not isinstance(args, (list, tuple)) or \
            not all(isinstance(a, str) and "\x00" not in a for a in args):
        return "args", "expected a list of strings"
    for key, value in (("interval", interval), ("timeout", timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 < value < float("inf"):
            return key, "expected a positive number of seconds"
    if timeout > MAX_TIMEOUT:
        return "timeout", f"at most {MAX_TIMEOUT:.0f} seconds"
    return None


def freshness_problem(freshness) -> tuple[str, str] | None:
    """(the key, what was expected) when a declared ``freshness`` is not valid, else None."""
    if isinstance(freshness, bool) or not isinstance(freshness, (int, float)) or \
            not 0 <= freshness < float("inf"):
        return "freshness", "expected 0 (automatic) or a positive number of seconds"
    return None


@dataclass(frozen=True)
class CheckConfig:
    """One plugin this agent declares and runs on RUN."""

    name: str = setting(help="the plugin's name in RUN and RESULT (letters, digits, ._:@-)")
    command: str = setting(help="executable file name (or relative path) inside plugins.dirs")
    args: list[str] = setting(factory=list, help="arguments, passed as a list (no shell)")
    interval: float = setting(60.0, "seconds between scheduled runs")
    timeout: float = setting(10.0, "seconds before the plugin's process group is killed")
    freshness: float = setting(0.0, "seconds without a result before the alerting sinks call "
                                    "the check stale (UNKNOWN); 0: twice the interval plus "
                                    "the timeout")

    def validate(self):
        problem = plugin_problem(self.name, self.command, self.args, self.interval,
                                 self.timeout) or freshness_problem(self.freshness)
        if problem:
            raise ValueError(": ".join(problem))

    def wire(self) -> dict:
        spec = {"name": self.name, "interval": self.interval, "timeout": self.timeout}
        if self.freshness > 0:
            spec["freshness"] = self.freshness
        return spec


@dataclass(frozen=True)
class PluginsConfig:
    dirs: list[str] = setting(factory=default_dirs,
                              help="directories plugins are looked up in, in order "
                                   "(default: the bundled checks, then Debian's)",
                              doc_default=f"[.../site-packages/plugins/bin, {DEBIAN_DIR}]")
    max_running: int = setting(4, "plugins running at once; more RUNs wait in a queue")
    max_queued: int = setting(100, "RUNs waiting for a free slot; past this a RUN is answered "
                                   "UNKNOWN \"agent busy\" (counted)")
    output_limit: int = setting(65536, "bytes kept of a plugin's stdout, and of its stderr; "
                                       "the rest is read and discarded")
    grace: float = setting(1.0, "seconds between SIGTERM and SIGKILL to a timed-out plugin")
    checks: list[CheckConfig] = setting(factory=list, help="the plugins this agent declares")

    def validate(self):
        if not self.dirs:
            raise ValueError("dirs: expected at least one directory")
        for d in self.dirs:
            if not os.path.isabs(d):
                raise ValueError(f"dirs: {d[:64]!r} is not an absolute path")
        if self.max_running < 1:
            raise ValueError("max_running: expected at least 1")
        if self.max_queued < 0:
            raise ValueError("max_queued: expected 0 or more")
        if not 256 <= self.output_limit <= MAX_OUTPUT_LIMIT:
            raise ValueError(f"output_limit: expected 256 to {MAX_OUTPUT_LIMIT} bytes")
        if not 0 < self.grace <= 60:
            raise ValueError("grace: expected 0 to 60 seconds")
        seen = set()
        for check in self.checks:
            if check.name in seen:
                raise ValueError(f"checks: plugin {check.name!r} is declared twice")
            seen.add(check.name)
