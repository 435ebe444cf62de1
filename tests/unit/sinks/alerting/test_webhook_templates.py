"""The webhook's templates (sinks/alerting/delivery/services/template.py, webhook.py), pure: the
sandbox holds, an agent's text cannot break the JSON, and errors name the template's
problem and line, never the alert's values."""

from __future__ import annotations

import pytest

pytest.importorskip("jinja2")

from fleetwatch.config import ConfigError, build  # noqa: E402
from sinks.alerting.delivery.channels import SendError  # noqa: E402
from sinks.alerting.delivery.channeltypes import WebhookChannel  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from sinks.alerting.delivery.services.template import TemplateError, rendered  # noqa: E402
from sinks.alerting.delivery.services.webhook import WebhookSender, context  # noqa: E402

pytestmark = pytest.mark.timeout(60)

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
HOSTILE = 'DISK "CRITICAL"}, "admin": true, {"x": "\n\\u0000 \x1b[31m'
EVENT = {"key": f"{U1}/check/check_disk", "kind": "check", "action": "trigger",
         "severity": "critical", "uuid": U1, "hostname": "web-1", "check": "check_disk",
         "status": 2, "summary": HOSTILE, "text": f"{HOSTILE}\nline two",
         "created": 1_800_000_000.0, "link": "https://fleet.example.com/hosts/x"}


def render(source: str, event: dict = EVENT):
    return rendered(source, context(event, "hook"))


def test_an_agents_text_through_tojson_or_inside_quotes_stays_a_value():
    out = render('{"a": {{ event.summary|tojson }}, "b": "{{ event.summary }}", '
                 '"c": {{ message.output|tojson }}, "d": "{{ message.title }}", '
                 '"n": {{ event.status }}, "ok": {{ message.problem }}, '
                 '"p": {{ message.parent|tojson }}, "q": "{{ message.parent }}"}')
    assert out["a"] == out["b"] == HOSTILE and "admin" not in out
    assert out["c"] == ['DISK "CRITICAL"}, "admin": true, {"x": "', "\\u0000 \\x1b[31m",
                        "line two"]
    assert out["d"].startswith('CRITICAL web-1/check_disk: DISK "CRITICAL"}')
    assert (out["n"], out["ok"], out["p"], out["q"]) == (2, True, None, "null")


def test_an_agents_text_outside_a_string_is_an_error_not_a_key():
    with pytest.raises(TemplateError, match=r"output is not JSON: .* line 1 column"):
        render('{"a": {{ event.summary }}}')


def test_the_template_sees_the_message_the_link_and_the_channel():
    out = render('{"facts": {{ message.facts()|tojson }}, "link": {{ link|tojson }}, '
                 '"channel": "{{ channel }}", "label": "{{ message.label }}", '
                 '"all": {{ message|tojson }}, "mention": "{{ "@here"|inert }}"}')
    assert out["facts"][0] == ["Host", "web-1"] and out["channel"] == "hook"
    assert out["link"] == EVENT["link"] and out["label"] == "CRITICAL"
    assert out["all"]["key"] == EVENT["key"] and out["mention"] == "@\u200bhere"


@pytest.mark.parametrize("source", [
    "{{ event.__class__ }}",
    "{{ ''.__class__.__mro__ }}",
    "{{ message.__class__.__init__.__globals__ }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ event.pop('key') }}",
    "{{ event.update({'a': 1}) }}",
    "{{ range(10**6)|list }}",
    "{{ 'x' * 10**9 }}",
    "{{ [1] * 10**9 }}",
    "{{ 2 ** 100000 }}",
])
def test_the_sandbox_holds(source):
    with pytest.raises(TemplateError, match=r"SecurityError|OverflowError"):
        render(source)
    assert EVENT["key"].startswith(U1)              # unchanged


def test_a_typo_is_an_error_naming_the_template_and_its_line():
    with pytest.raises(TemplateError, match=r"UndefinedError at line 3: 'dict object' has "
                                            r"no attribute 'hostnme'"):
        render('{\n"a": 1,\n"b": {{ event.hostnme|tojson }}\n}')


def test_an_error_on_a_value_names_its_kind_not_the_value():
    with pytest.raises(TemplateError) as found:
        render('{"a": {{ event.summary|int(base=10)|tojson }},\n"b": {{ (1 / 0) }}}')
    assert "ZeroDivisionError at line 2" in str(found.value)
    assert "CRITICAL" not in str(found.value)


def test_a_syntax_error_stops_the_config_naming_the_channel_and_the_line():
    with pytest.raises(ConfigError, match=r"channels\.hook\.template: line 2: unexpected"):
        build(DeliveryConfig, {"channels": {"hook": {
            "type": "webhook", "url": "http://x/", "template": '{\n"a": {{ x }\n}'}}},
              "sink.yaml", "alerting.delivery")
    with pytest.raises(ConfigError, match=r"template: line 1: No filter named 'tojsn'"):
        build(WebhookChannel, {"url": "http://x/", "template": "{{ x|tojsn }}"}, "s.yaml", "c")


def test_a_failing_template_is_a_permanent_refusal_without_the_alerts_text():
    sender = WebhookSender("hook", build(WebhookChannel, {
        "url": "http://127.0.0.1:9/", "template": '{"a": "{{ event.nope }}"}'}))
    with pytest.raises(SendError) as found:
        sender.send(EVENT, "1")
    assert found.value.permanent and found.value.status == "template"
    assert "channel hook" in str(found.value) and "CRITICAL" not in str(found.value)


def test_without_a_template_the_pagerduty_event_is_sent():
    sender = WebhookSender("hook", build(WebhookChannel, {"url": "http://x/",
                                                          "routing_key": "R"}))
    assert sender.payload(EVENT)["routing_key"] == "R"
