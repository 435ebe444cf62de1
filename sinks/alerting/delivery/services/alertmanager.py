"""The ``alertmanager`` channel: the fleet's alerts posted to an existing Prometheus
Alertmanager (``POST {url}/api/v2/alerts``, a small documented HTTP call written here),
for teams that route everything through one; the Alertmanager then groups, silences,
inhibits and notifies them as it does Prometheus' alerts.

**An alert is its label set** (the Alertmanager's fingerprint of it): ``alertname`` (the
check's name; ``host_down``, ``process_down``, ``CHECK_flapping``, ``notify``,
``channel_failing``, ``fleetwatch_test`` for the other kinds), ``host``, ``uuid``, ``check``,
``severity``, ``fleetwatch_key`` (the alert's key, :mod:`sinks.alerting.delivery.events`),
then the channel's ``labels`` (whose names may not be the fleet's). They come from the
event's key and stable fields only, never from its output. Annotations: ``summary`` (the
headline), ``description`` (the output's first lines), ``console`` (the problem's page,
also the ``generatorURL``), ``acknowledged`` once acknowledged.

**One firing alert per key.** A check's severity changes while its problem lasts
(WARNING -> CRITICAL is a new trigger) and a recovery says ``ok``, so the labels of a
follow-up cannot be computed from it alone: each send first asks the Alertmanager which
alerts of the key it holds (``GET /api/v2/alerts?filter=fleetwatch_key="KEY"`` and the
channel's labels; the Alertmanager is the record) and then posts, in one list:

- a trigger (a problem, a change, a reminder, an escalation): the alert firing, ``endsAt``
  ``ends_after`` seconds ahead (the Alertmanager resolves it then if nothing else comes),
  ``startsAt`` when the problem began; an alert of the key with other labels (the old
  severity) resolved;
- an acknowledgement: the key's firing alerts posted again as they are, with an
  ``acknowledged`` annotation (who, and their comment) and ``endsAt`` pushed ahead. The
  Alertmanager does not notify again for a changed annotation (its notifications follow
  firing and resolved alerts), so the acknowledgement shows in its API, its UI and the
  next notification of the group, and silences nothing: a silence is the Alertmanager's
  own acknowledgement, made there;
- a recovery: the key's firing alerts resolved (their labels as the Alertmanager has them,
  ``endsAt`` now; the Alertmanager then notifies ``resolved``). None firing (it expired,
  or the Alertmanager restarted: it keeps no alerts across restarts): nothing is posted,
  and the receipt says so.

A group (the channel's ``group_wait``) is one GET per 40 keys and one POST with every alert
(the API takes a list). A POST is idempotent (an alert posted twice is one alert), so the
at most one duplicate of a killed sink changes nothing there.

**Escaping.** Label values and annotations are plain text: control characters shown as
escapes, mentions broken (:mod:`sinks.alerting.delivery.services.plaintext`); the Alertmanager's
templates put them in its receivers' formats. Label values are cut to 255 characters (a
longer key ends in a hash, as the webhook's dedup key), the description to 4,096.

**Answers.** 200 (an empty body: the receipt's ``message_id`` is the firing alert's
fingerprint, computed as the Alertmanager does, :func:`fingerprint`); 400 or 422 (an alert
it refused) and 401/403 (a proxy in front refusing the token) refuse the alert for good,
which fails the channel; 429 waits its Retry-After; 5xx, a time-out or a refused
connection is retried (:func:`sinks.alerting.delivery.channels.post_json`). The GET is
sorted the same way.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request

from fleetwatch import __version__
from fleetwatch.display import escape, iso
from sinks.alerting.delivery import message
from sinks.alerting.delivery.channels import (Receipt, SendError, _NoRedirect, _retry_after,
                                              _safe, dedup_key, post_json, read_secret)
from sinks.alerting.delivery.channeltypes import AlertmanagerChannel
from sinks.alerting.delivery.services.plaintext import inert

ALERTS = "/api/v2/alerts"
#: the labels the fleet sets (a channel's own ``labels`` may not use these names)
FLEET_LABELS = AlertmanagerChannel.FLEET_LABELS
LABEL_MAX = 255
DESCRIPTION_MAX = 4096
#: keys asked about in one GET (its URL stays under a proxy's usual 8 KiB)
KEYS_PER_GET = 40
ALERTNAME = {"host": "host_down", "notify": "notify", "channel": "channel_failing",
             "test": "fleetwatch_test"}
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]+")
_FNV_OFFSET, _FNV_PRIME, _MASK = 14695981039346656037, 1099511628211, (1 << 64) - 1


# ---------------------------------------------------------------- what is sent (pure)

def _text(text, limit: int) -> str:
    """One line of ``text``: control characters escaped, mentions broken, ``limit`` at
    most."""
    return inert(escape(" ".join(str(text or "").split()))[:limit])


def _value(text) -> str:
    """A label value (255 characters at most)."""
    return _text(text, LABEL_MAX)


def alertname(event: dict) -> str:
    """``check_disk``; ``host_down`` (``process_down`` for a local process), ``notify``,
    ``check_disk_flapping``, ``channel_failing``: what the alert is, as a label value of
    letters, digits and ``_ . : -``."""
    kind, check = str(event.get("kind") or ""), event.get("check")
    if kind == "check" and check:
        name = str(check)
    elif kind == "flapping" and check:
        name = f"{check}_flapping"
    elif kind == "host" and check:
        name = "process_down"
    else:
        name = ALERTNAME.get(kind, kind or "fleetwatch")
    return _UNSAFE.sub("_", name)[:LABEL_MAX].strip("_") or "fleetwatch"


def labels(event: dict, channel: AlertmanagerChannel, severity: str | None = None) -> dict:
    """The label set of ``event``'s alert (its identity in the Alertmanager): from the key
    and the stable fields only; ``severity`` the event's unless given."""
    out = {"alertname": alertname(event)}
    host = event.get("hostname") or event.get("uuid")
    for name, value in (("host", host), ("uuid", event.get("uuid")),
                        ("check", event.get("check"))):
        if value:
            out[name] = _value(value)
    out["severity"] = _value(severity or event.get("severity") or "error")
    out["fleetwatch_key"] = _value(dedup_key(str(event.get("key") or "?")))
    return {**channel.labels, **out}


def annotations(event: dict) -> dict:
    """``summary`` (the headline), ``description`` (the output's first lines), ``console``
    (the problem's page)."""
    m = message.of(event)
    out = {"summary": inert(m.title)}
    lines = [*m.output] + ([f"Parent: {m.parent}"] if m.parent else [])
    if lines:
        out["description"] = inert("\n".join(lines))[:DESCRIPTION_MAX]
    if m.link:
        out["console"] = m.link
    return out


def fingerprint(label_set: dict) -> str:
    """The Alertmanager's id of an alert (prometheus/common's ``LabelSet.Fingerprint``):
    FNV-1a 64 over the sorted names and their values, each followed by a 0xff byte; 16 hex
    digits, as its API and UI show it."""
    h = _FNV_OFFSET
    for name in sorted(label_set):
        for part in (name, label_set[name]):
            for byte in str(part).encode():
                h = ((h ^ byte) * _FNV_PRIME) & _MASK
            h = ((h ^ 0xFF) * _FNV_PRIME) & _MASK
    return f"{h:016x}"


def firing(event: dict, label_set: dict, now: float, ends_after: float,
           extra: dict | None = None) -> dict:
    """``event``'s alert firing: from when its problem began to ``ends_after`` ahead."""
    began = event.get("since") if isinstance(event.get("since"), (int, float)) \
        else event.get("created")
    began = min(began, now) if isinstance(began, (int, float)) else now
    out = {"labels": label_set, "annotations": {**annotations(event), **(extra or {})},
           "startsAt": iso(began), "endsAt": iso(now + ends_after)}
    if event.get("link"):
        out["generatorURL"] = str(event["link"])
    return out


def resolved(held: dict, now: float, notes: dict | None = None) -> dict:
    """An alert the Alertmanager holds (``held``: its GET's entry), resolved now; its
    ``startsAt`` left out (the Alertmanager keeps the one it has), ``notes`` over its
    annotations."""
    out = {"labels": held["labels"], "annotations": {**held.get("annotations", {}),
                                                    **(notes or {})},
           "endsAt": iso(now)}
    if held.get("generatorURL"):
        out["generatorURL"] = held["generatorURL"]
    return out


def acknowledged(held: dict, event: dict, now: float, ends_after: float) -> dict:
    """A firing alert posted again as it is, with an ``acknowledged`` annotation."""
    note = _text(event.get("summary") or "acknowledged", DESCRIPTION_MAX)
    out = {"labels": held["labels"],
           "annotations": {**held.get("annotations", {}), "acknowledged": note},
           "endsAt": iso(now + ends_after)}
    for key in ("startsAt", "generatorURL"):
        if held.get(key):
            out[key] = held[key]
    return out


def alerts_for(event: dict, held: list[dict], channel: AlertmanagerChannel,
               now: float) -> list[dict]:
    """What is posted for ``event``, given the alerts of its key the Alertmanager holds
    (``held``): see the module's docstring."""
    action = event.get("action")
    if action == "resolve":
        return [resolved(h, now, annotations(event)) for h in held]
    if action == "acknowledge":
        if held:
            return [acknowledged(h, event, now, channel.ends_after) for h in held]
        note = {"acknowledged": _text(event.get("summary") or "acknowledged", DESCRIPTION_MAX)}
        return [firing(event, labels(event, channel), now, channel.ends_after, note)]
    mine = labels(event, channel)
    return [firing(event, mine, now, channel.ends_after),
            *(resolved(h, now) for h in held if h["labels"] != mine)]


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def filters(keys: list[str], channel: AlertmanagerChannel) -> list[str]:
    """The GET's matchers for the alerts of ``keys`` (label values, as posted) of this
    channel: ``fleetwatch_key="K"`` (one key) or ``fleetwatch_key=~"K1|K2"`` (RE2, each
    escaped), then the channel's labels."""
    if len(keys) == 1:
        out = [f"fleetwatch_key={_quoted(keys[0])}"]
    else:
        out = ["fleetwatch_key=~" + _quoted("|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1",
                                                            k) for k in keys))]
    return out + [f"{name}={_quoted(value)}" for name, value in sorted(channel.labels.items())]


def mine(held: list, keys: set[str], channel: AlertmanagerChannel) -> dict[str, list[dict]]:
    """The GET's alerts that this channel posted: one of ``keys``, and exactly the
    channel's own labels besides the fleet's (another channel's have others), by key."""
    out: dict[str, list[dict]] = {}
    for alert in held if isinstance(held, list) else []:
        found = alert.get("labels") if isinstance(alert, dict) else None
        if not isinstance(found, dict) or found.get("fleetwatch_key") not in keys:
            continue
        if {k: v for k, v in found.items() if k not in FLEET_LABELS} != channel.labels:
            continue
        if not isinstance(alert.get("annotations"), dict):
            alert = {**alert, "annotations": {}}
        out.setdefault(found["fleetwatch_key"], []).append(alert)
    return out


# ---------------------------------------------------------------- talking to it

class AlertmanagerSender:
    def __init__(self, name: str, channel: AlertmanagerChannel, opener=None, clock=time.time):
        self.name, self.channel, self.timeout, self.clock = name, channel, channel.timeout, clock
        self.opener = opener or urllib.request.build_opener(_NoRedirect)
        base = channel.url.rstrip("/")
        for suffix in (ALERTS, "/api/v2"):
            base = base.removesuffix(suffix)
        self.endpoint = base + ALERTS

    def _headers(self) -> dict:
        c = self.channel
        return {"Authorization": f"Bearer {read_secret(c.token_file, 'token_file')}"} \
            if c.token_file else {}

    def send(self, event: dict, ref: str) -> Receipt:
        """Post ``event``'s alert (and resolve its key's others); see the module's
        docstring."""
        return self._post([event])

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """A group's alerts in one POST (the latest event of each key counts)."""
        return self._post(events)

    def _post(self, events: list[dict]) -> Receipt:
        headers = self._headers()
        latest = {labels(e, self.channel)["fleetwatch_key"]: e for e in events}
        held = self._held(list(latest), headers)
        now = self.clock()
        alerts = [a for key, e in latest.items()
                  for a in alerts_for(e, held.get(key, []), self.channel, now)]
        firing_ = [a for a in alerts if a["endsAt"] != iso(now)]
        told = f"{len(firing_)} firing, {len(alerts) - len(firing_)} resolved"
        if not alerts:
            return Receipt.of("not posted", None, "no alert of this key firing in the "
                                                  "Alertmanager: nothing to resolve")
        code, answer = post_json(self.opener, self.endpoint, alerts, headers,
                                 self.channel.timeout)
        first = (firing_ or alerts)[0]["labels"]
        return Receipt.of(f"HTTP {code}", fingerprint(first) if len(latest) == 1 else None,
                          answer.strip() or f"posted {told}")

    def _held(self, keys: list[str], headers: dict) -> dict[str, list[dict]]:
        """The alerts of ``keys`` the Alertmanager holds (firing, silenced or inhibited)."""
        out: dict[str, list[dict]] = {}
        for i in range(0, len(keys), KEYS_PER_GET):
            chunk = keys[i:i + KEYS_PER_GET]
            query = urllib.parse.urlencode([("filter", f) for f in filters(chunk, self.channel)])
            out.update(mine(self._get(f"{self.endpoint}?{query}", headers), set(chunk),
                            self.channel))
        return out

    def _get(self, url: str, headers: dict):
        """GET ``url``'s JSON; refusals sorted as :func:`post_json` sorts them."""
        req = urllib.request.Request(url, method="GET", headers={
            "Accept": "application/json", "User-Agent": f"fleetwatch/{__version__}",
            **headers})
        try:
            with self.opener.open(req, timeout=self.channel.timeout) as resp:
                data, code = resp.read(16 * 1024 * 1024), resp.status
        except urllib.error.HTTPError as e:
            code, detail = e.code, e.read(300).decode(errors="replace") if e.fp else ""
            e.close()
            retry = code in (408, 429) or code >= 500
            raise SendError(f"GET alerts: HTTP {code} {e.reason}: {detail}",
                            permanent=not retry,
                            retry_after=_retry_after(e.headers.get("Retry-After")),
                            status=f"HTTP {code}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise SendError(f"GET {_safe(self.endpoint)}: {reason}") from None
        if not 200 <= code < 300:
            raise SendError(f"GET alerts: HTTP {code}", permanent=True, status=f"HTTP {code}")
        try:
            return json.loads(data)
        except ValueError:
            raise SendError("GET alerts: the answer is not JSON (is url an "
                            "Alertmanager?)", permanent=True, status=f"HTTP {code}") from None
