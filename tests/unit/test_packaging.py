"""setup.cfg lists its packages by hand (no discovery): every package on disk must be there,
or a wheel ships without it and its imports fail only once installed."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("fleetwatch", "agent", "router", "sinks", "scheduler", "plugins", "web", "query")


def listed() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return {line.strip() for line in cfg["options"]["packages"].splitlines()
            if line.strip() and not line.strip().startswith("#")}


def on_disk() -> set[str]:
    return {".".join(init.parent.relative_to(ROOT).parts)
            for top in TOP for init in (ROOT / top).rglob("__init__.py")}


def test_every_package_on_disk_is_listed_in_setup_cfg():
    assert on_disk() - listed() == set()


def test_every_listed_package_exists():
    assert listed() - on_disk() == set()


def test_test_modules_have_names_of_their_own():
    """pytest imports test modules by their basename (no packages under tests/): two files
    of one name stop ``make test`` at collection, which a run of either file alone hides."""
    from collections import Counter
    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []
