"""What the ``matrix`` channel sends (sinks/alerting/delivery/services/matrix.py), pure: the message's
plain and HTML bodies, what an agent wrote made inert in both, replies and edits, a group's
message and its size, the transaction id, and how a homeserver's answers are sorted. No
server (tests/integration/test_matrix.py runs it against Synapse)."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from fleetwatch.cli.demo.receivers.matrix import dropped_tags
from sinks.alerting.delivery.services import matrix

HOSTILE = ("@room @bob:localhost <script>alert(1)</script> <a href='https://evil.example'>x"
           "</a> **b** [x](https://evil.example) https://evil.example & \x1b[31m")


def event(action: str = "trigger", **extra) -> dict:
    return {"key": "u1/check/check_disk", "kind": "check", "action": action,
            "severity": "critical" if action == "trigger" else "ok", "uuid": "u1",
            "hostname": "web-1", "check": "check_disk", "status": 2,
            "summary": "DISK CRITICAL - / 95%", "text": "/ 95% used\n/var 80% used",
            "created": 1_700_000_000.25, **extra}


class Text(HTMLParser):
    """The text a client shows of some HTML, and its links."""

    def __init__(self):
        super().__init__()
        self.text, self.links = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links.append(dict(attrs)["href"])

    def handle_data(self, data):
        self.text.append(data)


def shown(formatted: str) -> Text:
    t = Text()
    t.feed(formatted)
    t.close()
    return t


def test_a_problem_reads_as_one_message_in_both_bodies():
    c = matrix.content(event(link="https://fleet.example.com/hosts/u1?a=1&b=2", since=
                             1_700_000_000.25 - 720))
    assert c["msgtype"] == "m.text" and c["format"] == "org.matrix.custom.html"
    assert c["m.mentions"] == {}
    assert c["body"].splitlines() == [
        "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%",
        "State: CRITICAL (exit status 2)",
        "Since: 2023-11-14T22:01:20.250Z (12m)",
        "", "/ 95% used", "/var 80% used",
        "", "Open in the console: https://fleet.example.com/hosts/u1?a=1&b=2"]
    assert c["formatted_body"] == (
        "<strong>CRITICAL</strong> <code>web-1</code> / <code>check_disk</code>: "
        "<code>DISK CRITICAL - / 95%</code><br>State: <code>CRITICAL (exit status 2)</code>"
        "<br>Since: <code>2023-11-14T22:01:20.250Z (12m)</code>"
        "<pre><code>/ 95% used\n/var 80% used</code></pre>"
        '<a href="https://fleet.example.com/hosts/u1?a=1&amp;b=2">Open in the console</a>')
    assert dropped_tags(c["formatted_body"]) == []


def test_what_an_agent_wrote_mentions_links_and_formats_nothing():
    c = matrix.content(event(hostname=f"web-1 {HOSTILE}", summary=HOSTILE,
                             text=f"{HOSTILE}\n" * 3))
    page = shown(c["formatted_body"])
    for said in (c["body"], "".join(page.text)):
        assert "@room" not in said and "@bob:" not in said and "://" not in said
        assert "\x1b" not in said and "\\x1b" in said
        # shown as written, but for the invisible joiners
        assert HOSTILE.replace("\x1b", "\\x1b") in said.replace(matrix.JOINER, "")
    assert page.links == []                          # no link at all, no console_url
    assert "<script" not in c["formatted_body"] and "&lt;script&gt;" in c["formatted_body"]
    assert "<a " not in c["formatted_body"]
    assert dropped_tags(c["formatted_body"]) == []


def test_inert_keeps_the_text_but_breaks_mentions_and_urls():
    assert matrix.inert("@room see https://x.example") == \
        "@\u2060room see https:\u2060//x.example"
    assert matrix.inert("plain text") == "plain text"


def test_long_output_is_cut_to_the_size_an_event_may_have():
    c = matrix.content(event(text="\n".join(f"{n} " + "<&>" * 2000 for n in range(50))))
    assert len(json.dumps(c, ensure_ascii=False).encode()) <= matrix.CONTENT_MAX
    assert c["formatted_body"].startswith("<strong>CRITICAL</strong>")


def test_a_follow_up_replies_to_its_problem_and_the_edit_strikes_it():
    problem = matrix.content(event())
    ack = matrix.reply(matrix.content(event("acknowledge")), "$problem")
    assert ack["m.relates_to"] == {"m.in_reply_to": {"event_id": "$problem"}}
    assert ack["body"].startswith("ACKNOWLEDGED web-1/check_disk")
    edit = matrix.edit_content(problem, "$problem", "resolve")
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$problem"}
    new = edit["m.new_content"]
    assert new["body"] == f"RESOLVED (see the replies)\n{problem['body']}"
    assert new["formatted_body"] == (f"<strong>RESOLVED</strong> (see the replies)<br>"
                                     f"<del>{problem['formatted_body']}</del>")
    assert edit["body"] == f"* {new['body']}" and new["m.mentions"] == edit["m.mentions"] == {}


def test_a_group_is_one_message_listing_its_alerts():
    events = [event(hostname=f"web-{n}", key=f"u{n}/check/check_disk") for n in range(60)]
    events[3]["hostname"] = "@room <i>x</i>"
    c = matrix.group_content(events, "severity critical")
    assert c["body"].splitlines()[0] == "60 alerts (severity critical): 60 CRITICAL"
    assert c["body"].splitlines()[-1] == "- ... and 10 more"
    assert c["formatted_body"].count("<li>") == 51
    assert "@\u2060room &lt;i&gt;x&lt;/i&gt;" in c["formatted_body"]
    assert "@room" not in c["body"] and dropped_tags(c["formatted_body"]) == []
    big = [event(hostname="&" * 250, key=f"u{n}") for n in range(200)]
    c = matrix.group_content(big)
    assert len(json.dumps(c, ensure_ascii=False).encode()) <= matrix.CONTENT_MAX
    assert "more</li>" in c["formatted_body"]


def test_the_transaction_id_is_the_same_on_a_retry_and_differs_for_another_alert():
    first = matrix.txn_id("17", [event()])
    assert first == matrix.txn_id("17", [dict(event(), link="https://x/")])
    assert first.startswith("fleetwatch.17.")
    assert first != matrix.txn_id("17", [event(created=1_700_000_001.0)])   # a reused row id
    assert first != matrix.txn_id("18", [event()])
    group = matrix.txn_id("17+3", [event(), event(), event()])
    assert group.startswith("fleetwatch.17_3.") and len(group) < 255


@pytest.mark.parametrize("code, answer, header, permanent, after", [
    (401, {"errcode": "M_UNKNOWN_TOKEN", "error": "Unrecognised access token",
           "soft_logout": False}, None, True, None),
    (401, {"errcode": "M_MISSING_TOKEN", "error": "Missing access token"}, None, True, None),
    (403, {"errcode": "M_FORBIDDEN", "error": "User not in room"}, None, True, None),
    (404, {"errcode": "M_UNRECOGNIZED", "error": "Unrecognized request"}, None, True, None),
    (413, {"errcode": "M_TOO_LARGE", "error": "event too large"}, None, True, None),
    (429, {"errcode": "M_LIMIT_EXCEEDED", "error": "Too Many Requests",
           "retry_after_ms": 2500}, 3.0, False, 3.0),
    (429, {"errcode": "M_LIMIT_EXCEEDED", "retry_after_ms": 2500}, None, False, 2.5),
    (500, {"errcode": "M_UNKNOWN", "error": "Internal server error"}, None, False, None),
    (502, "<html>Bad Gateway</html>", None, False, None),
])
def test_answers_are_sorted_into_retried_and_refused(code, answer, header, permanent, after):
    detail = answer if isinstance(answer, str) else json.dumps(answer)
    e = matrix._refusal(code, "reason", detail, header)
    assert (e.permanent, e.retry_after, e.status) == (permanent, after, f"HTTP {code}")
    if isinstance(answer, dict) and answer.get("error"):
        assert str(e) == f"HTTP {code} {answer['errcode']}: {answer['error']}"
