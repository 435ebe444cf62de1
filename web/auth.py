"""Who may do what in the console and the API: pure logic, no I/O.

- **Passwords** are hashed with argon2id (argon2-cffi's :class:`PasswordHasher`, its
  defaults), never stored or logged in clear.
- **API tokens** are ``fwt_`` and 43 random URL-safe characters, shown once when made; the
  database keeps their SHA-256 (a token is as random as a key: no need for a slow hash).
  A request carries one as ``Authorization: Bearer TOKEN``.
- **Roles**, each allowing what the one before does: ``viewer`` reads, ``operator`` also
  acknowledges, schedules downtimes and runs checks, ``admin`` also manages users and
  tokens (:func:`allows`).
- **Logins** that fail :attr:`LoginLimiter.attempts` times for one user from one address
  are refused for ``lockout`` seconds, even with the right password, so a password cannot
  be guessed at the console's speed.
- **CSRF**: a session gets a random token; every change a session makes (a form's POST)
  must carry it (:func:`same_token`). API calls with a token carry no cookie, so no CSRF.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

ROLES = ("viewer", "operator", "admin")
#: what each role may do beyond reading
ACTIONS = {"ack": "operator", "downtime": "operator", "run": "operator", "users": "admin"}
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


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def allows(role: str | None, action: str) -> bool:
    """Whether ``role`` may ``action`` (``read`` or one of :data:`ACTIONS`)."""
    if role not in ROLES:
        return False
    if action == "read":
        return True
    need = ACTIONS.get(action)
    return need is not None and ROLES.index(role) >= ROLES.index(need)


def lesser(role: str, than: str) -> str:
    """The lower of two roles (a token never has more than its user)."""
    return role if ROLES.index(role) <= ROLES.index(than) else than


def new_csrf() -> str:
    return secrets.token_urlsafe(24)


def same_token(expected: str | None, given: str | None) -> bool:
    return bool(expected) and isinstance(given, str) and hmac.compare_digest(expected, given)


class LoginLimiter:
    """Failed logins per (user, address): ``attempts`` within ``lockout`` seconds lock that
    pair out for ``lockout`` seconds from the last failure. At most ``max_keys`` pairs are
    remembered (the oldest forgotten), so a flood of names cannot grow it."""

    def __init__(self, attempts: int = 5, lockout: float = 300.0, clock=time.monotonic,
                 max_keys: int = 10_000):
        self.attempts, self.lockout, self.clock, self.max_keys = attempts, lockout, clock, max_keys
        self.failures: dict[tuple[str, str], list[float]] = {}

    def _recent(self, key: tuple[str, str], now: float) -> list[float]:
        times = [t for t in self.failures.get(key, ()) if now - t < self.lockout]
        if times:
            self.failures[key] = times
        else:
            self.failures.pop(key, None)
        return times

    def locked(self, user: str, address: str) -> bool:
        return len(self._recent((user, address), self.clock())) >= self.attempts

    def failed(self, user: str, address: str) -> None:
        now = self.clock()
        key = (user, address)
        times = self._recent(key, now)
        times.append(now)
        self.failures[key] = times
        while len(self.failures) > self.max_keys:
            self.failures.pop(next(iter(self.failures)))

    def succeeded(self, user: str, address: str) -> None:
        self.failures.pop((user, address), None)
