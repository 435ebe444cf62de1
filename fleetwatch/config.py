"""Strict typed configuration: one YAML file per process mapped onto frozen dataclasses.

Each process declares its config as frozen dataclasses with defaults on the fields and help
in ``field(metadata={"help": ...})``. :func:`load` reads a YAML file into one; an unknown key,
a wrong type or a bad value raises :class:`ConfigError` whose text is one line naming the
file, the key and what was expected. The command line turns that into exit status 78
(EX_CONFIG). Nothing here reads config at import time.

A setting renamed keeps its old key for one minor release (docs/operating/upgrading.md,
"Renamed settings"): ``setting(..., renamed_from=("old_key", "1.1.0"))``, the release that
renamed it. A file with the old key is read as if it had the new one, and a warning naming
the new key is logged once per file and key (:func:`build`); a file with both is refused.
The release after next minor drops ``renamed_from`` (:func:`renamed` lists them all).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import types
import typing
from typing import Any

import yaml

log = logging.getLogger(__name__)

DEFAULT_STATE_URL = "sqlite:////var/lib/fleetwatch/state.db"
#: a Unix socket's path at most, in bytes (Linux's sun_path, its terminating NUL left out):
#: an ``ipc://`` endpoint or a socket file past it cannot be bound
MAX_SOCKET_PATH = 107
#: the operator's config file (``fleetwatch status``, ``history``...; ``History.open()``)
OPERATOR_CONFIG = "/etc/fleetwatch/fleetwatch.yaml"


class ConfigError(Exception):
    """A config file that cannot be used; ``str()`` is the one line to print."""

    def __init__(self, path: str, key: str, expected: str):
        where = f"{path}: {key}" if key else path
        # One line, whatever a key, a path or an exception text holds.
        super().__init__("\\n".join(f"{where}: {expected}".splitlines()))
        self.path, self.key, self.expected = path, key, expected


def socket_path_fits(path: str) -> bool:
    """Whether ``path`` can name a Unix socket (:data:`MAX_SOCKET_PATH`)."""
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH


def setting(default: Any = dataclasses.MISSING, help: str = "", factory: Any = None,
            renamed_from: tuple[str, str] | None = None, **meta):
    """A dataclass field with help text (shown in docs) and a default or default factory.

    ``renamed_from``: (its old YAML key, the release that renamed it), read for one minor
    release with a warning (:func:`build`); the reference's help says so.
    ``meta`` is more for the configuration reference (docs/generate.py): ``doc_default``,
    the default as the reference shows it when the real one depends on the machine;
    ``key``, the YAML key when it is not the field's name; ``variants``, type -> dataclass
    of a mapping's values that are checked later by their ``type``."""
    metadata = {"help": help, **meta}
    if renamed_from is not None:
        old, release = renamed_from
        metadata["renamed_from"] = (old, release)
        metadata["help"] = (f"{help} (renamed from `{old}` in {release}; the old key is read "
                            f"until {until(release)})").lstrip()
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def until(release: str) -> str:
    """The release from which a key renamed in ``release`` is no longer read: the next
    minor (``1.1.0`` -> ``1.2.0``)."""
    major, minor = (int(n) for n in release.split(".")[:2])
    return f"{major}.{minor + 1}.0"


#: (file, old key) -> warned: each renamed key found is said once per process
_WARNED: set[tuple[str, str]] = set()


def renamed(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """Every setting of the config dataclass ``cls`` (and its sections, lists and
    variants) that has an old key still read: (old dotted key, new dotted key, the release
    that renamed it), for docs/operating/upgrading.md's table and its test."""
    found = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.metadata.get("key", f.name)
        if "renamed_from" in f.metadata:
            old, release = f.metadata["renamed_from"]
            found.append((prefix + old, key, release))
        tp, origin = hints[f.name], typing.get_origin(hints[f.name])
        inside = f"{key}[]." if origin in (list, tuple) else \
            f"{key}.NAME." if origin is dict else f"{key}."
        for kind in (tp, *typing.get_args(tp)):
            if dataclasses.is_dataclass(kind):
                found += renamed(kind, inside)
        for name, variant in f.metadata.get("variants", {}).items():
            found += renamed(variant, f"{key}.NAME.")
    return found


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML requires
    unique keys; PyYAML would silently keep the last)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # unhashable: the base class reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {str(key)[:40]!r} is set twice", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def load(cls: type, path: str, overrides: dict | None = None):
    """Read ``path`` (YAML) into an instance of the dataclass ``cls``."""
    data = read(path)
    if overrides:
        data = {**data, **overrides} if isinstance(data, dict) else data
    return build(cls, data, path)


def load_section(cls: type, path: str, key: str):
    """Read one section ``key`` of ``path`` into ``cls`` (its defaults when the file has
    none); the rest of the file is read as YAML but not checked (its owner does that)."""
    data = read(path)
    if not isinstance(data, dict):
        return build(cls, data, path)       # says: expected a mapping, at the top level
    section = data.get(key)
    return build(cls, {} if section is None else section, path, prefix=key)


def read(path: str) -> Any:
    """The YAML document at ``path`` (``{}`` when empty); errors are :class:`ConfigError`."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_StrictLoader)
    except FileNotFoundError:
        raise ConfigError(path, "", "no such file (pass --config PATH)") from None
    except OSError as e:
        raise ConfigError(path, "", f"cannot be read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(path, "", "is not UTF-8 text") from None
    except RecursionError:
        raise ConfigError(path, "", "is not valid YAML (nested too deeply)") from None
    except ValueError as e:  # PyYAML's scalar constructors: 2024-02-30, a 5000-digit int
        raise ConfigError(path, "", f"is not valid YAML ({str(e)[:80]})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None)
        raise ConfigError(path, "", f"is not valid YAML{line}"
                                    + (f" ({problem})" if problem else "")) from None
    return {} if data is None else data


def build(cls: type, data: Any, path: str = "<config>", prefix: str = ""):
    """Build ``cls`` from plain data (a dict), checking every key and type."""
    if not isinstance(data, dict):
        raise ConfigError(path, prefix or "(top level)", "expected a mapping of settings")
    hints = typing.get_type_hints(cls)
    # by YAML key: a field's own name unless its ``key`` says otherwise (``for``)
    fields = {f.metadata.get("key", f.name): f for f in dataclasses.fields(cls) if f.init}
    olds = {f.metadata["renamed_from"][0]: key for key, f in fields.items()
            if "renamed_from" in f.metadata}
    values = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if key in olds:
            key = _renamed(path, name, olds[key], fields[olds[key]], data, prefix)
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(path, name, f"unknown setting (known here: {known})")
        values[fields[key].name] = _convert(hints[fields[key].name], value, path, name)
    for key, f in fields.items():
        if f.name not in values and f.default is dataclasses.MISSING \
                and f.default_factory is dataclasses.MISSING:
            name = f"{prefix}.{key}" if prefix else key
            raise ConfigError(path, name,
                              f"required setting missing ({_describe(hints[f.name])})")
    try:
        obj = cls(**values)
    except (ValueError, TypeError) as e:
        raise ConfigError(path, prefix, str(e)) from None
    check = getattr(obj, "validate", None)
    if check is not None:
        try:
            check()
        except ValueError as e:
            # validate() raises ValueError("key: expectation")
            key, _, expected = str(e).partition(": ")
            full = f"{prefix}.{key}" if prefix else key
            raise ConfigError(path, full, expected or str(e)) from None
    return obj


def _renamed(path: str, name: str, new: str, f: dataclasses.Field, data: dict,
             prefix: str) -> str:
    """The key ``new`` for the old key ``name`` found in ``path``: a warning naming it (once
    per file and key), or :class:`ConfigError` when the file gives both."""
    release = f.metadata["renamed_from"][1]
    full = f"{prefix}.{new}" if prefix else new
    if new in data:
        raise ConfigError(path, name, f"renamed {full} in fleetwatch {release}, which is "
                                      f"given too: remove {name}")
    if (path, name) not in _WARNED:
        _WARNED.add((path, name))
        log.warning("%s: %s is renamed %s (fleetwatch %s): the old key is read until "
                    "%s, write %s", path, name, full, release, until(release), full)
    return new


def _convert(tp: Any, value: Any, path: str, name: str):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path, name)
    if dataclasses.is_dataclass(tp):
        return build(tp, {} if value is None else value, path, name)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ConfigError(path, name, f"expected {_describe(tp)}, got {_got(value)}")
        item = args[0] if args else Any
        items = [_convert(item, v, path, f"{name}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, name, f"expected {_describe(tp)}, got {_got(value)}")
        kt, vt = args if args else (Any, Any)
        return {_convert(kt, k, path, name): _convert(vt, v, path, f"{name}.{k}")
                for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, name, f"expected a number, got {_got(value)}")
        try:
            number = float(value)
        except OverflowError:  # an int past the double range
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(path, name, f"expected a finite number, got {_got(value)}")
        return number
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, name, f"expected a whole number, got {_got(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, name, f"expected true or false, got {_got(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, name, f"expected a string, got {_got(value)}")
        return value
    raise ConfigError(path, name, f"unsupported setting type {tp!r}")


_PLURAL = {float: "numbers", int: "whole numbers", bool: "booleans", str: "strings"}


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        item = typing.get_args(tp)[0]
        plural = _PLURAL.get(item) or ("mappings" if dataclasses.is_dataclass(item) or
                                       typing.get_origin(item) is dict else "items")
        return f"a list of {plural}"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping of settings"
    return {float: "a number", int: "a whole number", bool: "true or false", str: "a string"}.get(
        tp, str(tp))


def _got(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        text = str(value) if isinstance(value, float) or abs(value) < 10 ** 40 else "(too long)"
        return f"number {text}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def to_dict(obj) -> dict:
    """A config dataclass as plain data, for writing YAML (the demo, docs): each field under
    its YAML key."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.metadata.get("key", f.name): to_dict(getattr(obj, f.name))
                for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_dict(v) for v in obj)
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def dump(obj, path: str) -> None:
    """Write a config dataclass to ``path`` as YAML (mode 0640, atomically)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        yaml.safe_dump(to_dict(obj), f, sort_keys=False, default_flow_style=False)
    os.chmod(tmp, 0o640)
    os.replace(tmp, path)
