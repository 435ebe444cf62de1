"""The agent's state directory on a full filesystem, for real: a 2 MiB tmpfs
mounted by the test, a real router, agent and alerting sink.

With the disk full, the senders get 500 and everything the spool already holds is still
delivered (its resend schedule and ACKs kept in memory while they cannot be written), the agent
waits instead of spinning, reports the condition once (a WARNING and STATS metrics), and once
space is freed it writes its bookkeeping and takes notifications again by itself.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time

import psutil
import pytest
from support.fleet import wait_for, wait_intake

from agent.client import AgentError, Client


TEXT = "disk filler " + "x" * 2000
# The agent reports the episode in its log, once (agent/README.md): the log is the output here.
FULL_WARNING = "cannot write to the spool"
WRITABLE_AGAIN = "spool writable again"


def mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def small_disk(fleet, tmp_path):
    """A 2 MiB tmpfs; every process of the test stopped and the tmpfs unmounted afterwards
    (even when the test fails)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "small"
    where.mkdir()
    res = mount("-t", "tmpfs", "-o", "size=2m,mode=0750", "tmpfs", str(where))
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield where
    finally:
        fleet.stop_all()
        res = subprocess.run(["umount", str(where)], capture_output=True, text=True, timeout=30)
        if res.returncode != 0:                 # still busy: detach it all the same
            subprocess.run(["umount", "-l", str(where)], timeout=30)


def spooled(state) -> set[str]:
    """The msg_ids written in the agent's spool file (the file itself: what a crash would
    leave behind, which its STATS, counted in memory, cannot tell)."""
    db = sqlite3.connect(f"file:{state / 'spool.db'}?mode=ro", uri=True, timeout=5)
    try:
        return {r[0] for r in db.execute("SELECT msg_id FROM messages")}
    finally:
        db.close()


def listed(fleet, operator) -> list[str]:
    """The msg_ids of the notifications ``fleetwatch alerts`` lists."""
    return [a["msg_id"] for a in fleet.alerts(operator) if a["kind"] == "notify"]


def delivered(fleet, operator, msg_ids) -> set[str]:
    return set(listed(fleet, operator)) & set(msg_ids)


def agent_metrics(fleet, operator, uuid: str) -> dict:
    """The metrics of the agent's next STATS, read as a user does: ``fleetwatch tail``."""
    res = fleet.cli("tail", "--config", str(operator), "--agent", uuid, "--type", "STATS",
                    "--json", "--count", "1", "--timeout", "15")
    (line,) = res.stdout.splitlines()
    return json.loads(line)["body"]["metrics"]


def cpu_share(pid: int, seconds: float) -> float:
    """The share of one core process ``pid`` used over the next ``seconds``."""
    proc = psutil.Process(pid)
    before, start = proc.cpu_times(), time.monotonic()
    time.sleep(seconds)  # the measuring window itself, not a synchronisation
    after, took = proc.cpu_times(), time.monotonic() - start
    return (after.user + after.system - before.user - before.system) / took


@pytest.mark.timeout(300)
def test_a_full_disk_still_delivers_the_spool_without_spinning(fleet, small_disk):
    # no history sink here: the fleet wants the alerting sink's ACK alone (SPEC 4.1)
    router = fleet.router(durable={"NOTIFY": ["alerting"], "REGISTER": ["registry"]})
    operator = fleet.operator_config([router])
    agent = fleet.agent([router], state_dir=str(small_disk),
                        spool={"ack_timeout": 0.5, "max_backoff": 2.0})
    config = fleet.root / "agent.yaml"
    wait_intake(small_disk / "intake.sock")
    uuid = (small_disk / "uuid").read_text().strip()

    # No alerting sink yet: nothing is ACKed, the spool grows until the disk is full.
    accepted, refusal = [], None
    with Client(config_path=str(config), timeout=10) as client:
        for n in range(20000):
            try:
                accepted.append(client.notify(f"{TEXT} {n}", severity="critical"))
            except AgentError as e:
                refusal = e
                break
    assert refusal is not None and refusal.status == 500, "the disk never filled"
    assert len(accepted) >= 20, len(accepted)
    assert agent.alive()

    fleet.sink("alerting", [router])
    wait_for(lambda: len(delivered(fleet, operator, accepted)) == len(accepted), 90,
             interval=0.5, what=f"all {len(accepted)} accepted notifications at the alerting sink")

    # The disk is still full: the agent waits (no busy loop) and says so once.
    share = cpu_share(agent.pid, 3.0)
    assert share < 0.05, f"the agent used {share:.0%} of a core while the disk was full"
    metrics = agent_metrics(fleet, operator, uuid)
    assert metrics["agent.spool.write_errors"] >= 1
    assert metrics["agent.spool.unsaved"] > 0
    assert agent.log().count(FULL_WARNING) == 1

    # A restart on the full disk (the ACKs kept in memory are lost with the process): the
    # agent starts all the same and sends again what the file holds; the sink keeps each once.
    agent.stop()
    agent = fleet.start("agent-again", "agent", "--config", str(config))
    wait_for(lambda: agent_metrics(fleet, operator, uuid)["agent.spool.acked"] >= len(accepted),
             60, interval=0.5, what="the spooled notifications ACKed again after a restart")
    assert agent.log().count(FULL_WARNING) == 1
    assert sorted(listed(fleet, operator)) == sorted(accepted)

    # The operator frees space: the bookkeeping is written, and new notifications go through.
    assert mount("-o", "remount,size=16m", str(small_disk)).returncode == 0
    wait_for(lambda: WRITABLE_AGAIN in agent.log(), 30, what="the spool writable again")
    wait_for(lambda: not spooled(small_disk) & set(accepted), 30,
             what="the ACKed notifications deleted from the spool file")
    with Client(config_path=str(config), timeout=10) as client:
        late = client.notify("after the clean-up", severity="critical")
    wait_for(lambda: delivered(fleet, operator, [late]), 30, interval=0.2,
             what="a new notification delivered")
    metrics = agent_metrics(fleet, operator, uuid)
    assert metrics["agent.spool.unsaved"] == 0
    assert agent.log().count(FULL_WARNING) == 1
    assert agent.alive()
