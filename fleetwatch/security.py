"""CURVE for every TCP socket of the fleet: certificates, allowlists and the ZAP decision.

Certificates are zmq.auth's ZPL files (``NAME.key`` public, ``NAME.key_secret`` secret), with
the role (``router``, ``agent``, ``backend``) and, for agents, the uuid in their metadata. All
the routers of a fleet present one server certificate (``fleetwatch keys new router fleet
DIR``); agents and back-ends verify it. A router admits an agent key only on its ``agents``
socket and only for the uuid in that key's certificate; back-end keys (sinks, schedulers, the
CLI) only on ``control``, ``tail`` and the sink sockets.

Pure logic and file handling; the sockets are configured by :func:`server` and
:func:`client`, and the router answers ZAP requests with :class:`Gatekeeper`.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from fleetwatch.config import setting

log = logging.getLogger(__name__)

ROLES = ("router", "agent", "backend", "site")
#: ZAP domains the router's server sockets declare, and the role each admits (``sites``: a
#: central router's, where site routers link, SPEC 4.10)
DOMAINS = {"agents": "agent", "backends": "backend", "sites": "site"}
#: other roles a domain admits too: the routers of the mesh on `control` (SPEC 4.9)
ALSO_ADMITTED = {"backends": ("router",)}
PUBLIC_SUFFIX, SECRET_SUFFIX = ".key", ".key_secret"
_KEY = re.compile(rb'^\s*(public|secret)-key\s*=\s*"?([^"\s]+)"?\s*$')
_META = re.compile(r"^\s+([A-Za-z0-9_-]+)\s*=\s*\"?([^\"]*)\"?\s*$")


class SecurityError(Exception):
    """A key that cannot be used; ``str()`` is one line for the operator."""


# ---------------------------------------------------------------- configuration

@dataclass(frozen=True)
class ServerSecurity:
    """A router's ``security`` section."""

    curve: bool = setting(False, "CURVE on every socket (true in production)")
    server_key: str = setting("", "the routers' SECRET certificate (keys new router ...)")
    agent_keys: str = setting("", "directory of agent PUBLIC certificates allowed on `agents`")
    backend_keys: str = setting("", "directory of back-end PUBLIC certificates allowed on "
                                    "`control`, `tail` and the sink sockets")
    routers: str = setting("", "directory of router PUBLIC certificates allowed to join this "
                               "router's mesh (MEMBERS on `control`, SPEC 4.9); empty: none")
    sites: str = setting("", "directory of site PUBLIC certificates allowed on `sites` (site "
                             "routers' uplinks, SPEC 4.10; each key's name is its site's "
                             "id); required with `bind.sites`")

    def validate(self):
        if self.curve:
            for name in ("server_key", "agent_keys", "backend_keys"):
                if not getattr(self, name):
                    raise ValueError(f"{name}: required when curve is true")


@dataclass(frozen=True)
class ClientSecurity:
    """The ``security`` section of an agent, a sink or the operator config."""

    curve: bool = setting(False, "CURVE on every TCP socket (true in production)")
    key: str = setting("", "this process's SECRET certificate (keys new agent|backend ...)")
    router_key: str = setting("", "the routers' PUBLIC certificate")

    def validate(self):
        if self.curve:
            for name in ("key", "router_key"):
                if not getattr(self, name):
                    raise ValueError(f"{name}: required when curve is true")


# ---------------------------------------------------------------- certificates

@dataclass(frozen=True)
class Certificate:
    path: str
    public: bytes                   # Z85, 40 bytes
    secret: bytes | None            # Z85, or None in a public certificate
    metadata: dict[str, str]

    @property
    def role(self) -> str:
        return self.metadata.get("role", "")

    @property
    def name(self) -> str:
        return self.metadata.get("name", "")

    @property
    def uuid(self) -> str:
        return self.metadata.get("uuid", "")


def write_certificates(directory: str, name: str, metadata: dict[str, str]) -> tuple[str, str]:
    """Create ``name.key`` (0644) and ``name.key_secret`` (0600) in ``directory``.

    Refuses to overwrite: a key is rotated by making a new one under a new name.
    """
    import zmq
    os.makedirs(directory, mode=0o750, exist_ok=True)
    public_path = os.path.join(directory, name + PUBLIC_SUFFIX)
    secret_path = os.path.join(directory, name + SECRET_SUFFIX)
    for path in (public_path, secret_path):
        if os.path.exists(path):
            raise SecurityError(f"{path} exists already (pick another name to rotate a key)")
    public, secret = zmq.curve_keypair()
    _write(public_path, "Public", metadata, public, None, 0o644)
    _write(secret_path, "**Secret**", metadata, public, secret, 0o600)
    return public_path, secret_path


def _write(path: str, kind: str, metadata: dict, public: bytes, secret: bytes | None,
           mode: int) -> None:
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lines = [f"#   ****  Generated on {stamp} by fleetwatch  ****",
             f"#   ZeroMQ CURVE {kind} Certificate", "", "metadata"]
    lines += [f'    {k} = "{v}"' for k, v in metadata.items()]
    lines += ["curve", f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, mode)            # whatever the umask


def key_hint(public: bytes | str) -> str:
    """What a log may show of a public key (Z85 text or bytes): its first 8 characters."""
    text = public.decode("ascii", "replace") if isinstance(public, bytes) else public
    return text[:8] + "..."


def read_certificate(path: str, need_secret: bool = False) -> Certificate:
    """Parse a ZPL certificate; a missing, unreadable or keyless file is a SecurityError."""
    try:
        with open(path, "rb") as f:
            data = f.read(65536)
    except FileNotFoundError:
        raise SecurityError(f"{path}: no such certificate") from None
    except OSError as e:
        raise SecurityError(f"{path}: cannot be read: {e.strerror}") from None
    keys: dict[str, bytes] = {}
    metadata: dict[str, str] = {}
    section = ""
    for raw in data.splitlines():
        if raw.startswith(b"#") or not raw.strip():
            continue
        if not raw[:1].isspace():
            section = raw.strip().decode("ascii", "replace")
            continue
        m = _KEY.match(raw)
        if m and section == "curve":
            keys[m.group(1).decode()] = m.group(2)
            continue
        if section == "metadata":
            mm = _META.match(raw.decode("utf-8", "replace"))
            if mm:
                metadata[mm.group(1)] = mm.group(2)
    public = keys.get("public")
    if public is None or len(public) != 40:
        raise SecurityError(f"{path}: not a CURVE certificate (no 40-character public-key)")
    secret = keys.get("secret")
    if secret is not None and len(secret) != 40:
        raise SecurityError(f"{path}: malformed secret-key")
    if need_secret and secret is None:
        raise SecurityError(f"{path}: holds no secret key (give the {SECRET_SUFFIX} file)")
    return Certificate(str(path), public, secret, metadata)


# ---------------------------------------------------------------- allowlists

@dataclass(frozen=True)
class Allowed:
    """One admitted key: what it may be and, for an agent, which uuid it speaks for."""

    role: str
    name: str
    uuid: str
    path: str


class Keyring:
    """Public key -> :class:`Allowed`, read from the agent and back-end key directories.

    :meth:`refresh` re-reads a directory when its listing or a file in it changed, so an
    operator adds or removes a key by adding or removing a file (or sends SIGHUP).
    """

    def __init__(self, agent_dir: str, backend_dir: str, router_dir: str = "",
                 site_dir: str = ""):
        self.dirs = {"agent": agent_dir, "backend": backend_dir}
        if site_dir:        # the site routers that may link (SPEC 4.10)
            self.dirs["site"] = site_dir
        if router_dir:      # the routers that may join the mesh (SPEC 4.9), last: a key
            self.dirs["router"] = router_dir        # in both is a router's
        self.keys: dict[bytes, Allowed] = {}
        self._stamp: dict[str, tuple] = {}
        self.problems: list[str] = []

    def refresh(self, force: bool = False) -> bool:
        """Reload if anything changed (or ``force``); return whether the keys changed."""
        stamps = {role: _dir_stamp(d) for role, d in self.dirs.items()}
        if not force and stamps == self._stamp:
            return False
        keys, problems = {}, []
        for role, directory in self.dirs.items():
            for path in sorted(Path(directory).glob("*" + PUBLIC_SUFFIX)):
                try:
                    cert = read_certificate(str(path))
                except SecurityError as e:
                    problems.append(str(e))
                    continue
                if cert.role and cert.role != role:
                    problems.append(f"{path}: a {cert.role} key in the {role} directory: ignored")
                    continue
                if role == "agent" and not cert.uuid:
                    problems.append(f"{path}: agent key without a uuid in its metadata: ignored")
                    continue
                keys[cert.public] = Allowed(role, cert.name or path.stem, cert.uuid, str(path))
        changed = keys != self.keys
        self.keys, self._stamp, self.problems = keys, stamps, problems
        for p in problems:
            log.warning("keys: %s", p)
        if changed:
            log.info("keys: %d agent, %d back-end, %d router and %d site keys allowed",
                     sum(a.role == "agent" for a in keys.values()),
                     sum(a.role == "backend" for a in keys.values()),
                     sum(a.role == "router" for a in keys.values()),
                     sum(a.role == "site" for a in keys.values()))
        return changed


def _dir_stamp(directory: str) -> tuple:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return ()
    return tuple((e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in entries
                 if e.name.endswith(PUBLIC_SUFFIX))


# ---------------------------------------------------------------- ZAP

@dataclass(frozen=True)
class Verdict:
    status: bytes           # b"200" or b"400"
    text: bytes
    user_id: bytes          # b"agent:UUID" or b"backend:NAME" when admitted
    reason: str = ""        # counter name when refused


class Gatekeeper:
    """The router's ZAP decisions (RFC 27), fed the request frames; no sockets here.

    Agents' keys are admitted on the ``agents`` domain only, with User-Id ``agent:UUID``
    (the router then checks, at a connection's first HELLO, that it claims that uuid);
    back-end keys on the ``backends`` domain only, with User-Id ``backend:NAME``.
    """

    def __init__(self, keyring: Keyring):
        self.keyring = keyring

    def decide(self, frames: list[bytes]) -> tuple[list[bytes] | None, Verdict]:
        """The reply frames for a ZAP request (None if it cannot be answered) and why."""
        if len(frames) < 6:
            verdict = Verdict(b"400", b"malformed ZAP request", b"", "zap_malformed")
            return ([b"1.0", frames[1], verdict.status, verdict.text, b"", b""]
                    if len(frames) > 1 else None), verdict
        version, request_id, domain, _address, _identity, mechanism = frames[:6]
        verdict = self._verdict(domain, mechanism, frames[6:])
        return [b"1.0", request_id, verdict.status, verdict.text, verdict.user_id, b""], verdict

    def _verdict(self, domain: bytes, mechanism: bytes, credentials: list[bytes]) -> Verdict:
        role = DOMAINS.get(domain.decode("ascii", "replace"))
        if role is None:
            return Verdict(b"400", b"unknown domain", b"", "unknown_domain")
        if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
            return Verdict(b"400", b"CURVE required", b"", "not_curve")
        from zmq.utils import z85
        allowed = self.keyring.keys.get(z85.encode(credentials[0]))
        if allowed is None:
            return Verdict(b"400", b"unknown key", b"", "unknown_key")
        if allowed.role != role and allowed.role not in ALSO_ADMITTED.get(domain.decode(), ()):
            return Verdict(b"400", f"a {allowed.role} key is not accepted here".encode(), b"",
                           f"{allowed.role}_key_on_{domain.decode()}")
        ident = allowed.uuid if allowed.role == "agent" else allowed.name
        return Verdict(b"200", b"OK", f"{allowed.role}:{ident}".encode())


# ---------------------------------------------------------------- sockets

def server(sock, cert: Certificate, domain: str) -> None:
    """Make ``sock`` a CURVE server with ``cert`` whose clients ZAP checks in ``domain``."""
    sock.curve_server = True
    sock.curve_secretkey = cert.secret
    sock.curve_publickey = cert.public
    sock.zap_domain = domain.encode()


def client(sock, own: Certificate, router: Certificate) -> None:
    """Make ``sock`` a CURVE client presenting ``own`` and trusting ``router``."""
    sock.curve_secretkey = own.secret
    sock.curve_publickey = own.public
    sock.curve_serverkey = router.public


class ClientKeys:
    """The certificates a client process needs, loaded (and checked) once at start."""

    def __init__(self, cfg: ClientSecurity):
        self.enabled = cfg.curve
        self.own = self.router = None
        if cfg.curve:
            self.own = read_certificate(cfg.key, need_secret=True)
            self.router = read_certificate(cfg.router_key)
            _check_private(cfg.key)

    def apply(self, sock) -> None:
        """CURVE client options on ``sock`` (nothing when curve is off)."""
        if self.enabled:
            client(sock, self.own, self.router)


def _check_private(path: str) -> None:
    mode = os.stat(path).st_mode & 0o077
    if mode:
        log.warning("%s is readable by group or others (mode %o): chmod 600 it",
                    path, os.stat(path).st_mode & 0o777)


def check_own(keys: ClientKeys, role: str, uuid: str = "") -> None:
    """Refuse at start a key the routers would refuse: the wrong role, another uuid.

    Raises :class:`SecurityError` (one line; the command exits 78). Certificates without
    a role in their metadata (made by other tools) are taken as they are.
    """
    if not keys.enabled:
        return
    own, router = keys.own, keys.router
    if own.role and own.role != role:
        raise SecurityError(f"{own.path}: a {own.role} key, but this process needs a {role} "
                            f"key (fleetwatch keys new {role} ...)")
    if role == "agent" and uuid and own.uuid and own.uuid != uuid:
        raise SecurityError(f"{own.path}: bound to uuid {own.uuid}, but this agent is {uuid} "
                            f"(fleetwatch keys new agent --uuid {uuid} DIR)")
    if router.role and router.role != "router":
        raise SecurityError(f"{router.path}: router_key is a {router.role} key, not the "
                            f"routers' key")
