"""Start real fleetwatch processes for integration tests, on 127.0.0.1 with ephemeral ports.

Routers bind ``tcp://127.0.0.1:*`` and write their bound endpoints to a ready file, which is
how the tests learn the ports: no fixed ports, no port-picking races. Every process runs
``python -m fleetwatch ...`` with its log in the test's directory; :class:`Fleet` stops them
all (SIGTERM, then SIGKILL) and prints their logs when a test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import yaml


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02, what="condition"):
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` passes (then fail).
    ``what`` names the wait; a callable is asked at the failure (what was last seen)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {said}")
        time.sleep(interval)


def intake_path(fleet, name: str = "agent") -> Path:
    """Where agent ``name`` of ``fleet`` listens for local processes (its state directory's
    intake socket)."""
    return fleet.root / f"{name}-state" / "intake.sock"


def wait_intake(path: Path, timeout: float = 15.0, what: str = "the agent's intake") -> None:
    """Wait until the agent's intake socket at ``path`` (:func:`intake_path`) accepts a
    connection. Its file exists
    from zmq's bind(), a moment before its listen(): a client in between is refused (and
    ``agent.client`` then says no agent answers), which a loaded machine makes happen."""
    import socket

    def accepts() -> bool:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
            return True
        except OSError:
            return False
        finally:
            probe.close()
    wait_for(accepts, timeout, 0.02, what)


class Proc:
    """One fleetwatch process started by a test."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None):
        self.name, self.argv, self.log_path = name, argv, log
        self._log = open(log, "ab")
        self.popen = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      env={**os.environ, **(env or {})}, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.popen.pid, sig)

    def stop(self, timeout: float = 5.0) -> int | None:
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()
        return self.popen.returncode

    def kill(self) -> None:
        if self.alive():
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(5)


class Fleet:
    """A directory of configs and logs, and the processes started from them."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.procs: list[Proc] = []
        self.state_url = f"sqlite:///{self.root / 'state.db'}"

    # ---------------------------------------------------------------- generic
    def write(self, name: str, data: dict) -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def start(self, name: str, *args: str, env: dict | None = None) -> Proc:
        argv = [sys.executable, "-m", "fleetwatch", *args]
        proc = Proc(name, argv, self.root / f"{name}.log", env)
        self.procs.append(proc)
        return proc

    def cli(self, *args: str, timeout: float = 30.0, check: bool = True,
            input: str | None = None) -> subprocess.CompletedProcess:
        """Run a short-lived ``fleetwatch`` command and return its result."""
        res = subprocess.run([sys.executable, "-m", "fleetwatch", *args], capture_output=True,
                             text=True, timeout=timeout, input=input)
        if check and res.returncode != 0:
            raise AssertionError(f"fleetwatch {' '.join(args)} exited {res.returncode}:\n"
                                 f"{res.stdout}\n{res.stderr}")
        return res

    def db_rows(self, sql: str, args=()) -> list[tuple]:
        """Rows of ``sql`` in the sinks' SQLite state database: none before the database or
        the queried table of the sinks' schema exists; any other SQL error raises."""
        path = self.root / "state.db"
        if not path.exists():
            return []
        conn = sqlite3.connect(path, timeout=5)
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as e:
            if _not_created_yet(e):
                return []
            raise                               # a misspelt table or column is a test bug
        finally:
            conn.close()

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"----- {p.name} (pid {p.pid}) -----\n{p.log()[-6000:]}"
                         for p in self.procs)

    # ---------------------------------------------------------------- routers
    def router(self, name: str = "router-1", peers: list[str] = (),
               sink_types: tuple[str, ...] = ("registry", "alerting", "graphite", "history"),
               **extra) -> dict:
        """Start a router on ephemeral ports, a PUSH for each of ``sink_types`` (the default
        routes go to those); return its ready-file data (bound endpoints)."""
        ready = self.root / f"{name}.ready.json"
        ready.unlink(missing_ok=True)
        cfg = {
            "id": name,
            "bind": {
                "agents": "tcp://127.0.0.1:*",
                "control": "tcp://127.0.0.1:*",
                "tail": "tcp://127.0.0.1:*",
                "sinks": {t: "tcp://127.0.0.1:*" for t in sink_types},
            },
            "peers": list(peers),
            "ready_file": str(ready),
            "stats_interval": 1.0,
            **extra,
        }
        path = self.write(f"{name}.yaml", cfg)
        proc = self.start(name, "router", "--config", str(path))
        wait_for(lambda: ready.exists() or not proc.alive(), 15, what=f"{name} ready file")
        assert proc.alive(), f"{name} died at start:\n{proc.log()}"
        info = json.loads(ready.read_text())
        info["proc"] = proc
        return info

    # ---------------------------------------------------------------- sinks
    def sink(self, type_: str, routers: list[dict], name: str | None = None, **extra) -> Proc:
        name = name or f"sink-{type_}"
        cfg = {"routers": [r["endpoints"]["control"] for r in routers],
               "state_url": self.state_url, "name": name, "hello_interval": 0.2, **extra}
        path = self.write(f"{name}.yaml", cfg)
        return self.start(name, "sink", type_, "--config", str(path))

    # ---------------------------------------------------------------- agents
    def agent_config(self, routers: list[dict], name: str = "agent", **extra) -> Path:
        state = self.root / f"{name}-state"
        state.mkdir(exist_ok=True)
        cfg = {"routers": [r["endpoints"]["agents"] for r in routers],
               "state_dir": str(state), "hostname": f"{name}-host",
               "heartbeat_interval": 0.3, "stats_interval": 1.0,
               "reconnect_min": 0.1, "reconnect_max": 1.0,
               "spool": {"ack_timeout": 0.5, "max_backoff": 2.0}, **extra}
        return self.write(f"{name}.yaml", cfg)

    def agent(self, routers: list[dict], name: str = "agent", **extra) -> Proc:
        path = self.agent_config(routers, name, **extra)
        return self.start(name, "agent", "--config", str(path))

    def operator_config(self, routers: list[dict]) -> Path:
        return self.write("fleetwatch.yaml", {
            "routers": [r["endpoints"]["control"] for r in routers],
            "state_url": self.state_url, "timeout": 1.0})

    def alerts(self, operator: Path) -> list[dict]:
        """Every alert, newest first, as ``fleetwatch alerts --json --limit 0`` lists them."""
        res = self.command("alerts", "--config", str(operator), "--json", "--limit", "0")
        return json.loads(res.stdout)["alerts"]

    def status(self, operator: Path, check: bool = True) -> dict:
        """What ``fleetwatch status --json`` prints (agents, checks, routers); with ``check``,
        every router must have answered (exit status 0)."""
        return json.loads(self.command("status", "--config", str(operator), "--json",
                                       check=check).stdout)

    def command(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``fleetwatch ARGS`` run in this process (``fleetwatch.cli.main``), its output
        captured: what :meth:`cli` gives, for the reads tests poll (``status``, ``alerts``),
        which as processes cost about 0.4 CPU-seconds each on the suite's two cores, most of
        it Python starting. A claim about the process itself (its exit status on a signal,
        what it logs) uses :meth:`cli`."""
        import contextlib
        import io

        from fleetwatch.cli import main
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:     # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 2
        res = subprocess.CompletedProcess(["fleetwatch", *args], code, out.getvalue(),
                                          err.getvalue())
        if check and code != 0:
            raise AssertionError(f"fleetwatch {' '.join(args)} exited {code}:\n"
                                 f"{res.stdout}\n{res.stderr}")
        return res

    # ---------------------------------------------------------------- schedulers
    def scheduler_config(self, routers: list[dict], name: str = "scheduler", **extra) -> Path:
        return self.write(f"{name}.yaml", {
            "routers": [r["endpoints"]["control"] for r in routers], "id": name,
            "state_url": self.state_url, "refresh_interval": 0.5, "hello_interval": 0.2,
            "stats_interval": 1.0, **extra})

    def scheduler(self, routers: list[dict], name: str = "scheduler", **extra) -> Proc:
        path = self.scheduler_config(routers, name, **extra)
        return self.start(name, "scheduler", "--config", str(path))


@contextlib.contextmanager
def module_fleet(tmp_path_factory, name: str):
    """A :class:`Fleet` for a module-scoped fixture, in a directory ``name`` of its own: its
    processes' logs printed when the fixture fails (the ``fleet`` fixture prints them for a
    failed test), every process stopped at the end."""
    fleet = Fleet(tmp_path_factory.mktemp(name))
    try:
        yield fleet
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        fleet.stop_all()


def agent_uuid_for(fleet: Fleet, name: str = "agent") -> str:
    """Create (or read) the uuid agent ``name`` will have, so that a key can be bound to it
    before the agent starts (as the demo does)."""
    from agent import identity
    return identity.load_or_create(str(fleet.root / f"{name}-state"))


def _not_created_yet(error: sqlite3.OperationalError) -> bool:
    """Whether ``error`` names a table of the sinks' schema that no sink has created yet."""
    from fleetwatch.store import schema
    prefix = "no such table: "
    text = str(error)
    return text.startswith(prefix) and text[len(prefix):] in schema.metadata.tables


def landed(lake: Path) -> list[dict]:
    """Every line in the landing area (open files too, done/ too), last partial one skipped."""
    out = []
    for directory in (lake / "landing", lake / "landing" / "done"):
        if not directory.is_dir():
            continue
        for p in directory.iterdir():
            if p.is_file():
                for line in p.read_bytes().split(b"\n"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    return out


def refused_twice(proc: Proc, path: Path, broken: list[tuple[str, str]]) -> None:
    """Write each ``(text, reason)`` of ``broken`` to the config ``path`` in turn and send
    ``proc`` SIGHUP: each reload is refused, with ``reason`` in its log."""
    for n, (text, reason) in enumerate(broken, 1):
        path.write_text(text)
        proc.signal(signal.SIGHUP)
        wait_for(lambda: proc.log().count("config reload failed") == n, 10,
                 what=f"refused reload {n}")
        assert reason in proc.log()
