"""Alerts as Prometheus (or vmalert) posts them to an Alertmanager (``POST /api/v2/alerts``):
read, checked and merged as Alertmanager 0.25 does, answered in its words. Pure: no I/O, the
time given.

A body is a JSON list of ``{labels, annotations, startsAt, endsAt, generatorURL}``. What
Alertmanager's API refuses whole (its go-swagger binding, before any alert is looked at),
:func:`parse` raises as :class:`Refused` with Alertmanager's status and shape
(``{"code": N, "message": "..."}``): a body that is not JSON or not a list, a label or an
annotation that is not a string, a time that is not one (400), ``labels`` missing (422,
``0.labels in body is required``), a ``generatorURL`` that is not a URI (422). Then each
alert, as Alertmanager's handler does: labels with an empty value dropped; ``startsAt``
missing is ``endsAt`` (or now); ``endsAt`` missing is now plus the resolve timeout
(``timeout``: the alert resolves unless sent again); then checked (``at least one label pair
required``, ``invalid label set: invalid name "1bad"``, ``start time must be before end
time``, ``invalid annotations: ...``). The valid ones are kept and the others' messages
answered together, 400, as a JSON string (Alertmanager's best effort). Beyond Alertmanager,
the sizes a row may hold (:data:`MAX_LABELS` and the rest), refused in the same way, and NUL
characters (which PostgreSQL's text cannot hold) shown as U+FFFD.

An alert is known by its label set (:func:`fingerprint`); one posted again is merged with the
one held (:func:`merge`, Alertmanager's ``Alert.Merge`` when their times overlap).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone

#: a label's or an annotation's name (Prometheus' ``model.LabelNameRE``)
NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: a time as RFC 3339 writes it (Go's zero time, 0001-01-01T00:00:00Z, is "not given")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?",
                  re.IGNORECASE)
#: a URI as go-openapi's ``uri`` format takes it: a scheme, or an absolute path
URI = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*:|/)\S*")
#: what one alert may hold at most (Alertmanager has no bound; a row must)
MAX_LABELS, MAX_ANNOTATIONS = 64, 32
MAX_NAME, MAX_VALUE, MAX_ANNOTATION, MAX_URL = 128, 1024, 8192, 2048


class Refused(Exception):
    """A body refused whole: Alertmanager's ``status`` and ``{"code", "message"}``."""

    def __init__(self, status: int, message: str, code: int | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code or status

    def body(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Alert:
    """One alert as held: times in epoch seconds; ``timeout``: no ``endsAt`` was given."""

    fingerprint: str
    labels: dict
    annotations: dict
    starts_at: float
    ends_at: float
    timeout: bool = False
    generator_url: str = ""

    def resolved(self, now: float) -> bool:
        return self.ends_at <= now


def fingerprint(labels: dict) -> str:
    """The alert's identity: SHA-256 of its label pairs in name order."""
    digest = hashlib.sha256()
    for name in sorted(labels):
        digest.update(name.encode() + b"\xff" + labels[name].encode() + b"\xff")
    return digest.hexdigest()


def _unparsable(why: str) -> Refused:
    return Refused(400, f"parsing alerts body failed, because {why}")


def _text(value: str) -> str:
    return value.replace("\x00", "\ufffd")


def _strings(value, where: str) -> dict:
    """A mapping of strings (labels, annotations); None is empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _unparsable(f"{where}: expected an object of strings, got {_kind(value)}")
    for v in value.values():
        if not isinstance(v, str):
            raise _unparsable(f"{where}: expected strings, got {_kind(v)}")
    return {_text(k): _text(v) for k, v in value.items()}


def _kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number")


def _time(value, where: str) -> float | None:
    """Epoch seconds of an RFC 3339 time; None when not given (or Go's zero time)."""
    if value is None:
        return None
    if not isinstance(value, str) or not TIME.fullmatch(value):
        raise _unparsable(f"{where}: parsing time {str(value)[:64]!r}: expected RFC 3339, "
                          f"e.g. 2024-05-01T12:00:00Z")
    if value.startswith("0001-01-01T00:00:00"):
        return None
    try:
        when = datetime.fromisoformat(value.upper())
    except ValueError as e:
        raise _unparsable(f"{where}: parsing time {value[:64]!r}: {e}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def parse(body: bytes, now: float, resolve_timeout: float) -> tuple[list[Alert], list[str]]:
    """The valid alerts of ``body`` (a POST's) received at ``now``, and the messages of the
    others, as Alertmanager answers them; :class:`Refused` for a body refused whole."""
    if not body.strip():
        raise Refused(422, "alerts in body is required", 602)
    try:
        data = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as e:
        raise _unparsable(str(e)[:200]) from None
    if data is None:
        return [], []
    if not isinstance(data, list):
        raise _unparsable(f"expected an array of alerts, got {_kind(data)}")
    raw = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise _unparsable(f"alert {i}: expected an object, got {_kind(item)}")
        if item.get("labels") is None:
            raise Refused(422, f"{i}.labels in body is required", 602)
        url = item.get("generatorURL")
        if url is not None and (not isinstance(url, str) or url and not URI.fullmatch(url)):
            raise Refused(422, f"{i}.generatorURL in body must be of type uri: "
                               f"{json.dumps(str(url)[:200])}", 601)
        raw.append((_strings(item["labels"], f"alert {i}: labels"),
                    _strings(item.get("annotations"), f"alert {i}: annotations"),
                    _time(item.get("startsAt"), f"alert {i}: startsAt"),
                    _time(item.get("endsAt"), f"alert {i}: endsAt"), _text(url or "")))
    alerts, errors = [], []
    for labels, notes, starts, ends, url in raw:
        labels = {k: v for k, v in labels.items() if v}
        timeout = ends is None
        if starts is None:
            starts = now if ends is None else ends
        if ends is None:
            ends = now + resolve_timeout
        error = _invalid(labels, notes, starts, ends, url)
        if error:
            errors.append(error)
        else:
            alerts.append(Alert(fingerprint(labels), labels, notes, starts, ends, timeout,
                                url))
    return alerts, errors


def _invalid(labels: dict, notes: dict, starts: float, ends: float,
             url: str) -> str | None:
    """Why an alert is not valid (Alertmanager's ``Alert.Validate``, then the sizes a row
    holds), or None."""
    if not (math.isfinite(starts) and math.isfinite(ends)):
        return "start time missing"
    if ends < starts:
        return "start time must be before end time"
    for name in labels:
        if not NAME.fullmatch(name):
            return f"invalid label set: invalid name {json.dumps(name[:MAX_NAME])}"
    if not labels:
        return "at least one label pair required"
    for name in notes:
        if not NAME.fullmatch(name):
            return f"invalid annotations: invalid name {json.dumps(name[:MAX_NAME])}"
    if len(labels) > MAX_LABELS or len(notes) > MAX_ANNOTATIONS:
        return f"too many labels or annotations: at most {MAX_LABELS} labels and " \
               f"{MAX_ANNOTATIONS} annotations"
    if any(len(k) > MAX_NAME or len(v) > MAX_VALUE for k, v in labels.items()):
        return f"invalid label set: a name holds at most {MAX_NAME} characters, a value " \
               f"{MAX_VALUE}"
    if any(len(k) > MAX_NAME or len(v) > MAX_ANNOTATION for k, v in notes.items()):
        return f"invalid annotations: a name holds at most {MAX_NAME} characters, a value " \
               f"{MAX_ANNOTATION}"
    if len(url) > MAX_URL:
        return f"generatorURL: at most {MAX_URL} characters"
    return None


def overlaps(old: Alert, new: Alert) -> bool:
    """Whether ``new`` falls in ``old``'s activity (Alertmanager's store merges it then,
    else the new one replaces the old: another episode of the same alert)."""
    return old.starts_at < new.ends_at < old.ends_at or \
        old.starts_at < new.starts_at < old.ends_at


def merge(old: Alert, new: Alert, now: float) -> Alert:
    """``new`` (posted now) held in place of ``old``: Alertmanager's merge when they
    overlap (the earliest start; the latest explicit end while firing, the latest end of
    two resolved ones), else ``new`` as it is."""
    if not overlaps(old, new):
        return new
    merged = replace(new, starts_at=min(old.starts_at, new.starts_at))
    if new.resolved(now):
        later = old.resolved(now) and old.ends_at > new.ends_at
    else:
        later = old.ends_at > new.ends_at and not old.timeout
    if later:
        merged = replace(merged, ends_at=old.ends_at, timeout=old.timeout)
    return merged
