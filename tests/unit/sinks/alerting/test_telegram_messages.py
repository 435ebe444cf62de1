"""What the ``telegram`` channel sends (sinks/alerting/delivery/services/telegram.py), checked against
Telegram's HTML parsing as the demo's Bot API stand-in does it
(fleetwatch/cli/demo/receivers/telegram.py ``parse``), and how it takes Telegram's
refusals. Pure: no server (the sends are tests/integration/test_telegram.py)."""

from __future__ import annotations

import pytest

from fleetwatch.cli.demo.receivers.telegram import ParseError, parse
from sinks.alerting.delivery import message as messages
from sinks.alerting.delivery.services.telegram import (TEXT_MAX, done_text, group_text, payload,
                                              refusal, text, thread_of, units)

HOSTILE = "@here <script>x</script> <a href=\"http://evil.example\">y</a> #tag /start &amp;"


def event(**more) -> dict:
    return {"key": "u1/check/check_disk", "kind": "check", "action": "trigger",
            "severity": "critical", "uuid": "u1", "hostname": "web-1", "check": "check_disk",
            "status": 2, "summary": "DISK CRITICAL - / 95%", "text": "/ 95% used",
            "created": 1_700_000_600.0, "since": 1_700_000_000.0,
            "link": "https://fleet.example.com/hosts/u1?a=1&b=\"2\"", **more}


def shown(html: str) -> tuple[str, list[str]]:
    plain, entities = parse(html)
    return plain, [e["type"] for e in entities]


def test_a_message_says_what_where_since_when_and_links_to_the_console():
    plain, kinds = shown(text(messages.of(event())))
    assert plain == ("CRITICAL web-1 / check_disk\nDISK CRITICAL - / 95%\n"
                     "State: CRITICAL (exit status 2)\n"
                     "Since: 2023-11-14T22:13:20.000Z (10m)\n/ 95% used\n\n"
                     "Open in the console")
    assert kinds == ["bold", "code", "code", "code", "pre", "text_link"]
    assert parse(text(messages.of(event())))[1][-1]["url"] == event()["link"]


@pytest.mark.parametrize("field", ["hostname", "check", "summary", "text", "parent"])
def test_what_an_agent_wrote_is_escaped_and_found_nothing_in(field):
    plain, kinds = shown(text(messages.of(event(**{field: f"x {HOSTILE}\x1b[0m"}))))
    assert f"x {HOSTILE}\\x1b[0m" in plain          # as written (&amp; too)
    assert set(kinds) <= {"bold", "code", "pre", "text_link"}
    assert kinds.count("text_link") == 1 and kinds.count("bold") == 1


def test_a_console_link_that_is_not_http_is_left_out():
    plain, kinds = shown(text(messages.of(event(link="javascript:alert(1)"))))
    assert "text_link" not in kinds and "Open in the console" not in plain


def test_the_output_is_cut_to_telegrams_4096_characters():
    huge = "\n".join("\U0001f525" * 300 for _ in range(5))     # 2 UTF-16 units each
    html = text(messages.of(event(text=huge)))
    plain, kinds = shown(html)
    assert units(plain) <= TEXT_MAX and kinds[-1] == "text_link"
    m = messages.of(event(text="a" * 290 + "\n" + "b" * 290, link=None))
    assert units(parse(text(m))[0]) < TEXT_MAX


def test_a_done_mark_strikes_the_problem_and_says_what_ended_it():
    plain, kinds = shown(done_text(messages.of(event(action="resolve"))))
    assert plain == "RESOLVED web-1 / check_disk\n\nOpen in the console"
    assert sorted(kinds) == ["bold", "code", "code", "strikethrough", "text_link"]


def test_a_group_lists_what_fits_and_counts_the_rest():
    events = [event(key=f"u1/check/c{n}", check=f"c{n} @here " + "x" * 250)
              for n in range(40)]
    html = group_text(messages.of_group(events, 40, "host web-1"), event()["link"])
    plain, kinds = shown(html)
    assert units(plain) <= TEXT_MAX and kinds == ["code", "pre", "text_link"]
    lines = plain.splitlines()
    assert lines[0] == "40 alerts (host web-1): 40 CRITICAL"
    listed = [line for line in lines if line.startswith("CRITICAL")]
    assert 10 < len(listed) < 40 and f"... and {40 - len(listed)} more" in lines


def test_a_follow_up_replies_to_its_problem_even_if_it_is_gone():
    assert thread_of("-1001234567890/42") == (-1001234567890, 42)
    assert thread_of("@ops_alerts/7") == ("@ops_alerts", 7)
    assert thread_of(None) is None and thread_of("C0123/1733.0001") is None
    body = payload(-100, "<b>x</b>", 42)
    assert body["reply_parameters"] == {"message_id": 42, "allow_sending_without_reply": True}
    assert body["link_preview_options"] == {"is_disabled": True}
    assert body["parse_mode"] == "HTML"


@pytest.mark.parametrize("code, answer, permanent, wait", [
    (429, {"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 5",
           "parameters": {"retry_after": 5}}, False, 5.0),
    (401, {"ok": False, "error_code": 401, "description": "Unauthorized"}, True, None),
    (403, {"ok": False, "error_code": 403,
           "description": "Forbidden: bot was blocked by the user"}, True, None),
    (400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"},
     True, None),
    (502, None, False, None),
])
def test_refusals_are_retried_or_fail_for_good(code, answer, permanent, wait):
    e = refusal(code, answer)
    assert (e.permanent, e.retry_after, e.status) == (permanent, wait, f"HTTP {code}")


def test_a_group_upgraded_to_a_supergroup_names_its_new_chat():
    e = refusal(400, {"ok": False, "error_code": 400, "description": "Bad Request: group "
                      "chat was upgraded to a supergroup chat",
                      "parameters": {"migrate_to_chat_id": -1009876}})
    assert e.permanent and "set chat_id to it" in str(e) and "-1009876" in str(e)


def test_the_stand_in_refuses_html_telegram_would():
    for bad in ("<script>x</script>", "<b>x", "a & b", "<code><b>x</b></code>", "<a>x</a>"):
        with pytest.raises(ParseError):
            parse(bad)
