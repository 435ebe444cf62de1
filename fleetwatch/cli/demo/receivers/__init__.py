"""The demo's alert receivers: local stand-ins for the services its channels talk to, on
127.0.0.1, keeping what they receive where a new user can read it (``DIR``), one module
each:

- ``pager`` (:mod:`.pager`): an HTTP server answering every POST as PagerDuty's Events API
  v2 does (202, ``{"status": "success", "message": "Event processed", "dedup_key": ...}``);
  each POST is a line of ``DIR/pager.jsonl`` (when, the path, the JSON body);
- ``smtp`` (:mod:`.mail`): an SMTP server (aiosmtpd, where installed: the ``test`` extra),
  each message a file ``DIR/mail/NNNNNN.eml``, answered ``250 2.0.0 Ok: queued as NNNNNN``;
- the chat and push services (Slack, ntfy, ...): each speaks its service's documented
  requests, limits and error answers, which the tests drive the channels against too, and
  keeps each message as a line of ``DIR/NAME.jsonl``.

``python -m fleetwatch.cli.demo.receivers DIR --pager PORT [--smtp PORT] [--NAME PORT]...``
runs them until SIGTERM or SIGINT. The demo starts it when no ``--alert-*`` flag says where
alerts go, writes a channel to each (:meth:`Service.demo_channel`), and ``fleetwatch alerts
--deliveries`` shows what each answered. It trusts what it is sent (a demo on loopback); it
is not a mail, pager or chat service.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import threading
from pathlib import Path

from fleetwatch.cli.demo.receivers.base import BODY_MAX, Service, reply
from fleetwatch.cli.demo.receivers.mail import Mail
from fleetwatch.cli.demo.receivers.ntfy import Ntfy
from fleetwatch.cli.demo.receivers.pager import Pager
from fleetwatch.cli.demo.receivers.slack import Slack

__all__ = ["BODY_MAX", "Mail", "Ntfy", "Pager", "RECEIVERS", "Service", "Slack", "available",
           "main", "receiver", "reply"]

#: flag -> "module:class" of each receiver the demo can run, in the order it lists them
RECEIVERS = {
    "pager": "pager:Pager",
    "smtp": "mail:Mail",
    "slack": "slack:Slack",
    "teams": "teams:Teams",
    "matrix": "matrix:Matrix",
    "discord": "discord:Discord",
    "mattermost": "mattermost:Mattermost",
    "telegram": "telegram:Telegram",
    "ntfy": "ntfy:Ntfy",
    "pushover": "pushover:Pushover",
    "opsgenie": "opsgenie:Opsgenie",
    "alertmanager": "alertmanager:Alertmanager",
}


def receiver(flag: str):
    """The receiver class of ``--FLAG``."""
    module, _, name = RECEIVERS[flag].partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def available() -> list[str]:
    """The flags of the receivers that can run here (their libraries installed)."""
    return [flag for flag in RECEIVERS if receiver(flag).available()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fleetwatch.cli.demo.receivers",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="where what is received is kept")
    for flag in RECEIVERS:
        ap.add_argument(f"--{flag}", type=int, metavar="PORT", required=flag == "pager",
                        help=receiver(flag).about or None)
    args = ap.parse_args(argv)
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    running = [(flag, receiver(flag).for_demo(directory, getattr(args, flag)))
               for flag in RECEIVERS if getattr(args, flag)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for _, r in running:
        r.start()
    print("receivers: " + "; ".join(
        f"{flag} 127.0.0.1:{getattr(args, flag)} -> "
        f"{directory / 'mail' if flag == 'smtp' else directory / (flag + '.jsonl')}"
        for flag, _ in running), flush=True)
    while not stop.wait(1.0):
        pass
    for _, r in running:
        r.stop()
    return 0
