"""``fleetwatch silence add|list|remove`` and its old spellings (``silence HOST ...``,
``silences [--remove ID]``) on a SQLite state database, run in-process through the registry."""

from __future__ import annotations

import json
import re

import pytest

from fleetwatch import cli
from support.cli import fw, operator_config, register


@pytest.fixture
def op(tmp_path):
    path = operator_config(tmp_path)
    register(path, {"web-1": ["load"], "db-1": []})           # (hosts the fleet has seen: query.known)
    return path


def added(out: str) -> int:
    return int(re.match(r"silence (\d+): ", out).group(1))


def test_the_verbs_add_list_and_remove(op, capsys):
    code, out, _ = fw(capsys, "silence", "add", "web-*", "load", "--for", "2h",
                      "--reason", "upgrade", "--config", op)
    assert code == 0 and re.fullmatch(r"silence \d+: web-\* load until .+: upgrade\n", out)
    first = added(out)
    code, out, _ = fw(capsys, "silence", "add", "db-1", "--for", "30m", "--config", op)
    assert code == 0 and "db-1 (every alert) until" in out
    second = added(out)
    code, out, _ = fw(capsys, "silence", "list", "--json", "--config", op)
    listed = json.loads(out)["silences"]
    assert code == 0 and [(s["id"], s["host"], s["check"], s["reason"], s["active"])
                          for s in listed] == [(second, "db-1", None, "", True),
                                               (first, "web-*", "load", "upgrade", True)]
    assert fw(capsys, "silence", "remove", str(first), "--config", op)[:2] == (
        0, f"silence {first} removed\n")
    code, out, err = fw(capsys, "silence", "remove", str(first), "--config", op)
    assert (code, out, err) == (1, "", f"fleetwatch silence: no running silence {first}\n")
    code, out, _ = fw(capsys, "silence", "list", "--config", op)
    assert code == 0 and "db-1" in out and "web-*" not in out
    code, out, _ = fw(capsys, "silence", "list", "--all", "--config", op)
    assert code == 0 and re.search(rf"^{first} +web-\* +load +removed ", out, re.M)


def test_the_old_spellings_answer_as_the_verbs(op, capsys):
    """``silence HOST`` is ``silence add HOST``; ``silences`` is ``silence list``, and
    ``silences --remove ID`` is ``silence remove ID``: same output, same exit status."""
    code, old, _ = fw(capsys, "silence", "web-1", "--for", "1h", "--config", op)
    code_new, new, _ = fw(capsys, "silence", "add", "web-1", "--for", "1h", "--config", op)
    assert code == code_new == 0
    assert added(new) == added(old) + 1
    assert old.split(": ", 1)[1][:30] == new.split(": ", 1)[1][:30]  # "web-1 (every alert) until"
    for flags in ([], ["--json"], ["--all"], ["--json", "--all"]):
        assert fw(capsys, "silences", *flags, "--config", op) == \
            fw(capsys, "silence", "list", *flags, "--config", op)
    assert fw(capsys, "silences", "--remove", str(added(old)), "--config", op) == \
        (0, f"silence {added(old)} removed\n", "")
    assert fw(capsys, "silence", "remove", str(added(new)), "--config", op) == \
        (0, f"silence {added(new)} removed\n", "")
    assert fw(capsys, "silences", "--remove", "99", "--config", op) == \
        (1, "", "fleetwatch silences: no running silence 99\n")


def test_usage_errors_and_a_missing_database(op, tmp_path, capsys):
    assert fw(capsys, "silence", "web-1", "--config", op)[0] == 2           # no --for
    assert fw(capsys, "silence", "add", "web-1", "--config", op)[0] == 2
    assert fw(capsys, "silence", "remove", "x", "--config", op)[0] == 2
    assert fw(capsys, "silence")[0] == 2
    code, _, err = fw(capsys, "silence", "web-1", "--for", "soon", "--config", op)
    assert code == 2 and err.startswith("fleetwatch silence: ")
    gone = tmp_path / "other.yaml"
    gone.write_text(f"routers: [tcp://127.0.0.1:9]\nstate_url: sqlite:///{tmp_path}/no.db\n")
    for argv, prefix in ((["silence", "web-1", "--for", "1h"], "silence"),
                         (["silence", "add", "web-1", "--for", "1h"], "silence"),
                         (["silence", "remove", "1"], "silence"),
                         (["silences", "--remove", "1"], "silences")):
        code, out, err = fw(capsys, *argv, "--config", str(gone))
        assert (code, out) == (69, "") and err.startswith(f"fleetwatch {prefix}: no state "), argv


def test_the_registry_names_the_verbs_and_the_alias(capsys):
    verbs = next(a for a in cli.parser_for("silence")._actions
                 if isinstance(a, cli.argparse._SubParsersAction))
    assert list(verbs.choices) == ["add", "list", "remove"]
    alias = {o for a in cli.parser_for("silences")._actions for o in a.option_strings}
    assert {"--json", "--all", "--remove", "--config"} <= alias
    cli.top_parser().print_help()
    out = capsys.readouterr().out
    assert re.search(r"^  silence +.*\(silence add\|list\|remove\)$", out, re.M)
    assert re.search(r"^  silences +alias of 'silence list'", out, re.M)
