"""web.bulk: the rows a bulk form names, and each changed as its row's own form would,
one refusal said without stopping the others (a recording console, no database)."""

from __future__ import annotations

import pytest

from web.bulk import Target, apply, parse
from web.console import Refused


def test_a_row_is_a_uuid_its_check_and_its_acknowledgement():
    assert parse("u1/check_load") == Target("u1", "check_load", None)
    assert parse("u1/") == Target("u1", None, None)
    assert parse("u1/check_load/42") == Target("u1", "check_load", 42)
    for bad in ("u1", "/check_load", "a/b/c/d", "u1/c/x", "u/" + "c" * 600):
        with pytest.raises(ValueError):
            parse(bad)


class Recording:
    """What the changes were asked, the second acknowledgement refused."""

    def __init__(self):
        self.asked = []

    def acknowledge(self, found, host, check, comment):
        self.asked.append(("ack", host, check, comment))
        if len(self.asked) == 2:
            raise Refused("nothing to acknowledge: u2 check_disk is OK")

    def schedule(self, found, host, check, duration, comment):
        self.asked.append(("downtime", host, check, duration))
        raise ValueError("2 hours: not a duration (2h, 30m, 1d)")

    def end_ack(self, found, ack_id):
        self.asked.append(("unack", ack_id))

    def run_check(self, found, host, plugin):
        self.asked.append(("run", host, plugin))


ROWS = [Target("u1", "check_load", None), Target("u2", "check_disk", 7),
        Target("u3", None, None)]


def test_each_row_changed_and_each_refusal_said_the_others_made():
    web = Recording()
    got = apply(web, None, "ack", ROWS, "on it", "")
    assert web.asked == [("ack", "u1", "check_load", "on it"), ("ack", "u2", "check_disk", "on it"),
                         ("ack", "u3", None, "on it")]
    assert [why for _, why in got] == [None, "nothing to acknowledge: u2 check_disk is OK", None]


def test_rows_an_action_does_not_apply_to_are_said_not_asked():
    web = Recording()
    assert [why for _, why in apply(web, None, "unack", ROWS, "", "")] == [
        "not acknowledged", None, "not acknowledged"]
    assert [why for _, why in apply(web, None, "run", ROWS, "", "")] == [
        None, None, "a host's own problem has no check to run"]
    assert [why for _, why in apply(web, None, "downtime", ROWS[:1], "", "2 hours")] == [
        "2 hours: not a duration (2h, 30m, 1d)"]
    assert ("unack", 7) in web.asked and ("run", "u3", None) not in web.asked
