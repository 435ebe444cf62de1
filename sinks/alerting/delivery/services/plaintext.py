"""Plain text for receivers whose format fleetwatch does not know (pure): an
Alertmanager's annotations and labels, which its own templates put in Slack, email or
a pager; the body Apprise hands to any of its services.

No escaping fits every format such a text may land in (a backslash shows in an email, an
``&lt;`` in a pager), so the text stays as written, control characters already shown as
escapes (:mod:`sinks.alerting.delivery.message`), and only what would call people is
broken: a zero-width space (U+200B) after each ``@`` followed by a letter, digit or ``_``
(``@here``, ``@channel``, ``@room``, ``@everyone``, ``@alice``: no longer a mention in
Slack, Discord, Mattermost, Matrix or Teams) and after each ``<`` that opens Slack's
``<!here>``, ``<@U123>``, ``<#C123>`` forms or Discord's ``<@&123>``. The text reads the
same; a receiver that renders Markdown or HTML from it must escape it itself (an
Alertmanager's templates for HTML do).
"""

from __future__ import annotations

import re

#: a mention's start: @ before a word character, < before ! @ # (Slack's and Discord's)
_MENTION = re.compile(r"(@(?=\w)|<(?=[!@#]))")
ZWSP = "\u200b"


def inert(text: str) -> str:
    """``text`` with every mention broken by a zero-width space (U+200B) after its ``@``
    or ``<``: ``@here`` -> ``@\\u200bhere``, ``<!channel>`` -> ``<\\u200b!channel>``."""
    return _MENTION.sub(lambda m: m.group() + ZWSP, text)
