"""The plugins this agent declares: its config's checks, and those local processes REGISTER.

Only a declared plugin runs (SPEC.md 4.5). The config's checks are the agent's own (its
REGISTER ``name: agent`` and its HELLO list them). A local process declares its plugins by
sending REGISTER ``{name: PROCESS, plugins: [{name, command, args, interval, timeout,
freshness}]}`` through the intake; a REGISTER with ``plugins`` replaces what that process
declared before, one without leaves it alone. A process cannot take a name the config or
another process declared, and may only name a command the config lists in ``local.plugins``
(never an exec-wrapper such as ``negate``): the agent runs nothing its config did not
allow, and :meth:`Declared.local_problem` says so again at every RUN. The agent forwards the
REGISTER with the plugins' wire form (``name``, ``interval``, ``timeout``, and ``freshness``
when set: command and arguments stay on the machine), and keeps the local declarations in
``STATE_DIR/plugins.json`` so that they survive a restart.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from fleetwatch import protocol

from agent.plugins_config import freshness_problem, local_command_problem, plugin_problem

log = logging.getLogger(__name__)

OWN = "agent"
#: Plugins one process may declare, and all processes together.
MAX_PER_PROCESS = 64
MAX_LOCAL = 1024
DEFAULT_INTERVAL = 60.0
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Plugin:
    """One declared plugin; ``owner`` is ``agent`` (config) or the declaring process."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    interval: float = DEFAULT_INTERVAL
    timeout: float = DEFAULT_TIMEOUT
    owner: str = OWN
    freshness: float = 0.0          # seconds without a result before stale; 0: automatic

    def wire(self) -> dict:
        spec = {"name": self.name, "interval": self.interval, "timeout": self.timeout}
        if self.freshness > 0:
            spec["freshness"] = self.freshness
        return spec

    def local(self) -> dict:
        entry = {"name": self.name, "command": self.command, "args": list(self.args),
                 "interval": self.interval, "timeout": self.timeout}
        if self.freshness > 0:
            entry["freshness"] = self.freshness
        return entry


def _own(check) -> Plugin:
    """The plugin a config check (:class:`agent.plugins_config.CheckConfig`) declares."""
    return Plugin(check.name, check.command, tuple(check.args), check.interval, check.timeout,
                  freshness=check.freshness)


class Refused(Exception):
    """A local REGISTER the agent will not take: ``status`` and ``reason`` for the ERROR."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def local_plugins(process: str, entries) -> list[Plugin]:
    """The plugins of a local REGISTER's ``plugins`` list (raises Refused 400)."""
    if not isinstance(entries, list):
        raise Refused(protocol.BAD_REQUEST, "plugins: expected a list")
    if len(entries) > MAX_PER_PROCESS:
        raise Refused(protocol.BAD_REQUEST, f"plugins: at most {MAX_PER_PROCESS} per process")
    out: dict[str, Plugin] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry or "command" not in entry:
            raise Refused(protocol.BAD_REQUEST, f"plugins[{i}]: expected an object with name, "
                                                f"command, and optional args, interval, "
                                                f"timeout, freshness")
        args = entry.get("args", [])
        interval = entry.get("interval", DEFAULT_INTERVAL)
        timeout = entry.get("timeout", DEFAULT_TIMEOUT)
        freshness = entry.get("freshness", 0.0)
        problem = plugin_problem(entry["name"], entry["command"], args, interval, timeout) \
            or freshness_problem(freshness)
        if problem:
            raise Refused(protocol.BAD_REQUEST, f"plugins[{i}].{problem[0]}: {problem[1]}")
        if entry["name"] in out:
            raise Refused(protocol.BAD_REQUEST, f"plugins[{i}]: {entry['name']!r} given twice")
        out[entry["name"]] = Plugin(entry["name"], entry["command"], tuple(args),
                                    float(interval), float(timeout), process, float(freshness))
    return list(out.values())


class Declared:
    """Name -> :class:`Plugin`, for the config's checks and the local processes'."""

    def __init__(self, checks=(), path: str | None = None, local_commands=()):
        self.path = path
        #: the config's ``local.plugins``: the commands local processes' plugins may run
        self.local_commands = frozenset(local_commands)
        self.own = {c.name: _own(c) for c in checks}
        #: process -> {plugin name -> Plugin}
        self.local: dict[str, dict[str, Plugin]] = {}
        self.save_errors = 0
        if path is not None:
            self._load()

    def replace_own(self, checks) -> bool:
        """The config's checks after a reload; True if they changed. A local process's
        plugin whose name the config now declares is dropped (as at start)."""
        own = {c.name: _own(c) for c in checks}
        if own == self.own:
            return False
        self.own = own
        self._drop_local(lambda name, plugin: name in own and
                         "the agent's config now declares a plugin of that name")
        return True

    def replace_local_commands(self, commands) -> None:
        """The config's ``local.plugins`` after a reload: a local process's plugin whose
        command is no longer allowed is dropped."""
        self.local_commands = frozenset(commands)
        self._drop_local(lambda name, plugin: self.local_problem(plugin))

    def _drop_local(self, problem) -> None:
        """Drop (logged, then saved) each local process's plugin for which
        ``problem(name, plugin)`` gives a reason."""
        dropped = False
        for process, plugins in list(self.local.items()):
            for name, plugin in list(plugins.items()):
                reason = problem(name, plugin)
                if reason:
                    log.warning("plugin %s of process %s dropped: %s", name, process, reason)
                    del plugins[name]
                    dropped = True
            if not plugins:
                del self.local[process]
        if dropped:
            self._save()

    def local_problem(self, plugin: Plugin, real: str | None = None) -> str | None:
        """Why the config does not let ``plugin`` run (None: it may); the config's own
        checks always may. ``real``: the executable its command resolves to, if known."""
        if plugin.owner == OWN:
            return None
        return local_command_problem(plugin.command, self.local_commands, real)

    def get(self, name: str) -> Plugin | None:
        plugin = self.own.get(name)
        if plugin is not None:
            return plugin
        for plugins in self.local.values():
            if name in plugins:
                return plugins[name]
        return None

    def __len__(self) -> int:
        return len(self.own) + sum(len(p) for p in self.local.values())

    def own_wire(self) -> list[dict]:
        """The agent's own plugins as its REGISTER and HELLO list them."""
        return [p.wire() for p in self.own.values()]

    def owner_of(self, name: str) -> str | None:
        plugin = self.get(name)
        return plugin.owner if plugin is not None else None

    # ---------------------------------------------------------------- local REGISTER
    def prepare(self, msg: protocol.Message) -> tuple[list[Plugin], protocol.Message]:
        """Check a local REGISTER that carries ``plugins``; return its plugins and the
        REGISTER to forward (plugins in wire form). Raises Refused (400 or 403)."""
        process = msg.get("name")
        plugins = local_plugins(process, msg.get("plugins"))
        for i, plugin in enumerate(plugins):
            problem = self.local_problem(plugin)
            if problem:
                raise Refused(protocol.FORBIDDEN, f"plugins[{i}].command: {problem}")
            owner = self.owner_of(plugin.name)
            if owner == OWN:
                raise Refused(protocol.FORBIDDEN,
                              f"plugin {plugin.name!r} is declared in the agent's config")
            if owner is not None and owner != process:
                raise Refused(protocol.FORBIDDEN,
                              f"plugin {plugin.name!r} is declared by process {owner!r}")
        others = sum(len(p) for proc, p in self.local.items() if proc != process)
        if others + len(plugins) > MAX_LOCAL:
            raise Refused(protocol.FORBIDDEN, f"local processes declare {MAX_LOCAL} plugins "
                                              f"at most")
        body = dict(msg.body)
        body["plugins"] = [p.wire() for p in plugins]
        return plugins, protocol.Message(msg.type, body)

    def apply(self, process: str, plugins: list[Plugin]) -> None:
        """Make ``plugins`` the set ``process`` declares (after its REGISTER is spooled)."""
        kept = {}
        for plugin in plugins:
            owner = self.owner_of(plugin.name)
            if owner in (None, process):
                kept[plugin.name] = plugin
            else:  # taken between prepare() and now, by the same batch
                log.warning("plugin %s of process %s: already declared by %s, ignored",
                            plugin.name, process, owner)
        if kept:
            self.local[process] = kept
        else:
            self.local.pop(process, None)
        log.info("process %s declares %d plugins: %s", process, len(kept),
                 ", ".join(kept) or "(none)")
        self._save()

    # ---------------------------------------------------------------- persistence
    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            log.error("%s: cannot be read (%s): local plugins forgotten until their processes "
                      "register again", self.path, e)
            return
        processes = data.get("processes") if isinstance(data, dict) else None
        if not isinstance(processes, dict):
            log.error("%s: not a plugins file, ignored", self.path)
            return
        for process, entries in processes.items():
            try:
                plugins = local_plugins(process, entries)
            except Refused as e:
                log.error("%s: process %s: %s (ignored)", self.path, process, e.reason)
                continue
            kept = {}
            for plugin in plugins:
                if self.local_problem(plugin):
                    log.error("%s: plugin %s of process %s ignored: %s", self.path, plugin.name,
                              process, self.local_problem(plugin))
                elif self.owner_of(plugin.name) is not None:
                    log.warning("plugin %s of process %s is now declared by %s: ignored",
                                plugin.name, process, self.owner_of(plugin.name))
                else:
                    kept[plugin.name] = plugin
            if kept:
                self.local[process] = kept

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"version": 1, "processes": {
            proc: [p.local() for p in plugins.values()] for proc, plugins in self.local.items()}}
        tmp = f"{self.path}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            self.save_errors += 1
            log.error("cannot save local plugins to %s: %s", self.path, e)
