"""One message, the same everywhere (sinks/alerting/delivery/message.py): what every channel
says of an alert, and that the formats built before it (email, the webhook, Slack, ntfy)
say the parent a host was UNREACHABLE behind too."""

from __future__ import annotations

from sinks.alerting.delivery import message
from sinks.alerting.delivery.services import ntfy, slack
from sinks.alerting.delivery.channels import body, webhook_payload
from sinks.alerting.delivery.channeltypes import WebhookChannel

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
T = 1_795_000_000.0


def down(**extra) -> dict:
    return {"key": f"{U1}/host", "kind": "host", "action": "trigger", "severity": "critical",
            "uuid": U1, "hostname": "rack-10", "check": None, "status": None,
            "summary": "agent silent for 30s: no heartbeat through any router",
            "text": "Last heard 2026-11-18T08:26:10.000Z through router-1.", "created": T,
            "since": T - 750, **extra}


def test_a_message_says_host_state_since_and_the_parent_it_was_behind():
    m = message.of(down(parent="sw, up again: this host was UNREACHABLE behind it",
                        link=f"https://fleet.example.com/hosts/{U1}"))
    assert m.title == "DOWN rack-10: agent silent for 30s: no heartbeat through any router"
    assert m.facts() == [("Host", "rack-10"), ("State", "CRITICAL"),
                         ("Since", "2026-11-18T10:54:10.000Z (12m)"),
                         ("Parent", "sw, up again: this host was UNREACHABLE behind it")]
    assert m.output == ("Last heard 2026-11-18T08:26:10.000Z through router-1.",)
    assert m.problem and m.link == f"https://fleet.example.com/hosts/{U1}"


def test_an_agents_control_characters_are_escapes_and_its_markup_is_left_to_the_format():
    m = message.of(down(hostname="rack\x1b[31m-10", text="@here <b>x</b>\n\n*bold*"))
    assert m.host == "rack\\x1b[31m-10"
    assert m.output == ("@here <b>x</b>", "*bold*")
    assert message.html(m.output[0]) == "@here &lt;b&gt;x&lt;/b&gt;"
    assert message.markdown("@here *b* [x](y)") == r"\@here \*b\* \[x\]\(y\)"


def test_a_group_is_a_title_and_a_line_each_at_most_cap_then_how_many_more():
    events = [down(key=f"{U1}-{i}/host", hostname=f"rack-{i}") for i in range(7)]
    events.append({**down(), "action": "resolve", "severity": "ok"})
    group = message.of_group(events, cap=3, title="severity critical")
    assert group.title == "8 alerts (severity critical): 7 DOWN, 1 UP"
    assert group.lines()[:3] == [f"DOWN rack-{i}: agent silent for 30s: no heartbeat "
                                 f"through any router" for i in range(3)]
    assert group.lines()[-1] == "... and 5 more" and group.more == 5


def test_the_email_webhook_slack_and_ntfy_name_the_parent():
    event = down(parent="sw, up again: this host was UNREACHABLE behind it")
    assert "Parent: sw, up again: this host was UNREACHABLE behind it" in body(event)
    details = webhook_payload(event, WebhookChannel(url="http://x/"))["payload"][
        "custom_details"]
    assert details["parent"].startswith("sw, up again") and details["since"] == T - 750
    assert "Parent: `sw, up again" in slack.message(event)[0]
    assert "Parent: sw, up again" in ntfy.publication(event, "t")["message"]
    plain = down()
    assert "Parent" not in body(plain) and "parent" not in webhook_payload(
        plain, WebhookChannel(url="http://x/"))["payload"]["custom_details"]
