"""The console's access rules as logic: roles, passwords, tokens, the login limiter, CSRF."""

from __future__ import annotations

import pytest

pytest.importorskip("argon2")

from support.clock import Clock  # noqa: E402
from web import auth  # noqa: E402
from web.settings import WebSettings  # noqa: E402


@pytest.mark.parametrize("role, action, allowed", [
    ("viewer", "read", True), ("viewer", "ack", False), ("viewer", "users", False),
    ("operator", "ack", True), ("operator", "downtime", True), ("operator", "run", True),
    ("operator", "users", False), ("admin", "users", True), ("admin", "ack", True),
    ("admin", "anything else", False), (None, "read", False), ("root", "read", False)])
def test_each_role_allows_what_the_one_before_does_and_more(role, action, allowed):
    assert auth.allows(role, action) is allowed


def test_a_token_never_has_more_than_its_user():
    assert auth.lesser("admin", "viewer") == "viewer"
    assert auth.lesser("viewer", "admin") == "viewer"
    assert auth.lesser("operator", "operator") == "operator"


def test_passwords_are_hashed_and_checked():
    stored = auth.hash_password("correct horse battery")
    assert stored.startswith("$argon2id$") and "correct" not in stored
    assert auth.password_ok(stored, "correct horse battery")
    assert not auth.password_ok(stored, "correct horse batterY")
    assert not auth.password_ok("not a hash", "correct horse battery")
    with pytest.raises(auth.AuthError, match="at least 10 characters"):
        auth.hash_password("short")


@pytest.mark.parametrize("name", ["", "a b", "-x", "x" * 65, "<script>", "é"])
def test_user_names_are_plain(name):
    with pytest.raises(auth.AuthError):
        auth.check_name(name)


def test_tokens_are_random_and_kept_as_a_digest():
    one, two = auth.new_token(), auth.new_token()
    assert one != two and one.startswith("fwt_") and len(one) > 40
    assert auth.token_digest(one) == auth.token_digest(one) != auth.token_digest(two)
    assert one not in auth.token_digest(one)


def test_csrf_tokens_compare_whole():
    token = auth.new_csrf()
    assert auth.same_token(token, token)
    assert not auth.same_token(token, token[:-1])
    assert not auth.same_token(None, None) and not auth.same_token("", "")
    assert not auth.same_token(token, None)


def test_failed_logins_lock_a_user_and_address_for_a_while():
    clock = Clock(0.0)
    limiter = auth.LoginLimiter(attempts=3, lockout=60.0, clock=clock)
    for _ in range(3):
        assert not limiter.locked("bob", "10.0.0.1")
        limiter.failed("bob", "10.0.0.1")
    assert limiter.locked("bob", "10.0.0.1")
    assert not limiter.locked("bob", "10.0.0.2") and not limiter.locked("alice", "10.0.0.1")
    clock.advance(61)
    assert not limiter.locked("bob", "10.0.0.1")
    limiter.failed("bob", "10.0.0.1")
    limiter.succeeded("bob", "10.0.0.1")
    assert limiter.failures == {}


def test_the_limiter_forgets_the_oldest_beyond_its_size():
    limiter = auth.LoginLimiter(attempts=1, lockout=60.0, clock=Clock(0.0), max_keys=3)
    for n in range(5):
        limiter.failed(f"user{n}", "a")
    assert len(limiter.failures) == 3 and limiter.locked("user4", "a")


@pytest.mark.parametrize("settings, error", [
    ({"listen": "8080"}, "listen: expected HOST:PORT"),
    ({"listen": "127.0.0.1:99999"}, "listen: expected HOST:PORT"),
    ({"tls_cert": "/etc/cert.pem"}, "give both, or neither"),
    ({"session_hours": 0}, "session_hours"),
])
def test_web_settings_refuse_what_cannot_serve(settings, error):
    from fleetwatch.config import ConfigError, build
    with pytest.raises(ConfigError, match=error):
        build(WebSettings, settings)
    assert build(WebSettings, {"listen": "[::1]:0"}).address() == ("::1", 0)


def test_failed_logins_from_one_address_lock_it_whatever_the_names():
    """Names that do not exist count too: cycling through names does not get past it."""
    clock = Clock(0.0)
    limiter = auth.LoginLimiter(attempts=3, lockout=60.0, clock=clock, per_address=4)
    for n in range(4):
        assert not limiter.locked(f"nosuch{n}", "10.0.0.1")
        limiter.failed(f"nosuch{n}", "10.0.0.1")
    assert limiter.locked("another", "10.0.0.1") and limiter.locked("alice", "10.0.0.1")
    assert not limiter.locked("another", "10.0.0.2")
    clock.advance(61)
    assert not limiter.locked("another", "10.0.0.1")


def test_password_checks_run_in_a_bounded_pool_off_the_loop():
    """At most ``workers`` at once, ``queued`` more waiting, the rest refused at once; the
    event loop runs meanwhile."""
    import asyncio
    import threading
    release, running = threading.Event(), threading.Semaphore(0)

    def slow(n):
        running.release()
        assert release.wait(10)
        return n

    async def scenario():
        pool = auth.HashPool(workers=1, queued=1)
        try:
            first = asyncio.ensure_future(pool.run(slow, 1))
            second = asyncio.ensure_future(pool.run(slow, 2))
            await asyncio.sleep(0)
            await asyncio.wait_for(asyncio.to_thread(running.acquire, True, 10), 10)
            with pytest.raises(auth.Busy):
                await pool.run(slow, 3)
            ticks = 0                       # the loop goes on while a check runs
            while ticks < 100:
                await asyncio.sleep(0)
                ticks += 1
            assert not first.done() and not second.done()
            release.set()
            assert await asyncio.wait_for(asyncio.gather(first, second), 10) == [1, 2]
            assert await pool.run(slow, 4) == 4         # the slots came back
        finally:
            release.set()
            pool.close()
    asyncio.run(scenario())


@pytest.mark.parametrize("settings, error", [
    ({"max_body": 10}, "max_body: expected 1024 bytes or more"),
    ({"login_hashes": 0}, "login_hashes: at least 1"),
    ({"login_address_attempts": 0}, "login_address_attempts"),
])
def test_web_settings_refuse_unbounded_logins_and_bodies(settings, error):
    from fleetwatch.config import ConfigError, build
    with pytest.raises(ConfigError, match=error):
        build(WebSettings, settings)


@pytest.mark.parametrize("action, allowed", [
    ("alerts", True), ("read", False), ("ack", False), ("downtime", False), ("run", False),
    ("users", False)])
def test_an_alerter_token_may_post_alerts_and_nothing_else(action, allowed):
    assert auth.allows(auth.ALERTER, action) is allowed
    assert auth.allows("operator", "alerts") and auth.allows("admin", "alerts")
    assert not auth.allows("viewer", "alerts")


def test_an_alerter_token_allows_nothing_once_its_user_may_not_post_alerts():
    assert auth.lesser(auth.ALERTER, "operator") == auth.ALERTER
    assert auth.lesser(auth.ALERTER, "admin") == auth.ALERTER
    assert auth.lesser(auth.ALERTER, "viewer") == auth.NOTHING
    assert not any(auth.allows(auth.NOTHING, a) for a in ("read", "alerts", "ack"))
    assert auth.check_token_role(auth.ALERTER) == auth.ALERTER
    with pytest.raises(auth.AuthError, match="or alerter"):
        auth.check_token_role("root")
    with pytest.raises(auth.AuthError):
        auth.check_role(auth.ALERTER)           # a user is never one
