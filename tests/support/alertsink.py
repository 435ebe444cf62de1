"""Alerting sinks as objects in this process, on a fake clock over a real state database, and
what the alert lifecycle's tests feed them and read back: an agent's messages as a router
relays them, its HELLO through a real registry sink, the alert events of one key and the rows
of a state table, a ``fleetwatch`` command run in-process on the same clock; and, for the
same tests with real processes, check plugins that fail until told otherwise.

Most tests watch one agent, ``WEB`` (hostname ``web-1``), from ``T0`` on. ``sink`` builds
its config from the settings it is given and nothing else: ``QUICK`` are the ones most
tests start from.
"""

from __future__ import annotations

import contextlib
import io
import stat
import time
from pathlib import Path

from fleetwatch import cli, protocol
from fleetwatch.config import build
from fleetwatch.protocol import Relayed
from sinks.alerting.config import AlertingConfig
from sinks.alerting.sink import AlertingSink
from sinks.registry import RegistrySink
from fleetwatch.store import db, reads, schema

WEB = "a1" * 16
T0 = 1_700_000_000.0
LOAD = f"{WEB}/check/load"

#: A problem is HARD at its first non-OK result, and no check flaps.
QUICK = {"max_check_attempts": 1, "flap_detection": False}


def sink(url, clock, *, ancestors=None, tz=None, **settings) -> AlertingSink:
    """An alerting sink on ``clock`` over the database at ``url``, started, that delivers
    nothing (its events are recorded only). ``settings`` are its config's (the alerting
    section of a sink config); ``ancestors`` and ``tz`` go to the sink as they are."""
    config = build(AlertingConfig, settings, "sink.yaml", "alerting")
    s = AlertingSink(db.engine(url), clock, config, deliver=False, ancestors=ancestors, tz=tz)
    s.start()
    return s


def msg(type_, uuid=WEB, router="r1", **fields) -> Relayed:
    """A ``type_`` message of agent ``uuid`` with ``fields``, as ``router`` relays it."""
    return Relayed(uuid, router, protocol.make(type_, uuid, **fields))


def beat(uuid=WEB) -> Relayed:
    """A HEARTBEAT of agent ``uuid`` (every second)."""
    return msg("HEARTBEAT", uuid, interval=1.0)


def result(status, started, plugin="load", uuid=WEB) -> Relayed:
    """A RESULT of check ``plugin`` of agent ``uuid``: ``status``, run at ``started``."""
    return msg("RESULT", uuid, command_id=f"s:{plugin}{int(started * 10)}", plugin=plugin,
               status=status, output=f"{plugin} status {status}", started=started)


def hello(url, hosts=None, clock=time.time, plugins=(), **fields):
    """A real registry sink on ``clock`` records one batch: the HELLO (with ``fields``) of
    each of ``hosts`` ({uuid: hostname}, ``WEB`` as web-1 when None), then, when
    ``plugins`` are given, each one's REGISTER of them."""
    hosts = hosts or {WEB: "web-1"}
    batch = [msg("HELLO", uuid, hostname=name, heartbeat=1.0, **fields)
             for uuid, name in hosts.items()]
    if plugins:
        batch += [msg("REGISTER", uuid, name="agent", plugins=list(plugins)) for uuid in hosts]
    registry = RegistrySink(db.engine(url), clock)
    registry.start()
    registry.write(batch)
    registry.close()


def rows(url, table) -> list[dict]:
    """Every row of state table ``table``, by id (or by its first primary key column)."""
    eng = db.engine(url, writer=False)
    try:
        with eng.connect() as conn:
            t = schema.metadata.tables[table]
            order = t.c.id if "id" in t.c else list(t.primary_key.columns)[0]
            return [dict(r._mapping) for r in conn.execute(t.select().order_by(order))]
    finally:
        eng.dispose()


def alert_events(url, key=LOAD) -> list[dict]:
    """Every alert event of ``key`` (as ``fleetwatch alerts`` reads them), oldest first."""
    eng = db.engine(url, writer=False)
    try:
        with eng.connect() as conn:
            return [e for e in reversed(reads.alert_events(conn, limit=1000))
                    if e["key"] == key]
    finally:
        eng.dispose()


def told(url, key=LOAD) -> list[str]:
    """The actions of every alert event of ``key``, oldest first."""
    return [e["action"] for e in alert_events(url, key)]


def command(name, op, clock, *argv) -> tuple[int, str]:
    """``fleetwatch NAME ARGV --config OP`` in-process on ``clock``: (exit status, stdout)."""
    module, _ = cli.entry(name)
    out = io.StringIO()
    args = cli.parser_for(name).parse_args([*argv, "--config", str(op)])
    with contextlib.redirect_stdout(out):
        code = module.run(args, clock)
    return code, out.getvalue()


def failing_plugins(fleet, names) -> tuple[Path, dict[str, Path]]:
    """For an agent with real processes: ``check_NAME`` per name in the fleet's plugin
    folder, CRITICAL until the file ``NAME.state`` says OK. (folder, {name: that file})."""
    folder = fleet.root / "plugins"
    folder.mkdir(exist_ok=True)
    flags = {}
    for name in names:
        flag = fleet.root / f"{name}.state"
        flag.write_text("CRITICAL")
        script = folder / f"check_{name}"
        script.write_text("#!/bin/sh\n"
                          f"if [ \"$(cat '{flag}')\" = OK ]; then echo '{name} OK'; exit 0; fi\n"
                          f"echo '{name} CRITICAL - on fire'; exit 2\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        flags[name] = flag
    return folder, flags
