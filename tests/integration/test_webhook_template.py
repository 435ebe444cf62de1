"""The ``webhook`` channel's ``template`` (issue 34): the real deliverer POSTs the JSON a
sandboxed Jinja2 template makes of each alert to a real HTTP receiver
(tests/support/channelservers.py ``HttpReceiver``).

The receiver gets the template's JSON, an agent's quotes, braces and newlines inside its
values; a problem and its recovery each once; a template that fails on an alert refuses it
for good, naming the template's problem and not the alert's text, and the channel fails.
On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from support.channelservers import HttpReceiver
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytest.importorskip("jinja2")
pytestmark = pytest.mark.timeout(60)

from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from support.delivering import U1, check_event, enqueue, fast, recorded  # noqa: E402

HOSTILE = 'DISK "CRITICAL"}, "admin": true, {"x": "'
#: a chat service's incoming webhook, say
TEMPLATE = """{
  "text": {{ message.title|tojson }},
  "state": "{{ message.state }}",
  "lines": {{ message.output|tojson }},
  {% if message.problem %}"color": "danger",{% else %}"color": "good",{% endif %}
  "host": "{{ event.hostname }}",
  "link": {{ link|tojson }},
  "via": "{{ channel }}"
}"""


def event(action: str = "trigger", text: str = "/ 95% used") -> dict:
    """check_disk's event with a ``HOSTILE`` summary, exit status 0 unless a trigger."""
    return check_event(action, text=text, summary=HOSTILE,
                       status=2 if action == "trigger" else 0)


@pytest.fixture
def run(deliverers):
    """``run(url, template)``: a deliverer thread with one templated webhook ``hook``."""
    def start(url: str, template: str) -> DeliveryConfig:
        config = fast({"hook": {"type": "webhook", "url": url, "timeout": 5,
                                "template": template}},
                      console_url="https://fleet.example.com/")
        deliverers(config)
        return config
    return start


def test_the_registry_sends_a_webhook_with_the_template_sender():
    from sinks.alerting.delivery.services import webhook
    from sinks.alerting.delivery.senders import sender_class
    assert sender_class("webhook") is webhook.WebhookSender


def test_a_problem_and_its_recovery_as_the_templates_json(eng, run):
    receiver = HttpReceiver().start()
    try:
        config = run(receiver.url, TEMPLATE)
        enqueue(eng, config, event(text=f'{HOSTILE}\n{{"y": 1}}\n\\ "\x1b'))
        wait_for(lambda: receiver.posts, 20, interval=0.05, what="the templated POST")
        assert receiver.posts == [{
            "text": f"CRITICAL web-1/check_disk: {HOSTILE}",
            "state": "CRITICAL (exit status 2)",
            "lines": ['{"y": 1}', '\\ "\\x1b'], "color": "danger", "host": "web-1",
            "link": f"https://fleet.example.com/hosts/{U1}", "via": "hook"}]
        enqueue(eng, config, event("resolve"))
        wait_for(lambda: len(receiver.posts) == 2, 20, interval=0.05, what="the recovery")
        assert receiver.posts[1]["color"] == "good"
        assert receiver.posts[1]["text"].startswith("RECOVERY web-1/check_disk")
        assert [d["status"] for d in wait_for(lambda: len(recorded(eng)) == 2 and
                                              recorded(eng), 20, interval=0.05,
                                              what="two deliveries")] == ["HTTP 202"] * 2
    finally:
        receiver.stop()


def test_a_template_failing_on_an_alert_refuses_it_and_fails_the_channel(eng, run):
    receiver = HttpReceiver().start()
    try:
        config = run(receiver.url, '{\n"text": {{ event.summary|tojson }},\n'
                                   '"parent": {{ event.parent|tojson }}\n}')
        enqueue(eng, config, event())
        (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"],
                             20, interval=0.05, what="the refusal")
        assert failed["status"] == "template" and receiver.posts == []
        assert "UndefinedError at line 3: 'dict object' has no attribute 'parent'" in \
            failed["answer"]
        assert "CRITICAL" not in failed["answer"]
        from fleetwatch.actions.channels import listed
        (hook,) = listed(eng.url.render_as_string(hide_password=False))
        assert hook["state"] == "failing"
    finally:
        receiver.stop()
