"""The console's users, API tokens and audit trail, in the state database (tables
``web_users``, ``web_tokens``, ``web_audit``: sinks/state/schema.py, owner ``web``).

Every function takes an engine and runs one short transaction. Every change (a user or a
token made or removed, a login, and what the console changes in the fleet) is recorded in
``web_audit`` with who made it, in the same transaction as the change.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine

from sinks.state import db, schema
from web import auth

U, T, A = schema.web_users, schema.web_tokens, schema.web_audit


class Who(NamedTuple):
    """Who makes a request: a user (``token`` None) or one of their tokens (its label)."""

    user: str
    role: str
    token: str | None = None

    @property
    def name(self) -> str:
        return self.user if self.token is None else f"{self.user}/{self.token}"


def create(engine: Engine) -> None:
    db.create(engine, "web")


def audit(conn, who: str, action: str, target: str, details: dict | None = None,
          clock=time.time) -> None:
    conn.execute(insert(A).values(ts=clock(), who=who[:255], action=action[:64],
                                  target=target, details=details))


def add_user(engine: Engine, name: str, role: str, password: str, by: str,
             clock=time.time) -> None:
    auth.check_name(name)
    auth.check_role(role)
    hashed = auth.hash_password(password)
    with engine.begin() as conn:
        if conn.execute(select(U.c.name).where(U.c.name == name)).first() is not None:
            raise auth.AuthError(f"user {name} exists (remove it first)")
        conn.execute(insert(U).values(name=name, role=role, password=hashed, created=clock(),
                                      created_by=by[:255]))
        audit(conn, by, "user.add", name, {"role": role}, clock)


def users(engine: Engine) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(select(U.c.name, U.c.role, U.c.created, U.c.created_by)
                            .order_by(U.c.name)).mappings().all()
        tokens = conn.execute(select(T.c.user, T.c.id)).all()
    count: dict[str, int] = {}
    for user, _ in tokens:
        count[user] = count.get(user, 0) + 1
    return [{**row, "tokens": count.get(row["name"], 0)} for row in rows]


def remove_user(engine: Engine, name: str, by: str, clock=time.time) -> None:
    """Remove user ``name`` and their tokens."""
    with engine.begin() as conn:
        if conn.execute(delete(U).where(U.c.name == name)).rowcount == 0:
            raise auth.AuthError(f"no user {name}")
        conn.execute(delete(T).where(T.c.user == name))
        audit(conn, by, "user.remove", name, None, clock)


def login(engine: Engine, name: str, password: str, address: str,
          clock=time.time) -> Who | None:
    """The user ``name`` if ``password`` is theirs (recorded either way), else None."""
    with engine.begin() as conn:
        row = conn.execute(select(U.c.role, U.c.password).where(U.c.name == name)).first()
        ok = auth.password_ok(row.password if row else auth.DUMMY_HASH, password) and \
            row is not None
        audit(conn, name if row else "-", "login" if ok else "login.failed",
              name if row else "(no such user)", {"address": address}, clock)
    return Who(name, row.role) if ok else None


def user(engine: Engine, name: str) -> Who | None:
    """The user ``name`` as it is now (a removed user's session ends)."""
    with engine.connect() as conn:
        row = conn.execute(select(U.c.role).where(U.c.name == name)).first()
    return Who(name, row.role) if row else None


def add_token(engine: Engine, name: str, label: str, role: str | None, by: str,
              clock=time.time) -> str:
    """A new API token for user ``name`` (at most their role); returned once, kept as a
    digest."""
    label = label.strip()[:255]
    if not label:
        raise auth.AuthError("a token needs a label (what it is for)")
    with engine.begin() as conn:
        row = conn.execute(select(U.c.role).where(U.c.name == name)).first()
        if row is None:
            raise auth.AuthError(f"no user {name}")
        role = auth.lesser(auth.check_role(role or row.role), row.role)
        token = auth.new_token()
        conn.execute(insert(T).values(user=name, role=role, label=label, created=clock(),
                                      digest=auth.token_digest(token)))
        audit(conn, by, "token.add", f"{name}/{label}", {"role": role}, clock)
    return token


def tokens(engine: Engine) -> list[dict]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            select(T.c.id, T.c.user, T.c.role, T.c.label, T.c.created, T.c.last_used)
            .order_by(T.c.id)).mappings().all()]


def remove_token(engine: Engine, token_id: int, by: str, clock=time.time) -> None:
    with engine.begin() as conn:
        row = conn.execute(select(T.c.user, T.c.label).where(T.c.id == token_id)).first()
        if row is None:
            raise auth.AuthError(f"no token {token_id}")
        conn.execute(delete(T).where(T.c.id == token_id))
        audit(conn, by, "token.remove", f"{row.user}/{row.label}", None, clock)


#: seconds between two records of a token's ``last_used`` (each API call would otherwise be
#: a write transaction: the state database's write lock, shared with the sinks, and a commit)
LAST_USED_EVERY = 60.0
_last_written: dict[int, float] = {}


def bearer(engine: Engine, token: str, clock=time.time) -> Who | None:
    """Who a token speaks for (never more than its user's role now), else None; its
    ``last_used`` recorded at most every :data:`LAST_USED_EVERY` seconds."""
    digest = auth.token_digest(token)
    with engine.connect() as conn:
        row = conn.execute(select(T.c.id, T.c.user, T.c.role, T.c.label, U.c.role.label("of"))
                           .join(U, U.c.name == T.c.user)
                           .where(T.c.digest == digest)).first()
    if row is None:
        return None
    now = clock()
    if now - _last_written.get(row.id, float("-inf")) >= LAST_USED_EVERY:
        with engine.begin() as conn:
            conn.execute(update(T).where(T.c.id == row.id).values(last_used=now))
        _last_written[row.id] = now
    return Who(row.user, auth.lesser(row.role, row.of), row.label)


def trail(engine: Engine, limit: int = 100) -> list[dict]:
    """The newest changes first."""
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            select(A).order_by(A.c.id.desc()).limit(limit)).mappings().all()]
