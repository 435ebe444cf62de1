"""Every channel type end to end with real processes (issue 34): a real router, a registry
sink, two alerting sinks on one state database, an agent whose plugin goes CRITICAL, is
acknowledged with ``fleetwatch ack add``, then recovers; each channel of each type the demo
has a receiver for (fleetwatch/cli/demo/receivers: the same stand-ins, configured by their
``demo_channel``) gets one message, one acknowledgement and one recovery, in that order, as
``fleetwatch alerts --deliveries --json`` proves; ``fleetwatch channels test`` sends a test
message through each.

The sink that is sending the problem to the pager is SIGKILLed while the pager holds its
answer: the other sink sends it again once the claim expires, so the pager sees it at most
twice, with the same dedup key (the idempotency key PagerDuty de-duplicates by), and every
other channel still once. Then a revoked Slack token: the channel becomes a problem of the
fleet (``status --problems``) and its next alert reaches its fallback.
"""

from __future__ import annotations

import json
import signal

import pytest

from support.alertsink import failing_plugins
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(150)

from fleetwatch.cli.demo.ports import free_port  # noqa: E402
from fleetwatch.cli.demo.receivers import RECEIVERS, Pager, receiver  # noqa: E402

LEASE = 3.0


def test_every_channel_gets_a_problem_its_ack_and_its_recovery_once_across_a_killed_sink(
        fleet, tmp_path):
    here = [flag for flag in RECEIVERS if flag not in ("pager", "smtp")
            and receiver(flag).available()]
    secrets = tmp_path / "received"
    secrets.mkdir()
    channels, running = {}, {}
    try:
        pager = running["pager"] = Pager(None, 0).start()
        fallback = running["fallback"] = Pager(None, 0).start()
        channels["pager"] = {"type": "webhook", "url": pager.url + "/v2/enqueue",
                             "routing_key": "K" * 32, "timeout": 1}
        channels["fallback"] = {"type": "webhook", "url": fallback.url + "/v2/enqueue",
                                "timeout": 1}
        for flag in here:
            port = free_port()
            channels[flag] = {**receiver(flag).demo_channel(secrets, port), "timeout": 1}
            running[flag] = receiver(flag).for_demo(secrets, port).start()
        if "slack" in channels:
            channels["slack"]["fallback"] = "fallback"
        routed = [name for name in channels if name != "fallback"]
        alerting = {"max_check_attempts": 1, "renotify_interval": 0, "flap_detection": False,
                    "tick_interval": 0.2, "delivery": {
                        "channels": channels,
                        "rules": [{"kind": ["check"], "channels": routed}],
                        "retry": {"initial": 0.1, "max": 0.5}, "poll_interval": 0.1,
                        "lease": LEASE, "console_url": "https://fleet.example.com/"}}
        folder, flags = failing_plugins(fleet, ["web", "db"])
        flags["db"].write_text("OK")
        router = fleet.router()
        fleet.sink("registry", [router])
        pager.hold()                    # the problem's first send to the pager hangs
        sinks = {name: fleet.sink("alerting", [router], name=name, alerting=alerting)
                 for name in ("alerting-a", "alerting-b")}
        fleet.agent([router], plugins={"dirs": [str(folder)], "checks": [
            {"name": f"check_{n}", "command": f"check_{n}", "interval": 1, "timeout": 5}
            for n in flags]})
        op = str(fleet.operator_config([router]))
        fleet.scheduler([router])

        def sent(check: str = "check_web") -> dict[str, list[str]]:
            out = json.loads(fleet.command("alerts", "--config", op, "--deliveries",
                                           "--json", "--limit", "0").stdout)
            by: dict[str, list[str]] = {}
            for d in sorted(out["deliveries"], key=lambda d: (d["started_at"], d["id"])):
                if d["outcome"] == "sent" and d["key"].endswith(f"/check/{check}"):
                    by.setdefault(d["channel"], []).append(d["action"])
            return by

        # the sink sending the problem to the pager dies before the pager answers
        wait_for(lambda: pager.taken, 40, 0.1, "the problem's send to the pager")
        (holder,) = wait_for(lambda: fleet.db_rows(
            "SELECT claimed_by FROM outbox WHERE channel = 'pager' AND state = 'pending' "
            "AND claimed_by IS NOT NULL"), 10, 0.05, "the pager's claim")
        name = holder[0].split(":")[0]
        sinks[name].signal(signal.SIGKILL)
        sinks[name].popen.wait(10)
        pager.release()
        wait_for(lambda: all(sent().get(c) == ["trigger"] for c in routed), 40, 0.2,
                 "the problem sent once to every channel")
        triggers = [body for _, _, body in pager.taken if body["event_action"] == "trigger"]
        assert 1 <= len(triggers) <= 2           # at most the one the killed sink sent
        assert len({t["dedup_key"] for t in triggers}) == 1

        fleet.cli("ack", "add", "agent-host", "check_web", "--comment", "on it",
                  "--config", op)
        wait_for(lambda: all(sent().get(c) == ["trigger", "acknowledge"] for c in routed),
                 40, 0.2, "the acknowledgement sent to every channel")
        flags["web"].write_text("OK")
        wait_for(lambda: all(sent().get(c) == ["trigger", "acknowledge", "resolve"]
                             for c in routed), 40, 0.2, "the recovery sent to every channel")
        for flag in here:                        # what each service took: three messages
            assert len(running[flag].taken) >= 3, (flag, running[flag].taken)
        assert [b["event_action"] for _, _, b in pager.taken][-2:] == ["acknowledge",
                                                                        "resolve"]

        for name in routed:                      # a test message through each: sent
            said = json.loads(fleet.command("channels", "test", name, "--config", op,
                                            "--json").stdout)
            assert said["sent"] and said["deliveries"][0]["outcome"] == "sent", said

        if "slack" in running:                   # a revoked token: a problem, its fallback
            running["slack"].revoke("xoxb-fleetwatch-demo")
            flags["db"].write_text("CRITICAL")

            def failing():
                out = json.loads(fleet.command("channels", "--config", op, "--json").stdout)
                return [c for c in out["channels"] if c["name"] == "slack"
                        and c["state"] == "failing"]
            (slack,) = wait_for(failing, 60, 0.2, "the slack channel failing")
            assert "token_revoked" in slack["last_error"]
            problems = json.loads(fleet.command("status", "--problems", "--json",
                                                "--config", op, check=False).stdout)
            (fault,) = [f for f in problems["fleet"] if f["kind"] == "channel"]
            assert fault["name"] == "slack" and "its alerts go to fallback" in fault["output"]
            wait_for(lambda: [b for _, _, b in fallback.taken
                              if b["dedup_key"].endswith("/check/check_db")], 30, 0.2,
                     "check_db's problem at the fallback")
        # no secret (a token, a webhook's URL) in a log line, the deliveries or the channels
        told = "".join(p.log() for p in fleet.procs) + fleet.command(
            "alerts", "--config", op, "--deliveries", "--json", "--limit", "0").stdout + \
            fleet.command("channels", "--config", op, "--json").stdout
        kept = [f.read_text().strip() for f in secrets.iterdir() if f.suffix != ".jsonl"]
        assert kept and "xoxb-fleetwatch-demo" in kept
        for secret in kept:
            assert secret not in told, secret
    finally:
        for server in running.values():
            server.stop()
