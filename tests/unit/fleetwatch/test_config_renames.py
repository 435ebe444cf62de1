"""Config keys renamed keep working for one minor release (fleetwatch/config.py,
``setting(renamed_from=...)``): the old key is read as the new one with a warning naming the
new key, once per file; both at once are refused; and docs/operating/upgrading.md's
"Renamed settings" table lists every one the processes' configs have."""

from __future__ import annotations

import importlib.util
import logging
import re
from dataclasses import dataclass

import pytest

from fleetwatch import config as fwconfig
from fleetwatch.config import ConfigError, load, renamed, setting
from support import ROOT
from support.configs import write_data


@dataclass(frozen=True)
class Spool:
    max_messages: int = setting(100, "messages kept at most",
                                renamed_from=("max_notifications", "1.1.0"))


@dataclass(frozen=True)
class Made:
    """A config made for the test: a renamed key at the top and one inside a section."""

    routers: list[str] = setting(factory=list, help="the routers",
                                 renamed_from=("peers", "1.1.0"))
    spool: Spool = setting(factory=Spool, help="the spool")
    channels: dict[str, Spool] = setting(factory=dict, help="a mapping of sections")


def test_an_old_key_is_read_as_the_new_one_with_a_warning_naming_the_new_key(
        tmp_path, caplog):
    path = write_data(tmp_path, {"peers": ["tcp://r1:1"], "spool": {"max_notifications": 7}})
    with caplog.at_level(logging.WARNING, logger="fleetwatch.config"):
        got = load(Made, path)
    assert got == Made(routers=["tcp://r1:1"], spool=Spool(max_messages=7))
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: peers is renamed routers (fleetwatch 1.1.0): the old key is read until "
        f"1.2.0, write routers",
        f"{path}: spool.max_notifications is renamed spool.max_messages (fleetwatch 1.1.0): "
        f"the old key is read until 1.2.0, write spool.max_messages"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fleetwatch.config"):
        assert load(Made, path) == got                      # said once per file and key
    assert caplog.records == []


def test_the_new_key_reads_without_a_warning(tmp_path, caplog):
    path = write_data(tmp_path, {"routers": ["tcp://r1:1"]})
    with caplog.at_level(logging.WARNING, logger="fleetwatch.config"):
        assert load(Made, path).routers == ["tcp://r1:1"]
    assert caplog.records == []


@pytest.mark.parametrize("data, key", [
    ({"peers": ["a"], "routers": ["b"]}, "peers"),
    ({"spool": {"max_messages": 1, "max_notifications": 2}}, "spool.max_notifications")])
def test_both_the_old_and_the_new_key_are_refused_naming_both(tmp_path, data, key):
    path = write_data(tmp_path, data)
    with pytest.raises(ConfigError) as e:
        load(Made, path)
    new = key.replace("peers", "routers").replace("max_notifications", "max_messages")
    assert str(e.value) == (f"{path}: {key}: renamed {new} in fleetwatch 1.1.0, which is "
                            f"given too: remove {key}")


def test_a_value_under_the_old_key_is_checked_as_the_new_ones(tmp_path):
    path = write_data(tmp_path, {"spool": {"max_notifications": "many"}})
    with pytest.raises(ConfigError, match=r": spool\.max_notifications: expected a whole "
                                          r"number, got string 'many'"):
        load(Made, path)


def test_the_reference_says_the_old_key_and_until_when():
    assert renamed(Made) == [("peers", "routers", "1.1.0"),
                             ("spool.max_notifications", "spool.max_messages", "1.1.0"),
                             ("channels.NAME.max_notifications", "channels.NAME.max_messages",
                              "1.1.0")]
    help_ = Spool.__dataclass_fields__["max_messages"].metadata["help"]
    assert help_ == ("messages kept at most (renamed from `max_notifications` in 1.1.0; the "
                     "old key is read until 1.2.0)")
    assert fwconfig.until("1.9.3") == "1.10.0"


def test_the_upgrade_guide_lists_every_renamed_setting_of_the_processes():
    text = (ROOT / "docs" / "operating" / "upgrading.md").read_text(encoding="utf-8")
    section = text.split("## Renamed settings", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \| ([\d.]+) \|", section,
                          re.MULTILINE))
    assert "| file | old key | new key | renamed in |" in section
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    wanted = {(path.rsplit("/", 1)[-1], old, new, release)
              for path, _, cls in generate.config_files() for old, new, release in renamed(cls)}
    assert rows == wanted
