"""The Python API for local processes: hand the agent a notification, stat or heartbeat.

    from agent.client import Client
    with Client() as fw:                    # reads /etc/fleetwatch/agent.yaml for the endpoint
        fw.notify("backup failed: disk full", severity="error", source="backup")
        fw.stats({"backup.seconds": 312.5, "backup.bytes": 1.2e9})
        fw.register("backup", plugins=[plugin("backup_age", "check_file_age",
                                              ["-f", "/var/backups/last", "-w", "90000"])])

Every call waits for the agent's ACK (a NOTIFY or REGISTER is then in the agent's durable
spool) and returns the msg_id. No answer within ``timeout`` raises :class:`AgentUnavailable`;
an ERROR answer raises :class:`AgentError`.
"""

from __future__ import annotations

import socket
import time

import zmq

from fleetwatch import protocol

DEFAULT_CONFIG = "/etc/fleetwatch/agent.yaml"


class AgentUnavailable(Exception):
    """No agent answered on the intake endpoint in time."""


class AgentError(Exception):
    """The agent refused the message (an ERROR answer): ``status`` and ``reason``."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"agent refused the message: {status} {reason}")
        self.status, self.reason = status, reason


def endpoint_from_config(path: str) -> str:
    """The intake endpoint named by an agent config file (raises ConfigError)."""
    from agent.config import AgentConfig
    from fleetwatch import config

    return config.load(AgentConfig, path).intake_endpoint


def plugin(name: str, command: str, args=(), interval: float = 60.0,
           timeout: float = 10.0) -> dict:
    """A plugin for :meth:`Client.register`: ``command`` is a file name (or a relative path)
    inside the agent's plugin directories, run with ``args`` (no shell) every ``interval``
    seconds by the schedulers, killed after ``timeout`` seconds."""
    return _plugin_entry({"name": name, "command": command, "args": list(args),
                          "interval": interval, "timeout": timeout})


def _plugin_entry(entry) -> dict:
    from agent.plugins_config import plugin_problem
    if not isinstance(entry, dict) or "name" not in entry or "command" not in entry:
        raise ValueError("a plugin is a dict with name and command (see agent.client.plugin)")
    full = {"name": entry["name"], "command": entry["command"],
            "args": list(entry.get("args", ())), "interval": entry.get("interval", 60.0),
            "timeout": entry.get("timeout", 10.0)}
    problem = plugin_problem(full["name"], full["command"], full["args"], full["interval"],
                             full["timeout"])
    if problem:
        raise ValueError(f"plugin {str(full['name'])[:64]}: {problem[0]}: {problem[1]}")
    return full


class Client:
    """A DEALER to the local agent's intake (linger 0); not thread-safe, like its socket."""

    def __init__(self, config_path: str | None = None, endpoint: str | None = None,
                 timeout: float = 5.0, source: str | None = None,
                 ctx: zmq.Context | None = None):
        self.endpoint = endpoint or endpoint_from_config(config_path or DEFAULT_CONFIG)
        self.timeout, self.source = timeout, source
        self.ctx = ctx or zmq.Context.instance()
        self.sock: zmq.Socket | None = None

    # ---------------------------------------------------------------- API
    def notify(self, text: str, severity: str = "error", source: str | None = None) -> str:
        if severity not in protocol.SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(protocol.SEVERITIES)}")
        return self._request("NOTIFY", text=str(text), severity=severity,
                             source=source or self.source)

    def stat(self, name: str, value: float) -> str:
        return self.stats({name: value})

    def stats(self, metrics: dict) -> str:
        return self._request("STATS", metrics=dict(metrics), source=self.source)

    def heartbeat(self, name: str, interval: float | None = None) -> str:
        return self._request("HEARTBEAT", name=name, interval=interval)

    def register(self, name: str, plugins=None, heartbeat: float | None = None) -> str:
        """Declare this process as ``name``; ``plugins`` (dicts, see :func:`plugin`) are
        checks the agent then runs for it on RUN, replacing what ``name`` declared before
        (None: leave them as they are; []: declare none)."""
        entries = None if plugins is None else [_plugin_entry(p) for p in plugins]
        return self._request("REGISTER", name=name, plugins=entries, heartbeat=heartbeat)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---------------------------------------------------------------- plumbing
    def _unavailable(self) -> AgentUnavailable:
        return AgentUnavailable(f"no agent answering on {self.endpoint} "
                                f"(is `fleetwatch agent` running?)")

    def _probe(self) -> None:
        """Fail at once when an ipc endpoint has no listener (zmq would retry quietly)."""
        if not self.endpoint.startswith("ipc://"):
            return
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.endpoint[len("ipc://"):])
        except (FileNotFoundError, ConnectionRefusedError):
            raise self._unavailable() from None
        except PermissionError:
            raise AgentUnavailable(f"no permission to use {self.endpoint} (the intake is "
                                   f"mode 0600: run as the agent's user)") from None
        except OSError:
            pass  # let zmq try and time out with the usual message
        finally:
            probe.close()

    def _request(self, type_: str, **fields) -> str:
        msg = protocol.make(type_, "local", **fields)
        try:
            frames = protocol.encode(msg)
        except ValueError as e:  # NaN or infinity in a metric: not JSON
            raise ValueError(f"{type_}: {e}") from None
        if self.sock is None:
            self._probe()
            self.sock = self.ctx.socket(zmq.DEALER)
            self.sock.setsockopt(zmq.LINGER, 0)
            self.sock.connect(self.endpoint)
        self.sock.send_multipart(frames)
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(left * 1000):
                self.close()  # drop the queued request with the socket
                raise self._unavailable()
            try:
                reply = protocol.decode(self.sock.recv_multipart())
            except protocol.ProtocolError:
                continue
            if reply.type == "ACK" and msg.msg_id in reply.get("msg_ids", []):
                return msg.msg_id
            if reply.type == "ERROR" and reply.get("ref") in (None, msg.msg_id):
                raise AgentError(reply.get("status"), reply.get("reason"))
