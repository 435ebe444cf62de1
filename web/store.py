"""The console's users, API tokens, sessions and audit trail, in the state database (tables
``web_users``, ``web_tokens``, ``web_sessions``, ``web_audit``: fleetwatch/store/schema.py, owner
``web``).

A session is a row: the cookie carries a random session id, the table its SHA-256 and when
it ends, so that logging out, removing the user and changing their password end it on the
server (a copied cookie is refused after), and a user removed and added again under the same
name starts with none.

Every function takes an engine and runs one short transaction. Every change (a user or a
token made or removed, a login, and what the console changes in the fleet) is recorded in
``web_audit`` with who made it, in the same transaction as the change.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine

from fleetwatch.store import db, schema
from web import auth

U, T, S, A = schema.web_users, schema.web_tokens, schema.web_sessions, schema.web_audit
P = schema.web_pins

#: sessions one user keeps at most (the oldest end first): logins cannot grow the table
SESSIONS_PER_USER = 50
#: graphs one user's dashboard holds at most (a pin past it is refused, and said)
PINS_PER_USER = 48


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
    """Remove user ``name``, their tokens, their sessions and their dashboard."""
    with engine.begin() as conn:
        if conn.execute(delete(U).where(U.c.name == name)).rowcount == 0:
            raise auth.AuthError(f"no user {name}")
        conn.execute(delete(T).where(T.c.user == name))
        conn.execute(delete(S).where(S.c.user == name))
        conn.execute(delete(P).where(P.c.user == name))
        audit(conn, by, "user.remove", name, None, clock)


def set_password(engine: Engine, name: str, password: str, by: str,
                 clock=time.time) -> None:
    """Give user ``name`` a new password; their sessions end (their tokens are kept)."""
    hashed = auth.hash_password(password)
    with engine.begin() as conn:
        if conn.execute(update(U).where(U.c.name == name)
                        .values(password=hashed)).rowcount == 0:
            raise auth.AuthError(f"no user {name}")
        conn.execute(delete(S).where(S.c.user == name))
        audit(conn, by, "user.password", name, None, clock)


def login(engine: Engine, name: str, password: str, address: str, hours: float,
          clock=time.time) -> tuple[Who, str] | None:
    """(the user ``name``, the id of a new session of ``hours``) if ``password`` is theirs,
    else None; recorded either way. The password is hashed outside any transaction (the
    state database's write lock is not held for it); a slow call, for a worker thread."""
    with engine.connect() as conn:
        row = conn.execute(select(U.c.role, U.c.password).where(U.c.name == name)).first()
    ok = auth.password_ok(row.password if row else auth.DUMMY_HASH, password) and \
        row is not None
    session = auth.new_session() if ok else None
    with engine.begin() as conn:
        if ok and conn.execute(select(U.c.password).where(U.c.name == name)).scalar() \
                != row.password:
            ok, session = False, None           # removed or given a new password meanwhile
        audit(conn, name if row else "-", "login" if ok else "login.failed",
              name if row else "(no such user)", {"address": address}, clock)
        if ok:
            now = clock()
            conn.execute(delete(S).where(S.c.expires <= now))
            kept = select(S.c.digest).where(S.c.user == name).order_by(
                S.c.created.desc()).limit(SESSIONS_PER_USER - 1)
            conn.execute(delete(S).where(S.c.user == name, S.c.digest.not_in(kept)))
            conn.execute(insert(S).values(digest=auth.token_digest(session), user=name,
                                          created=now, expires=now + hours * 3600))
    return (Who(name, row.role), session) if ok else None


def session(engine: Engine, session_id: str, clock=time.time) -> Who | None:
    """Whose session ``session_id`` is, as the user is now; None when it ended (logged out,
    expired, the user removed or given a new password) or never was."""
    with engine.connect() as conn:
        row = conn.execute(select(U.c.name, U.c.role).join(S, S.c.user == U.c.name)
                           .where(S.c.digest == auth.token_digest(session_id),
                                  S.c.expires > clock())).first()
    return Who(row.name, row.role) if row else None


def logout(engine: Engine, session_id: str) -> None:
    """End the session ``session_id`` (none: nothing to end)."""
    with engine.begin() as conn:
        conn.execute(delete(S).where(S.c.digest == auth.token_digest(session_id)))


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
        role = auth.check_token_role(role or row.role)
        if role == auth.ALERTER and not auth.allows(row.role, "alerts"):
            raise auth.AuthError(f"an {auth.ALERTER} token is for a user who may post "
                                 f"alerts (operator or admin); {name} is a {row.role}")
        role = auth.lesser(role, row.role)
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


def pin(engine: Engine, who: Who, uuid: str, graph: str, clock=time.time) -> bool:
    """Pin host ``uuid``'s graph ``graph`` to ``who``'s dashboard (audited); False when it
    is there already; :class:`auth.AuthError` past :data:`PINS_PER_USER`."""
    with engine.begin() as conn:
        mine = conn.execute(select(P.c.uuid, P.c.graph).where(P.c.user == who.user)).all()
        if (uuid, graph) in {tuple(r) for r in mine}:
            return False
        if len(mine) >= PINS_PER_USER:
            raise auth.AuthError(f"a dashboard holds at most {PINS_PER_USER} graphs: unpin "
                                 f"one first")
        conn.execute(insert(P).values(user=who.user, uuid=uuid[:64], graph=graph[:255],
                                      created=clock()))
        audit(conn, who.name, "pin.add", f"{uuid} {graph}", None, clock)
    return True


def unpin(engine: Engine, who: Who, pin_id: int, clock=time.time) -> None:
    """Take pin ``pin_id`` off ``who``'s own dashboard (audited)."""
    with engine.begin() as conn:
        row = conn.execute(select(P).where(P.c.id == pin_id, P.c.user == who.user)).first()
        if row is None:
            raise auth.AuthError(f"no pin {pin_id} on {who.user}'s dashboard")
        conn.execute(delete(P).where(P.c.id == pin_id))
        audit(conn, who.name, "pin.remove", f"{row.uuid} {row.graph}", None, clock)


def pins(engine: Engine, user: str) -> list[dict]:
    """``user``'s dashboard: its pins, the oldest first."""
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            select(P).where(P.c.user == user).order_by(P.c.id)).mappings().all()]


def trail(engine: Engine, limit: int = 100) -> list[dict]:
    """The newest changes first."""
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            select(A).order_by(A.c.id.desc()).limit(limit)).mappings().all()]
