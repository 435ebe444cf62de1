"""The ``slack`` channel: alerts posted to a Slack channel with Slack's own client library
(slack-sdk), in one of two forms.

- **A bot token** (``token_file``, ``channel``): ``chat.postMessage`` for a problem; its
  acknowledgement and its recovery are posted in the problem's thread and the problem's
  message is updated (``chat.update``) to say so. The message's id is Slack's
  ``CHANNEL/TS`` (the receipt's ``message_id``, kept in ``deliveries``), which the deliverer
  hands back for the follow-ups (``thread``).
- **An incoming webhook** (``webhook_url_file``): each alert a message of its own; no thread,
  no update (what a webhook can do).

What is sent is built here and pure (:func:`message`): a line that says what (the label and
the summary), then the host and check and the output's first lines, from agents, in code
spans and blocks with their backticks changed, Slack's three special characters (``& < >``)
escaped, control characters shown as escapes: no agent can mention anyone (``<!here>``,
``<@U...>``), link anything, or format the message; link unfurling is off. Slack's limits
are kept (a section's text 3,000 characters, a message's 40,000).

Answers: ``ok: false`` with ``invalid_auth``, ``token_revoked``, ``channel_not_found`` (and any
error but a few temporary ones) refuses the alert for good, which fails the channel
(:mod:`sinks.alerting.delivery.health`); HTTP 429 is retried after its ``Retry-After``; a 5xx,
a time-out or a refused connection is retried.
"""

from __future__ import annotations

import logging
import urllib.error
from urllib.parse import urlsplit

from fleetwatch.display import escape
from sinks.alerting.delivery.channels import (Receipt, SendError, _retry_after, label,
                                              read_secret)
from sinks.alerting.delivery.channeltypes import SlackChannel
from sinks.alerting.delivery.message import of_group

log = logging.getLogger(__name__)

#: Slack's limits: a section block's text, a message's text
SECTION_MAX, TEXT_MAX = 3000, 40000
#: output lines shown under the summary
OUTPUT_LINES = 5
#: errors Slack answers for a request worth sending again later
TEMPORARY = frozenset({"ratelimited", "internal_error", "fatal_error", "service_unavailable",
                       "request_timeout"})
#: alerts a grouped message lists (Slack's section holds 3,000 characters)
GROUP_LISTED = 20
#: what an action does to the problem's first message
DONE = {"acknowledge": "ACKNOWLEDGED", "resolve": "RESOLVED"}


# ---------------------------------------------------------------- what is sent (pure)

def mrkdwn(text) -> str:
    """``text`` as Slack shows it literally: ``& < >`` escaped (no mention, channel
    link or URL can be made of it), on the lines it has, control characters as escapes."""
    lines = [escape(line) for line in str(text or "").splitlines()]
    return "\n".join(lines).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(text, limit: int) -> str:
    """``text`` in a code span: its backticks changed, so it cannot end the span."""
    return "`" + mrkdwn(" ".join(str(text or "").split())[:limit]).replace("`", "\u02cb") + "`"


def message(event: dict, done: str | None = None) -> tuple[str, list[dict]]:
    """(the text: the notification's, and what clients without blocks show; the blocks)
    of ``event``: ``*CRITICAL* `web-1` / `check_disk`: `DISK CRITICAL - / 95%```, then the
    output's first lines in a code block; what agents wrote only in code, where Slack
    makes no link. ``done``: the problem's first message once acknowledged or resolved
    (struck, and what ended it)."""
    kind = event.get("kind")
    head = mrkdwn(label(event))
    where = _code(event.get("hostname") or event.get("uuid") or
                  ("channel" if kind in ("channel", "test") else "?"), 255)
    if event.get("check"):
        where += f" / {_code(event['check'], 255)}"
    if done:
        body = f"~{head} {where}~ *{done}*"
    else:
        body = f"*{head}* {where}"
        if event.get("summary"):
            body += f": {_code(event['summary'], 300)}"
        if event.get("parent"):         # the parent it was UNREACHABLE behind
            body += f"\nParent: {_code(event['parent'], 300)}"
        lines = [line for line in str(event.get("text") or "").splitlines() if line.strip()]
        output = mrkdwn("\n".join(lines[:OUTPUT_LINES])).replace("`", "\u02cb")
        if output and output != mrkdwn(event.get("summary") or ""):
            room = SECTION_MAX - len(body) - 10 - len(_link(event))
            body += f"\n```{output[:max(0, room)]}```"
        body += _link(event)
    body = body[:SECTION_MAX]
    return body[:TEXT_MAX], [{"type": "section", "text": {"type": "mrkdwn", "text": body}}]


def group_message(events: list[dict], title: str = "", cap: int = GROUP_LISTED) -> \
        tuple[str, list[dict]]:
    """(the text, the blocks) of a group of alerts as one message: its title in bold, then
    one line per alert (its headline in a code span), at most ``cap``, then "... and N
    more"."""
    group = of_group(events, cap, title)
    lines = [f"*{mrkdwn(group.title)}*",
             *(_code(m.title, 300) for m in group.messages)]
    if group.more:
        lines.append(f"... and {group.more} more")
    body = "\n".join(lines)
    links = [m.link for m in group.messages if m.link]
    if len(set(links)) == 1:            # all on one host's page
        body += _link({"link": links[0]})
    body = body[:SECTION_MAX]
    return body, [{"type": "section", "text": {"type": "mrkdwn", "text": body}}]


def _link(event: dict) -> str:
    """The console's link (its address is the operator's config, never an agent's): Slack's
    own link syntax, its text ours."""
    url = str(event.get("link") or "")
    if not url or any(c in url for c in "<>|\n"):
        return ""
    return f"\n<{url.replace('&', '&amp;')}|Open in the console>"


# ---------------------------------------------------------------- talking to Slack

class SlackSender:
    def __init__(self, name: str, channel: SlackChannel):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        #: the deliverer hands a follow-up the message of its problem (``thread``)
        self.threads = bool(channel.token_file)

    def send(self, event: dict, ref: str, thread: str | None = None) -> Receipt:
        if self.channel.webhook_url_file:
            return self._webhook(event)
        return self._post(event, thread)

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """A group of alerts (the channel's ``group_wait``) as one message: posted by the
        bot, or through the webhook; never a thread (its alerts' follow-ups go out on
        their own)."""
        text, blocks = group_message(events, title)
        if self.channel.webhook_url_file:
            return self._webhook_post(text, blocks)
        answer = self._say(self._client(), channel=self.channel.channel, text=text,
                           blocks=blocks)
        posted = f"{answer.get('channel')}/{answer.get('ts')}"
        return Receipt.of(f"HTTP {answer.status_code}", posted,
                          f"ok: {len(events)} alerts posted as {posted}")

    def _client(self):
        from slack_sdk import WebClient
        token = read_secret(self.channel.token_file, "token_file")
        base = self.channel.api_url if self.channel.api_url.endswith("/") \
            else self.channel.api_url + "/"
        return WebClient(token=token, base_url=base, timeout=max(1, round(self.timeout)))

    def _post(self, event: dict, thread: str | None) -> Receipt:
        client = self._client()
        text, blocks = message(event)
        follow = event.get("action") in DONE and thread and "/" in thread
        where, _, ts = (thread or "").partition("/")
        if follow:
            answer = self._say(client, channel=where, thread_ts=ts, text=text, blocks=blocks)
            self._update(client, where, ts, event)
        else:
            answer = self._say(client, channel=self.channel.channel, text=text, blocks=blocks)
        posted = f"{answer.get('channel')}/{answer.get('ts')}"
        return Receipt.of(f"HTTP {answer.status_code}", posted,
                          f"ok: posted {'in the thread of ' + thread if follow else ''}"
                          f"{'' if follow else posted}")

    def _say(self, client, **posted):
        """``chat.postMessage`` (link previews off); Slack's refusals and a failed
        connection as a :class:`SendError`."""
        from slack_sdk.errors import SlackApiError
        try:
            return client.chat_postMessage(**posted, unfurl_links=False, unfurl_media=False)
        except SlackApiError as e:
            raise _refusal(e) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise SendError(f"Slack {urlsplit(self.channel.api_url).hostname}: {reason}") \
                from None

    def _update(self, client, where: str, ts: str, event: dict) -> None:
        """The problem's first message, struck and marked: its follow-up was posted, so a
        refusal here is logged, not retried (it would post the follow-up again)."""
        from slack_sdk.errors import SlackApiError
        text, blocks = message(event, DONE[event["action"]])
        try:
            client.chat_update(channel=where, ts=ts, text=text, blocks=blocks)
        except (SlackApiError, urllib.error.URLError, OSError) as e:
            log.warning("channel %s: the problem's message %s/%s not updated: %s", self.name,
                        where, ts, getattr(e, "response", None) and
                        e.response.get("error") or e)

    def _webhook(self, event: dict) -> Receipt:
        return self._webhook_post(*message(event))

    def _webhook_post(self, text: str, blocks: list[dict]) -> Receipt:
        from slack_sdk.webhook import WebhookClient
        url = read_secret(self.channel.webhook_url_file, "webhook_url_file")
        try:
            answer = WebhookClient(url, timeout=max(1, round(self.timeout))).send(
                text=text, blocks=blocks, unfurl_links=False, unfurl_media=False)
        except (urllib.error.URLError, OSError) as e:
            parts = urlsplit(url)
            raise SendError(f"Slack webhook {parts.hostname}: "
                            f"{getattr(e, 'reason', None) or e}") from None
        code, body = answer.status_code, str(answer.body or "")
        if 200 <= code < 300:
            return Receipt.of(f"HTTP {code}", None, body)
        retry = code in (408, 429) or code >= 500
        raise SendError(f"HTTP {code}: {body}", permanent=not retry, status=f"HTTP {code}",
                        retry_after=_seconds(answer.headers.get("Retry-After")
                                             or answer.headers.get("retry-after")))


def _seconds(value) -> float | None:
    """A Retry-After's seconds (:func:`sinks.alerting.delivery.channels._retry_after`):
    slack-sdk gives a header as a string or a list of them."""
    return _retry_after(value[0] if isinstance(value, list) and value else
                        value if isinstance(value, str) else None)


def _refusal(e) -> SendError:
    """A :class:`slack_sdk.errors.SlackApiError` as a SendError: 429 and Slack's temporary
    errors retried (after ``Retry-After``), a 5xx too, anything else refused for good."""
    response = e.response
    code = response.status_code
    error = response.get("error") if isinstance(response.data, dict) else None
    headers = {k.lower(): v for k, v in (response.headers or {}).items()}
    retry = code in (408, 429) or code >= 500 or error in TEMPORARY
    return SendError(f"HTTP {code} {error or 'error'}", permanent=not retry,
                     status=f"HTTP {code}", retry_after=_seconds(headers.get("retry-after")))
