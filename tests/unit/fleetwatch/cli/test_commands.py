"""The command registry (fleetwatch/cli/__init__.py): every name gives its parser, commands
of one noun take verbs, an old spelling without a verb gets the default one."""

from __future__ import annotations

import argparse
import importlib

import pytest

from fleetwatch import cli


def verbs_of(parser: argparse.ArgumentParser) -> list[str]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_gives_its_parser(name):
    parser = cli.parser_for(name)
    assert parser.prog == f"fleetwatch {name}"
    assert parser.description == cli.COMMANDS[name][1]
    module, (add_arguments, run) = cli.entry(name)
    assert callable(add_arguments) and callable(run)


@pytest.mark.parametrize("name, verbs", [
    ("silence", ["add", "list", "remove"]),
    ("history", ["compact", "sql", "gaps", "replay", "expire", "cluster", "notebook", "serve"]),
    ("keys", ["new", "list"]),
    ("service", ["install", "uninstall"]),
])
def test_nouns_take_verbs(name, verbs):
    assert verbs_of(cli.parser_for(name)) == verbs
    assert f"{name} {'|'.join(verbs)}" in cli.COMMANDS[name][1]


def test_an_alias_is_served_by_its_noun_module():
    module, (_, run) = cli.entry("silences")
    assert cli.COMMANDS["silences"][0] == cli.COMMANDS["silence"][0]
    assert run is module.run_alias and cli.COMMANDS["silences"][1].startswith("alias of ")


def test_the_default_verb_only_where_none_is_named():
    silence = importlib.import_module("fleetwatch.cli.silence")
    history = importlib.import_module("fleetwatch.cli.history")
    old = ["web-*", "load", "--for", "2h"]
    assert cli.with_default_verb(silence, old) == ["add", *old]
    assert cli.with_default_verb(silence, ["--for", "2h", "web-1"])[0] == "add"
    for argv in (["list", "--json"], ["remove", "3"], ["add", "x"], ["--help"], ["-h"], []):
        assert cli.with_default_verb(silence, argv) == argv
    assert cli.with_default_verb(history, ["web-1"]) == ["web-1"]   # no default: a usage error
