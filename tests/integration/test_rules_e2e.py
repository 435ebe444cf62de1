"""A rule on a real agent's disk use, end to end: real processes (a router, the registry
sink, two alerting sinks following the router's tail, an agent sending its STATS every
second, a webhook receiver).

The rule fires (``status`` shows ``rule:disk_used`` CRITICAL on the agent's host and the
pager gets one trigger, though both sinks judge it), ``fleetwatch ack add`` acknowledges it
(one acknowledge event); one sink is SIGKILLed and the other goes on without a false
recovery or a second page; a reloaded level (SIGHUP) lets it recover: one resolve.
"""

from __future__ import annotations

import json
import signal

import pytest

from support.channelservers import HttpReceiver
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)


def disk_metric() -> str:
    """A disk-use series this machine's agent sends (``disk.root.used_percent`` on most)."""
    from agent.collectors import Collectors
    names = sorted(n for n in Collectors(["disk"]).collect() if n.endswith(".used_percent"))
    if not names:
        pytest.skip("this machine has no disk the agent reports")
    return "disk.root.used_percent" if "disk.root.used_percent" in names else names[0]


def alerting(hook_url: str, level: str, metric: str) -> dict:
    return {
        "max_check_attempts": 1, "renotify_interval": 0, "flap_detection": False,
        "tick_interval": 0.2, "rule_interval": 1, "rule_refresh": 30,
        "rules": [{"name": "disk_used", "hosts": "agent-*", "expr": f"max({metric}, 5s)",
                   "critical": level, "for": "2s", "stale_after": "10s"}],
        "delivery": {
            "channels": {"pager": {"type": "webhook", "url": hook_url, "timeout": 2}},
            "rules": [{"channels": ["pager"]}],
            "retry": {"initial": 0.05, "max": 0.2}, "poll_interval": 0.1, "lease": 10}}


def test_a_rule_on_a_real_disk_fires_is_acked_and_recovers_across_a_sigkill(fleet):
    metric = disk_metric()
    hook = HttpReceiver().start()
    try:
        router = fleet.router(sink_types=("registry", "alerting"))
        fleet.sink("registry", [router])
        sinks = [fleet.sink("alerting", [router], name=f"sink-alerting-{i}",
                            alerting=alerting(hook.url, ">= 0", metric)) for i in (1, 2)]
        fleet.agent([router])
        op = fleet.operator_config([router])

        def rule():
            checks = [c for c in fleet.status(op, check=False)["checks"]
                      if c["plugin"] == "rule:disk_used"]
            return checks[0] if checks else None

        def posts(action):
            return [p for p in list(hook.posts) if p["event_action"] == action]
        firing = wait_for(lambda: (r := rule()) and r["status"] == 2 and r, 40, 0.2,
                          "rule:disk_used CRITICAL in status")
        assert firing["hostname"] == "agent-host"
        assert firing["output"].startswith(f"max({metric}, 5s) = ")
        (trigger,) = wait_for(lambda: posts("trigger"), 20, 0.1, "the page")
        assert trigger["dedup_key"].endswith("/check/rule:disk_used")
        out = fleet.cli("ack", "add", "agent-host", "rule:disk_used", "--comment", "cleaning",
                        "--config", str(op)).stdout
        assert out.startswith("ack 1: agent-host rule:disk_used (CRITICAL) [")
        wait_for(lambda: posts("acknowledge"), 20, 0.1, "the acknowledge event")

        def delivered(action):
            out = fleet.cli("alerts", "--deliveries", "--json", "--config", str(op)).stdout
            return [d for d in json.loads(out)["deliveries"]
                    if d["action"] == action and d["outcome"] == "sent"]
        # its delivery recorded first: a sink killed between its POST and that record would
        # leave the event to the other once its lease ends, a second POST (at least once)
        wait_for(lambda: delivered("acknowledge"), 20, 0.1, "the acknowledge's delivery")
        sinks[0].kill()                                 # the other goes on judging
        seen = rule()["last_run"]
        wait_for(lambda: rule()["last_run"] != seen, 20, 0.2, "a result from the survivor")
        assert rule()["status"] == 2

        fleet.write("sink-alerting-2.yaml", {
            **__import__("yaml").safe_load((fleet.root / "sink-alerting-2.yaml").read_text()),
            "alerting": alerting(hook.url, "> 100", metric)})
        sinks[1].signal(signal.SIGHUP)                  # a level no disk reaches
        wait_for(lambda: posts("resolve"), 30, 0.1, "the recovery")
        assert rule()["status"] == 0
        assert [p["event_action"] for p in hook.posts] == ["trigger", "acknowledge",
                                                           "resolve"]
        assert "rules_tail_bad" not in sinks[1].log()
    finally:
        hook.stop()
