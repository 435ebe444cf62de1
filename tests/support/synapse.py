"""A real Matrix homeserver for the tests: Synapse (pip ``matrix-synapse``) on 127.0.0.1 with
SQLite, in a directory of its own, and the few client-server and admin API calls the tests
make (users registered with the shared secret, logins, rooms, reading a room back).

The config is written here (no ``--generate-config``: the signing key is inline), its
listener the client API alone on a free port, federation and key servers off, the message,
login, join and room-creation rate limits raised for test bursts. Ready when ``GET
/_matrix/client/versions`` answers, within a deadline (about 3 s on a fresh database);
stopped with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.util
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from fleetwatch.cli.demo.ports import free_port

SERVER_NAME = "localhost"
#: the client API's prefix
CLIENT = "/_matrix/client/v3"


def available() -> bool:
    """Whether Synapse is installed in this Python (``pip install matrix-synapse``)."""
    return importlib.util.find_spec("synapse") is not None


class MatrixError(Exception):
    """A refused request: ``status`` and the answer (``errcode``, ``error``)."""

    def __init__(self, status: int, answer: dict):
        super().__init__(f"HTTP {status} {answer.get('errcode')}: {answer.get('error')}")
        self.status, self.answer = status, answer


class Synapse:
    """One homeserver in ``root`` (its config, database, media, log): :meth:`start`,
    :meth:`stop`; ``url`` its address, ``started_in`` the seconds its start took."""

    def __init__(self, root: Path, python: str = sys.executable):
        self.root, self.python = Path(root), python
        self.port, self.url, self.proc = 0, "", None
        self.secret = secrets.token_hex(16)
        self.log = self.root / "synapse.log"
        self.started_in = 0.0

    def config(self) -> dict:
        seed = base64.b64encode(os.urandom(32)).decode().rstrip("=")
        high = {"per_second": 1000, "burst_count": 1000}
        return {
            "server_name": SERVER_NAME,
            "pid_file": str(self.root / "homeserver.pid"),
            "listeners": [{"port": self.port, "bind_addresses": ["127.0.0.1"], "type": "http",
                           "tls": False, "x_forwarded": False,
                           "resources": [{"names": ["client"], "compress": False}]}],
            "database": {"name": "sqlite3", "args": {"database": str(self.root / "hs.db")}},
            "media_store_path": str(self.root / "media"),
            "signing_key": f"ed25519 a_test {seed}",
            "registration_shared_secret": self.secret,
            "macaroon_secret_key": secrets.token_hex(16),
            "form_secret": secrets.token_hex(16),
            "report_stats": False,
            "enable_metrics": False,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "federation_domain_whitelist": [],
            "presence": {"enabled": False},
            "url_preview_enabled": False,
            "rc_message": high,
            "rc_login": {"address": high, "account": high, "failed_attempts": high},
            "rc_joins": {"local": high, "remote": high},
            "rc_room_creation": high,
            "rc_invites": {"per_room": high, "per_user": high, "per_issuer": high},
        }

    def start(self, timeout: float = 60.0) -> "Synapse":
        self.root.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        for attempt in range(3):        # the free port may be taken before Synapse binds it
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            path = self.root / "homeserver.yaml"
            path.write_text(json.dumps(self.config(), indent=1))   # JSON is YAML
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.python, "-m", "synapse.app.homeserver", "-c", str(path)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    cwd=self.root, start_new_session=True)
            if self._ready(began + timeout):
                self.started_in = time.monotonic() - began
                return self
            if attempt == 2 or "Address already in use" not in self.tail():
                self.stop()
                raise RuntimeError(f"Synapse did not answer in {timeout:g} s:\n{self.tail()}")
        return self

    def _ready(self, deadline: float) -> bool:
        """Poll ``/versions`` until it answers (True) or the process exits (False); a
        RuntimeError past ``deadline``."""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/_matrix/client/versions",
                                            timeout=2) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"Synapse not ready in time:\n{self.tail()}")

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    # ------------------------------------------------------------ the APIs the tests use
    def call(self, method: str, path: str, token: str | None = None, body=None,
             query: dict | None = None) -> dict:
        """``method`` ``path`` (under the server) with JSON ``body``; the JSON answer, or a
        :class:`MatrixError`."""
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {token}"} if token else {})})
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            answer = json.loads(e.read() or b"{}")
            e.close()
            raise MatrixError(e.code, answer) from None

    def register(self, user: str, password: str, admin: bool = False) -> dict:
        """A user made through the admin API with the shared secret; its ``user_id`` and
        first ``access_token``."""
        nonce = self.call("GET", "/_synapse/admin/v1/register")["nonce"]
        mac = hmac.new(self.secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), user.encode(), password.encode(),
                                 b"admin" if admin else b"notadmin"]))
        return self.call("POST", "/_synapse/admin/v1/register", body={
            "nonce": nonce, "username": user, "password": password, "admin": admin,
            "mac": mac.hexdigest()})

    def login(self, user: str, password: str) -> str:
        """A new access token (a new device) of ``user``."""
        return self.call("POST", f"{CLIENT}/login", body={
            "type": "m.login.password", "identifier": {"type": "m.id.user", "user": user},
            "password": password})["access_token"]

    def logout(self, token: str) -> None:
        self.call("POST", f"{CLIENT}/logout", token, {})

    def create_room(self, token: str, name: str = "ops") -> str:
        """A public room of ``token``'s user (its creator, power level 100); its ID."""
        return self.call("POST", f"{CLIENT}/createRoom", token,
                         {"preset": "public_chat", "name": name})["room_id"]

    def join(self, token: str, room: str) -> None:
        self.call("POST", f"{CLIENT}/join/{urllib.parse.quote(room, safe='')}", token, {})

    def messages(self, token: str, room: str, limit: int = 100) -> list[dict]:
        """The room's ``m.room.message`` events, oldest first."""
        chunk = self.call("GET", f"{CLIENT}/rooms/{urllib.parse.quote(room, safe='')}"
                                 f"/messages", token, query={"dir": "b", "limit": limit})
        return [e for e in reversed(chunk["chunk"]) if e["type"] == "m.room.message"]

    def notifications(self, token: str) -> list[dict]:
        """What the push rules made of events for ``token``'s user (``highlight``: a
        mention, @room included), newest first."""
        return self.call("GET", f"{CLIENT}/notifications", token,
                         query={"limit": 100})["notifications"]

    def limit(self, admin_token: str, user_id: str, per_second: int, burst: int) -> None:
        """``user_id``'s own message rate limit (the admin API)."""
        self.call("POST", f"/_synapse/admin/v1/users/{urllib.parse.quote(user_id)}"
                          f"/override_ratelimit", admin_token,
                  {"messages_per_second": per_second, "burst_count": burst})
