"""A Microsoft Teams Workflows webhook, for the ``teams`` channel."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from fleetwatch import private
from fleetwatch.cli.demo.receivers.base import Service

#: Teams' limit on a message, in bytes
PAYLOAD_MAX = 28 * 1024
CARD_TYPE = "application/vnd.microsoft.card.adaptive"
VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5")
COLORS = ("default", "dark", "light", "accent", "good", "warning", "attention")
SIZES = ("default", "small", "medium", "large", "extralarge")
WEIGHTS = ("default", "lighter", "bolder")
SPACINGS = ("default", "none", "small", "medium", "large", "extralarge", "padding")
INVOKE = re.compile(r"/workflows/([^/]+)/triggers/manual/paths/invoke")


def _error(code: str, message: str) -> dict:
    """An error as Logic Apps (which runs Workflows) answers one."""
    return {"error": {"code": code, "message": message}}


def _element(e, where: str) -> str | None:
    """What is wrong with the body element ``e`` (None: nothing)."""
    if not isinstance(e, dict):
        return f"{where}: an element must be an object"
    kind = e.get("type")
    if kind == "TextBlock":
        if not isinstance(e.get("text"), str):
            return f"{where}: TextBlock requires 'text' (a string)"
        for key, allowed in (("color", COLORS), ("size", SIZES), ("weight", WEIGHTS),
                             ("spacing", SPACINGS), ("fontType", ("default", "monospace"))):
            if key in e and str(e[key]).lower() not in allowed:
                return f"{where}.{key}: {e[key]!r} is not one of {', '.join(allowed)}"
        for key in ("wrap", "isSubtle"):
            if key in e and not isinstance(e[key], bool):
                return f"{where}.{key}: expected a boolean"
        return None
    if kind == "FactSet":
        facts = e.get("facts")
        if not isinstance(facts, list):
            return f"{where}: FactSet requires 'facts' (an array)"
        for i, f in enumerate(facts):
            if not isinstance(f, dict) or not isinstance(f.get("title"), str) or \
                    not isinstance(f.get("value"), str):
                return f"{where}.facts[{i}]: a fact requires 'title' and 'value' (strings)"
        return None
    if kind == "Container":
        return _elements(e.get("items"), f"{where}.items")
    if kind == "ColumnSet":
        for i, column in enumerate(e.get("columns") or []):
            if not isinstance(column, dict) or column.get("type", "Column") != "Column":
                return f"{where}.columns[{i}]: expected a Column"
            problem = _elements(column.get("items") or [], f"{where}.columns[{i}].items")
            if problem:
                return problem
        return None
    return f"{where}.type: unknown element type {str(kind)[:40]!r}"


def _elements(items, where: str) -> str | None:
    if not isinstance(items, list):
        return f"{where}: expected an array of elements"
    for i, e in enumerate(items):
        problem = _element(e, f"{where}[{i}]")
        if problem:
            return problem
    return None


def card_problem(body) -> str | None:
    """What is wrong with a Workflows webhook's ``body`` (None: nothing), by the rules of
    the message envelope and of the Adaptive Card schema that Teams enforces: ``type``
    message, attachments of ``contentType`` adaptive card, each card's ``type``
    AdaptiveCard, a ``version`` Teams renders, ``body`` elements of the types it knows
    (TextBlock with ``text``, FactSet of title/value facts, Container, ColumnSet) and
    ``actions`` Action.OpenUrl with an absolute ``url``."""
    if not isinstance(body, dict) or body.get("type") != "message":
        return "the body must be a message: {\"type\": \"message\", \"attachments\": [...]}"
    attachments = body.get("attachments")
    if not isinstance(attachments, list) or not attachments:
        return "attachments: expected at least one card"
    for n, a in enumerate(attachments):
        where = f"attachments[{n}]"
        if not isinstance(a, dict) or a.get("contentType") != CARD_TYPE:
            return f"{where}.contentType: expected {CARD_TYPE}"
        card = a.get("content")
        if not isinstance(card, dict) or card.get("type") != "AdaptiveCard":
            return f"{where}.content.type: expected AdaptiveCard"
        if card.get("version") not in VERSIONS:
            return f"{where}.content.version: {card.get('version')!r} is not a version " \
                   f"Teams renders ({VERSIONS[0]} to {VERSIONS[-1]})"
        problem = _elements(card.get("body", []), f"{where}.content.body")
        if problem:
            return problem
        for i, action in enumerate(card.get("actions") or []):
            url = action.get("url") if isinstance(action, dict) else None
            if not isinstance(action, dict) or action.get("type") != "Action.OpenUrl" or \
                    not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
                return f"{where}.content.actions[{i}]: expected Action.OpenUrl with an " \
                       f"absolute url"
    return None


class Teams(Service):
    """A Teams Workflows webhook ("Post to a channel when a webhook request is received")
    as documented, for the ``teams`` channel: ``POST /workflows/ID/triggers/manual/paths/
    invoke?api-version=2016-06-01&sp=...&sv=1.0&sig=SIG`` with a message envelope of
    Adaptive Cards, answered 202 Accepted with an empty body (no id). It validates what
    it is sent (:func:`card_problem`): 400 ``TriggerInputSchemaMismatch`` for a malformed
    envelope or card, 413 past Teams' 28 KB; 401 ``DirectApiAuthorizationRequired`` without
    a ``sig``, ``DirectApiInvalidAuthorizationSignature`` for a wrong or revoked one
    (:meth:`revoke`); 404 ``WorkflowNotFound`` for a removed flow (:meth:`remove`); 429
    with Retry-After for the next ``limited`` requests and 503 for the next ``failing``.

    It also stands for a retired Office 365 connector (:meth:`connector_url`): it answers
    ``1`` (the connector's old "taken") and posts nothing, the silence a channel must not
    mistake for a delivery. What it took is kept (``cards``, and lines of
    ``DIR/teams.jsonl``); ``requests`` lists (flow, status) of each request."""

    name = "teams"
    about = "a Microsoft Teams Workflows webhook, Adaptive Cards to #ops"

    def __init__(self, directory: Path | None, port: int, flow: str = "fleetwatch-demo",
                 sig: str = "demo-signature"):
        self.flows = {flow: sig}
        self.removed: set[str] = set()
        self.cards: list[dict] = []
        self.requests: list[tuple[str, int]] = []
        self.limited, self.failing, self.retry_after = 0, 0, 1
        self.lock = threading.Lock()
        super().__init__(port, directory)

    def webhook_url(self, flow: str | None = None) -> str:
        """The flow's HTTP POST URL, its signature in ``sig``."""
        flow = flow or next(iter(self.flows))
        return (f"{self.url}/workflows/{flow}/triggers/manual/paths/invoke?api-version="
                f"2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={self.flows[flow]}")

    def connector_url(self) -> str:
        """An Office 365 connector's URL, of the kind Microsoft retired."""
        return (f"{self.url}/webhookb2/0f0e0d0c-0b0a-4909-8807-060504030201@tenant/"
                f"IncomingWebhook/5b2a0c1d/0f0e0d0c-0b0a-4909-8807-060504030201")

    def revoke(self, flow: str | None = None) -> None:
        """The flow's signature regenerated: its old URL is refused."""
        with self.lock:
            self.flows[flow or next(iter(self.flows))] = "regenerated"

    def remove(self, flow: str | None = None) -> None:
        with self.lock:
            self.removed.add(flow or next(iter(self.flows)))

    def answer(self, path: str, headers, raw: bytes | None) -> tuple:
        with self.lock:
            code, answer, extra = self._answer(path, raw)
            m = INVOKE.fullmatch(urlsplit(path).path)
            self.requests.append((m[1] if m else "connector", code))
            return code, answer, extra

    def _answer(self, path: str, raw: bytes | None) -> tuple:
        parts = urlsplit(path)
        if "/IncomingWebhook/" in parts.path:
            return 200, "1", {}                    # retired: "taken", and nothing posted
        if self.limited > 0:
            self.limited -= 1
            return 429, _error("WorkflowRequestsThrottled", "Rate limit is exceeded. Try "
                               "again later."), {"Retry-After": str(self.retry_after)}
        if self.failing > 0:
            self.failing -= 1
            return 503, _error("ServiceUnavailable", "The service is temporarily "
                               "unavailable."), {}
        m = INVOKE.fullmatch(parts.path)
        if not m or m[1] not in self.flows or m[1] in self.removed:
            return 404, _error("WorkflowNotFound", "The workflow could not be found."), {}
        query = parse_qs(parts.query)
        if not query.get("api-version"):
            return 400, _error("MissingApiVersionParameter", "The api-version query "
                               "parameter (?api-version=) is required for all requests."), {}
        sig = (query.get("sig") or [""])[0]
        if not sig:
            return 401, _error("DirectApiAuthorizationRequired", "The request must be "
                               "authenticated only by Shared Access scheme."), {}
        if sig != self.flows[m[1]]:
            return 401, _error("DirectApiInvalidAuthorizationSignature", "The provided "
                               "authorization signature is not valid."), {}
        if raw is None or len(raw) > PAYLOAD_MAX:
            return 413, _error("MessageTooLarge", "The message is larger than Teams' "
                               "limit of 28 KB."), {}
        try:
            body = json.loads(raw or b"")
        except ValueError:
            body = None
        problem = card_problem(body)
        if problem:
            return 400, _error("TriggerInputSchemaMismatch", "The input body for trigger "
                               f"'manual' of type 'Request' did not match its schema "
                               f"definition. Error details: {problem}"), {}
        for a in body["attachments"]:
            self.cards.append(a["content"])
            self.keep({"flow": m[1], "card": a["content"]})
        return 202, "", {}

    @classmethod
    def demo_channel(cls, directory: Path, port: int) -> dict:
        """The demo flow's URL, its signature in it, in a file."""
        url = directory / "teams-webhook.url"
        private.write(url, f"http://127.0.0.1:{port}/workflows/fleetwatch-demo/triggers/manual/"
                           f"paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun"
                           f"&sv=1.0&sig=demo-signature\n")
        return {"type": "teams", "webhook_url_file": str(url), "timeout": 5.0}
