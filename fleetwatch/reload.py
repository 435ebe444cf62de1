"""SIGHUP (``systemctl reload``): re-read a process's config file and apply what is safe.

The signal handler only sets a flag (:meth:`Reloader.request`); the process's main loop
calls :meth:`Reloader.poll`, which reads the file again with the same strict loader as at
start (:func:`fleetwatch.config.load`). Then, setting by setting (dotted paths such as
``plugins.checks``), the process's *policy* decides:

- ``live``: the process changes it while running (its ``apply`` function is called with
  the settings that changed, once, after all of them are known good);
- ``restart`` (the default: sockets, identity, keys, databases): the running process keeps
  the old value and a warning says ``X changed: takes effect at restart``. The running
  config keeps the old value, so the warning comes again at every reload until a restart;
- ``ignore``: not used by this process (another sink type's section).

The longest matching prefix decides (``alerting`` live but ``alerting.tick_interval``
restart). A file that does not load, or whose new live settings do not fit the settings
kept until restart, changes nothing: one error line naming the problem, counted
(``reload_failed``), and the process goes on with the config it has.

Under systemd (``Type=notify``) a reload is framed by ``RELOADING=1`` (with
``MONOTONIC_USEC``, as ``Type=notify-reload`` wants) and ``READY=1``.
"""

from __future__ import annotations

import dataclasses
import logging
import typing

from fleetwatch import config as fwconfig

log = logging.getLogger(__name__)

LIVE, RESTART, IGNORE = "live", "restart", "ignore"


def action(path: str, policy: dict[str, str]) -> str:
    """What ``policy`` says of the setting ``path``: its longest matching prefix's action."""
    best, chosen = -1, RESTART
    for prefix, what in policy.items():
        if (path == prefix or path.startswith(prefix + ".")) and len(prefix) > best:
            best, chosen = len(prefix), what
    return chosen


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def changes(old, new, prefix: str = "") -> list[str]:
    """The dotted paths of the settings that differ between two configs of one class
    (a section is walked into; lists and mappings compare whole)."""
    out = []
    for f in dataclasses.fields(old):
        a, b = getattr(old, f.name), getattr(new, f.name)
        path = _join(prefix, f.name)
        if dataclasses.is_dataclass(a) and type(a) is type(b):
            out += changes(a, b, path)
        elif a != b:
            out.append(path)
    return out


def overlay(running, new, policy: dict[str, str], prefix: str = ""):
    """``running`` with every setting the policy does not keep until restart from ``new``."""
    values = {}
    for f in dataclasses.fields(running):
        if not f.init:
            continue
        a, b = getattr(running, f.name), getattr(new, f.name)
        path = _join(prefix, f.name)
        if dataclasses.is_dataclass(a) and type(a) is type(b):
            values[f.name] = overlay(a, b, policy, path)
        else:
            values[f.name] = a if action(path, policy) == RESTART else b
    return dataclasses.replace(running, **values)


def check(obj, prefix: str = "") -> None:
    """Run every ``validate()`` of a config tree, as loading does; ValueError names the key."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if dataclasses.is_dataclass(item) and not isinstance(item, type):
                check(item, _join(prefix, f.name))
    validate = getattr(obj, "validate", None)
    if validate is not None:
        try:
            validate()
        except ValueError as e:
            raise ValueError(_join(prefix, str(e)) if prefix else str(e)) from None


class Reloader:
    """One process's config reloads: ``running`` is the config in effect.

    ``apply(old, new, changed)`` makes the process use ``new`` (``changed``: the live paths
    that differ); it runs in the main loop's thread. ``counts`` (a Counter) gets
    ``PREFIX + "reloads"`` and ``PREFIX + "reload_failed"``.
    """

    def __init__(self, cls: type, path: str, running, policy: dict[str, str],
                 apply: typing.Callable, notifier=None, counts=None, prefix: str = "config.",
                 loader=fwconfig.load):
        self.cls, self.path, self.running = cls, path, running
        self.policy, self.apply, self.notifier = policy, apply, notifier
        self.loader = loader
        self.counts = counts if counts is not None else {}
        self.keys = (f"{prefix}reloads", f"{prefix}reload_failed")
        for key in self.keys:
            self.counts.setdefault(key, 0)
        self.requested = False

    def request(self, *_args) -> None:
        """Ask for a reload at the next :meth:`poll` (safe from a signal handler)."""
        self.requested = True

    def poll(self) -> bool:
        """Reload if asked to; True when a reload was attempted (good or not)."""
        if not self.requested:
            return False
        self.requested = False
        if self.notifier is not None:
            self.notifier.reloading()
        try:
            self.reload()
        finally:
            if self.notifier is not None:
                self.notifier.ready()
        return True

    def reload(self) -> bool:
        """Read the file and apply it; False (logged, counted) when nothing was applied."""
        try:
            new = self.loader(self.cls, self.path)
        except fwconfig.ConfigError as e:
            return self._failed("%s", e)
        effective = overlay(self.running, new, self.policy)
        try:
            check(effective)
        except ValueError as e:
            return self._failed("%s: %s, with the settings kept until restart", self.path, e)
        live = [p for p in changes(self.running, effective) if action(p, self.policy) == LIVE]
        if live:
            try:
                self.apply(self.running, effective, live)
            except Exception:  # a bug in applying must not take the process down
                log.exception("config reload from %s failed while applying %s (maybe in "
                              "part)", self.path, ", ".join(live))
                self.counts[self.keys[1]] += 1
                return False
        self.running = effective
        self.counts[self.keys[0]] += 1
        for path in changes(effective, new):
            if action(path, self.policy) == RESTART:
                log.warning("%s changed: takes effect at restart", path)
        log.info("config reloaded from %s: %s", self.path,
                 f"applied {', '.join(live)}" if live else "nothing to change now")
        return True

    def _failed(self, text: str, *args) -> bool:
        self.counts[self.keys[1]] += 1
        log.error("config reload failed, keeping the running config: " + text, *args)
        return False
