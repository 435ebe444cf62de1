"""What the channel integration tests (tests/integration/test_slack.py, test_ntfy.py, ...)
share to drive the real deliverer: a delivery config that retries fast (:func:`fast`, for
the ``deliverers`` fixture of tests/conftest.py to run), alert events into the outbox
(:func:`enqueue`), the deliveries read back as ``fleetwatch alerts --deliveries --json``
has them (:func:`recorded`, :func:`sent`), the event of ``check_disk`` on ``web-1``
(:func:`check_event`) and a secret in a file of the test's directory (:func:`secret_file`).

Plain functions: each test module's fixtures call them with what is its own (its channels,
its routing, its file names)."""

from __future__ import annotations

import time
from pathlib import Path

from fleetwatch.actions.alerts import deliveries, delivery_document
from fleetwatch.config import build
from sinks.alerting.delivery import store as outbox
from sinks.alerting.delivery.config import DeliveryConfig

#: the agent every check event is of (``web-1``)
U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
#: retries a test waits out in well under a second
FAST_RETRY = {"initial": 0.05, "max": 0.2, "max_age": 60, "jitter": 0.2}


def fast(channels: dict, kinds: list[str] | None = None, **settings) -> DeliveryConfig:
    """The delivery config of ``channels`` with fast retries (:data:`FAST_RETRY`), a poll
    every 0.05 s and a 30 s lease: every alert (only those of ``kinds``, where given) routed
    to the first of ``channels``. ``settings``: more delivery settings, or others than
    these (``console_url``, ``lease``...)."""
    rule = {"channels": [next(iter(channels))]}
    if kinds is not None:
        rule = {"kind": list(kinds), **rule}
    return build(DeliveryConfig, {
        "channels": channels, "rules": [rule], "retry": dict(FAST_RETRY),
        "poll_interval": 0.05, "lease": 30, **settings})


def filled_in(channels: dict, field: str, placeholder: str, value: str) -> dict:
    """``channels`` with ``value`` for ``field`` where a channel has ``placeholder`` there
    (a test names a file of the fixture's, ``"token_file": "TOKEN"``, before it exists)."""
    return {name: {**c, field: value} if c.get(field) == placeholder else c
            for name, c in channels.items()}


def secret_file(directory: Path, name: str, secret: str) -> str:
    """The path of the file ``name`` in ``directory`` (the test's ``tmp_path``), written
    with ``secret`` and a newline, as a token file of a channel is."""
    path = directory / name
    path.write_text(secret + "\n")
    return str(path)


def enqueue(eng, config: DeliveryConfig, *events: dict) -> None:
    """``events`` into the outbox of ``eng``, routed by ``config``, in one transaction."""
    with eng.begin() as conn:
        for ev in events:
            outbox.enqueue(conn, ev, config)


def recorded(eng) -> list[dict]:
    """Every delivery attempt, oldest first, as ``fleetwatch alerts --deliveries --json``
    has it."""
    url = eng.url.render_as_string(hide_password=False)
    return list(reversed(delivery_document(*deliveries(url, None))["deliveries"]))


def sent(eng) -> list[dict]:
    """The deliveries sent, oldest first."""
    return [d for d in recorded(eng) if d["outcome"] == "sent"]


def check_event(action: str = "trigger", **fields) -> dict:
    """The alert event ``action`` of ``check_disk`` on ``web-1`` (:data:`U1`): CRITICAL,
    exit status 2, ``ok`` once resolved; ``fields`` set any of its fields instead."""
    return {"key": f"{U1}/check/check_disk", "kind": "check", "action": action,
            "severity": {"trigger": "critical", "resolve": "ok"}.get(action, "critical"),
            "uuid": U1, "hostname": "web-1", "check": "check_disk", "status": 2,
            "summary": "DISK CRITICAL - / 95%", "text": "/ 95% used", "created": time.time(),
            **fields}


def host_check_event(action: str = "trigger", host: str = "web-1", **fields) -> dict:
    """:func:`check_event` on ``host``, keyed by its host too: a group of hosts' alerts is
    one alert a host."""
    return check_event(action, key=f"{U1}/check/check_disk/{host}", hostname=host, **fields)
