"""A real agent whose wall clock is stepped (Debian's libfaketime, the agent process alone):
no state of its checks is hidden, and the skew is shown (status, its --json, the console).

One fleet (router, registry, alerting sink, scheduler) on the real clock; the agent under
libfaketime reading its offset from a file, so that the clock is stepped while it runs, as
NTP does. Before results were ordered by the agent's run and sequence
(:mod:`sinks.alerting.checks.ordering`) each of these was dropped as "not newer" for as long as
the clock had been fast: the recovery after a step back, and the CRITICAL of an agent
started again with its clock corrected.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from support.browser import Browser
from support.console import PASSWORD, serve
from support.fleet import wait_for

pytestmark = pytest.mark.timeout(150)

LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)
FAST = 7200


def flaky_plugin(fleet) -> tuple[Path, Path, Path]:
    """check_flaky: CRITICAL until the file ``flaky.state`` says OK; each run adds a line
    to ``runs`` first. (plugin folder, state file, runs file)"""
    folder, flag, runs = fleet.root / "plugins", fleet.root / "flaky.state", fleet.root / "runs"
    folder.mkdir()
    flag.write_text("CRITICAL")
    runs.touch()
    script = folder / "check_flaky"
    script.write_text(f"#!/bin/sh\necho run >> '{runs}'\n"
                      f"if [ \"$(cat '{flag}')\" = OK ]; then echo 'flaky OK'; exit 0; fi\n"
                      "echo 'flaky CRITICAL - on fire'; exit 2\n")
    script.chmod(0o755)
    return folder, flag, runs


def step(offset: Path, seconds: int, runs: Path) -> None:
    """Step the agent's clock to ``seconds`` off the real one, and wait for two runs to
    start after it (a run started before keeps the time it started at)."""
    offset.write_text(f"{seconds:+d}\n")
    count = len(runs.read_text().splitlines())
    wait_for(lambda: len(runs.read_text().splitlines()) >= count + 2, 20, 0.1,
             "two runs after the step")


def check_alerts(fleet) -> list[tuple[str, str]]:
    """(action, severity) of check_flaky's alerts, oldest first (polled in the database:
    a ``status`` or ``alerts`` command per poll costs a second of CPU)."""
    return fleet.db_rows("SELECT action, severity FROM alert_events WHERE kind = 'check' "
                         "AND check_name = 'check_flaky' ORDER BY id")


def skew_kept(fleet) -> int | None:
    """The agent's clock skew as the sinks keep it (None: none, or not heard yet)."""
    rows = fleet.db_rows("SELECT clock_skew FROM host_state WHERE name = ''")
    return rows[0][0] if rows else None


TRIGGER, RESOLVE = ("trigger", "critical"), ("resolve", "ok")


@pytest.mark.skipif(LIBFAKETIME is None, reason="faketime is not installed (make install does)")
def test_a_stepped_clock_hides_no_result_and_its_skew_is_shown(fleet):
    folder, flag, runs = flaky_plugin(fleet)
    offset = fleet.root / "clock"
    offset.write_text(f"+{FAST}\n")
    env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": str(offset),
           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    router = fleet.router()
    fleet.sink("registry", [router])
    fleet.sink("alerting", [router], alerting={
        "max_check_attempts": 1, "renotify_interval": 0, "flap_detection": False,
        "tick_interval": 0.2})
    config = fleet.agent_config([router], heartbeat_interval=1.0, plugins={
        "dirs": [str(folder)], "checks": [
            {"name": "check_flaky", "command": "check_flaky", "interval": 1, "timeout": 20}]})
    agent = fleet.start("agent", "agent", "--config", str(config), env=env)
    op = fleet.operator_config([router])

    def seen():
        view = fleet.status(op)
        checks = [c for c in view["checks"] if c["plugin"] == "check_flaky"]
        return view["agents"][0] if view["agents"] else {}, checks[0] if checks else {}

    wait_for(lambda: fleet.db_rows("SELECT name FROM plugins"), 30, 0.1,
             "the plugin in the registry")
    fleet.scheduler([router])
    # two hours fast: a CRITICAL, paged; the skew shown
    wait_for(lambda: check_alerts(fleet) == [TRIGGER], 30, 0.1, "the CRITICAL paged")
    wait_for(lambda: skew_kept(fleet) is not None, 10, 0.1, "the skew kept")
    host, _ = seen()
    assert abs(host["clock_skew"] - FAST) < 30, host                 # status --json
    said = re.compile(r"clock skew \+(\d+) s")          # (it moves a second, beat to beat)
    text = fleet.cli("status", "--config", str(op)).stdout
    shown = re.search(r"agent-host: " + said.pattern, text)
    assert shown and abs(int(shown.group(1)) - FAST) < 30, text
    browser = Browser(serve(fleet, op))                          # the console says it too
    browser.login("alice", PASSWORD)
    for path in ("/hosts", f"/hosts/{host['uuid']}"):
        status, _, page = browser.request(path)
        shown = said.search(page)
        assert status == 200 and shown and abs(int(shown.group(1)) - FAST) < 30, (path, page)

    # NTP steps the clock back while the agent runs, and the check recovers: told
    step(offset, 0, runs)
    flag.write_text("OK")
    wait_for(lambda: check_alerts(fleet) == [TRIGGER, RESOLVE], 30, 0.1,
             "the recovery after the step back")
    assert seen()[1]["state"] == "OK"
    wait_for(lambda: skew_kept(fleet) is None, 10, 0.1, "the skew gone")
    assert seen()[0]["clock_skew"] is None

    # fast again, then the agent started anew with its clock right: its CRITICAL is paged
    step(offset, FAST, runs)
    wait_for(lambda: skew_kept(fleet) is not None, 10, 0.1, "fast again")
    assert agent.stop() == 0, agent.log()
    offset.write_text("+0\n")
    flag.write_text("CRITICAL")
    fleet.start("agent-again", "agent", "--config", str(config), env=env)
    wait_for(lambda: check_alerts(fleet)[2:] == [TRIGGER], 30, 0.1,
             "the CRITICAL of the agent started with its clock corrected")
    _, check = seen()
    assert check["state"] == "CRITICAL" and check["output"].startswith("flaky CRITICAL"), check
