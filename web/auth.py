"""Who may do what in the console and the API: pure logic, no I/O.

- **Passwords** are hashed with argon2id (argon2-cffi's :class:`PasswordHasher`, its
  defaults), never stored or logged in clear.
- **API tokens** are ``fwt_`` and 43 random URL-safe characters, shown once when made; the
  database keeps their SHA-256 (a token is as random as a key: no need for a slow hash).
  A request carries one as ``Authorization: Bearer TOKEN``.
- **Roles**, each allowing what the one before does: ``viewer`` reads, ``operator`` also
  acknowledges, schedules downtimes, runs checks and posts alerts, ``admin`` also manages
  users and tokens (:func:`allows`). Beside them, a token (never a user) may have the role
  ``alerter``: it may post alerts (``POST /api/v2/alerts``, what Prometheus does with the
  token in its config file) and nothing else, not even read, so that the token a
  Prometheus server holds cannot acknowledge, silence or read the fleet. It is made for a
  user who may post alerts (an operator or an admin), and allows nothing once that user
  may no longer (:func:`lesser`).
- **Logins** that fail :attr:`LoginLimiter.attempts` times for one user from one address,
  or :attr:`LoginLimiter.per_address` times from one address whatever the names (names that
  do not exist too), are refused for ``lockout`` seconds, even with the right password, so
  a password cannot be guessed at the console's speed. A refused login costs no hash.
- **Hashes** run in :class:`HashPool`'s threads, at most ``workers`` at once and a bounded
  queue: a login never holds up the event loop (each hash is tens of milliseconds of a core,
  about a second on a loaded machine), and logins beyond the queue are refused at once.
- **Sessions** are random ids (:func:`new_session`) kept as a digest in the state database
  (:mod:`web.store`), so that they can be ended on the server.
- **CSRF**: a session gets a random token; every change a session makes (a form's POST)
  must carry it (:func:`same_token`). API calls with a token carry no cookie, so no CSRF.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

ROLES = ("viewer", "operator", "admin")
#: what each role may do beyond reading
ACTIONS = {"ack": "operator", "downtime": "operator", "run": "operator", "alerts": "operator",
           "users": "admin"}
#: a token's role that may post alerts and nothing else (not in :data:`ROLES`: it is below
#: none of them and above none)
ALERTER = "alerter"
#: what a token whose user may no longer post alerts is left with: nothing
NOTHING = "none"
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
TOKEN_PREFIX = "fwt_"
MIN_PASSWORD = 10

_hasher = PasswordHasher()


class AuthError(ValueError):
    """A user, password or token that cannot be taken; its text is for the operator."""


def check_name(name: str) -> str:
    if not isinstance(name, str) or not USER_NAME.fullmatch(name):
        raise AuthError("a user name is 1 to 64 letters, digits or ._@- (starting with a "
                        "letter or digit)")
    return name


def check_role(role: str) -> str:
    if role not in ROLES:
        raise AuthError(f"a role is one of {', '.join(ROLES)}")
    return role


def check_token_role(role: str) -> str:
    """A token's role: one of :data:`ROLES`, or :data:`ALERTER`."""
    if role != ALERTER and role not in ROLES:
        raise AuthError(f"a token's role is one of {', '.join(ROLES)} or {ALERTER}")
    return role


def hash_password(password: str) -> str:
    if not isinstance(password, str) or len(password) < MIN_PASSWORD:
        raise AuthError(f"a password has at least {MIN_PASSWORD} characters")
    return _hasher.hash(password)


def password_ok(stored: str, password: str) -> bool:
    """Whether ``password`` matches the ``stored`` hash (a damaged hash matches nothing)."""
    try:
        return _hasher.verify(stored, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


#: checked against when the user does not exist, so that a wrong name costs what a wrong
#: password does (no telling which names exist by the time an answer takes)
DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_session() -> str:
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def allows(role: str | None, action: str) -> bool:
    """Whether ``role`` may ``action`` (``read`` or one of :data:`ACTIONS`)."""
    if role == ALERTER:
        return action == "alerts"
    if role not in ROLES:
        return False
    if action == "read":
        return True
    need = ACTIONS.get(action)
    return need is not None and ROLES.index(role) >= ROLES.index(need)


def lesser(role: str, than: str) -> str:
    """The lower of two roles (a token never has more than its user): a token's
    :data:`ALERTER` stays one while its user (``than``) may post alerts, else allows
    :data:`NOTHING`."""
    if role == ALERTER:
        return ALERTER if allows(than, "alerts") else NOTHING
    if role not in ROLES or than not in ROLES:
        return NOTHING
    return role if ROLES.index(role) <= ROLES.index(than) else than


def new_csrf() -> str:
    return secrets.token_urlsafe(24)


def same_token(expected: str | None, given: str | None) -> bool:
    return bool(expected) and isinstance(given, str) and hmac.compare_digest(expected, given)


class LoginLimiter:
    """Failed logins per (user, address) and per address: ``attempts`` for one pair, or
    ``per_address`` for one address whatever the names, within ``lockout`` seconds lock
    that pair (that address) out for ``lockout`` seconds from the last failure. At most
    ``max_keys`` pairs and addresses are remembered (the oldest forgotten), so a flood of
    names cannot grow it."""

    def __init__(self, attempts: int = 5, lockout: float = 300.0, clock=time.monotonic,
                 max_keys: int = 10_000, per_address: int = 20):
        self.attempts, self.lockout, self.clock, self.max_keys = attempts, lockout, clock, max_keys
        self.per_address = per_address
        self.failures: dict[tuple[str, str], list[float]] = {}
        self.addresses: dict[str, list[float]] = {}

    def _recent(self, table: dict, key, now: float) -> list[float]:
        times = [t for t in table.get(key, ()) if now - t < self.lockout]
        if times:
            table[key] = times
        else:
            table.pop(key, None)
        return times

    def locked(self, user: str, address: str) -> bool:
        now = self.clock()
        return len(self._recent(self.failures, (user, address), now)) >= self.attempts or \
            len(self._recent(self.addresses, address, now)) >= self.per_address

    def failed(self, user: str, address: str) -> None:
        now = self.clock()
        for table, key in ((self.failures, (user, address)), (self.addresses, address)):
            times = self._recent(table, key, now)
            times.append(now)
            table[key] = times
            while len(table) > self.max_keys:
                table.pop(next(iter(table)))

    def succeeded(self, user: str, address: str) -> None:
        self.failures.pop((user, address), None)


class Busy(Exception):
    """More logins at once than :class:`HashPool` queues: refused without a hash."""


class HashPool:
    """Password checks (:func:`web.store.login`) in ``workers`` threads of their own, never in
    the event loop; at most ``queued`` more wait, beyond that :class:`Busy` at once. (argon2
    releases the GIL while it hashes, so pages are answered meanwhile.)"""

    def __init__(self, workers: int = 2, queued: int = 16):
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="password-hash")
        self.slots = threading.BoundedSemaphore(workers + queued)

    async def run(self, fn, *args):
        if not self.slots.acquire(blocking=False):
            raise Busy("too many logins at once: try again in a moment")
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        finally:
            self.slots.release()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
