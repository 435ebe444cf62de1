"""The console's guards against its own users and against anyone who can reach it (issue 31,
items 3, 4, 7 and 8): a real ``fleetwatch web`` over a real fleet, one for the module.

- Logins never hold up the pages: while a password check is under way (one that costs
  fifty times argon2's default), authenticated API calls are answered, one after another,
  before the login is; three threads logging in at once each get their password checked;
  past ``web.login_address_attempts`` failures from one address, whatever the names, that
  address gets 429.
- A body over ``web.max_body`` is refused with 413 before it is read (its Content-Length
  says so, or, chunked, as soon as the count passes the limit), and an API call without a
  login is 401 before its body is parsed.
- Sessions end on the server: after a logout a copy of the cookie is refused; removing a
  user, or giving them a new password, ends their sessions; a user removed and added again
  does not get the old ones.
- The OpenAPI document is behind the API's login.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
import urllib.parse

import pytest

from support.browser import Browser
from support.console import PASSWORD, start_console
from support.fleet import module_fleet
from support.webcli import web

pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(180)

#: one pair (user, address) is locked after 3 failures, an address after 6 (any names);
#: one password checked at a time
WEB = "  login_attempts: 3\n  login_address_attempts: 6\n  login_hashes: 1\n"
#: the default web.max_body (docs/operating/console.md)
MAX_BODY = 1_048_576


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    with module_fleet(tmp_path_factory, "web-guard") as fleet:
        fleet, op, url = start_console(fleet, web=WEB)
        token = web(fleet, "token", "add", "bob", "--label", "probe",
                    "--config", str(op)).stdout.strip()
        slow_user(fleet, op, "dave", 12)
        slow_user(fleet, op, "erin", 150)
        yield fleet, op, url, token


#: ``argon2.PasswordHasher(time_cost=T).hash(PASSWORD)`` by T, made once and kept here:
#: making one costs what checking it does (erin's: 7 core-seconds), and only the check is
#: the console's (erin's, were it cheaper, would fail the first test's calls meanwhile)
SLOW_HASHES = {
    12: "$argon2id$v=19$m=65536,t=12,p=4$muLeTswLKDajBSakanVPuQ$"
        "WrbF8Ptwv/u6vn5Opy2pC9DDvzXHOkWEfjIW5vLKZdg",
    150: "$argon2id$v=19$m=65536,t=150,p=4$MPw/lsnsJWTvhWRXL7wyPQ$"
         "fYXOfWaGCGSPC9eSHHbTIDJpiTa5jOtMy9nHUZWLQd4"}


def slow_user(fleet, op, name: str, time_cost: int) -> None:
    """User ``name``, whose password hash costs ``time_cost`` / 3 times argon2's default time
    (dave's 12: about a quarter of a second on a quiet machine; erin's 150: seconds)."""
    import sqlite3
    web(fleet, "user", "add", name, "--password-stdin", "--config", str(op),
        input=PASSWORD + "\n")
    conn = sqlite3.connect(fleet.root / "state.db", timeout=10)
    try:
        with conn:
            conn.execute("UPDATE web_users SET password = ? WHERE name = ?",
                         (SLOW_HASHES[time_cost], name))
    finally:
        conn.close()


def login_from(url: str, source: str, user: str, password: str,
               sent: threading.Event | None = None) -> int:
    """Log in from the address ``source`` (any of 127/8 reaches the console on 127.0.0.1):
    the status of the POST (``sent`` is set once the POST is on its way)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60,
                                      source_address=(source, 0))
    try:
        conn.request("GET", "/login")
        res = conn.getresponse()
        page = res.read().decode()
        cookie = res.getheader("set-cookie").split(";")[0]
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        conn.request("POST", "/login", urllib.parse.urlencode(
            {"user": user, "password": password, "csrf": csrf}),
            {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"})
        if sent is not None:
            sent.set()
        res = conn.getresponse()
        res.read()
        return res.status
    finally:
        conn.close()


def test_logins_never_hold_up_the_pages(console):
    """Two claims, neither a stopwatch: a login in the console's threads of password checks
    lets the event loop answer calls meanwhile (had the check run in the loop, no call sent
    after the login's POST could be answered before the login is); and logins at once from
    three threads are each checked (every answer a 401, none a 429 or a 503)."""
    fleet, op, url, token = console
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def call() -> None:
        conn.request("GET", "/api/v1/downtimes", headers={"Authorization": f"Bearer {token}"})
        res = conn.getresponse()
        res.read()
        assert res.status == 200

    # erin's check costs fifty times argon2's default: seconds, on any machine
    sent, answer = threading.Event(), []
    slow = threading.Thread(target=lambda: answer.append(
        login_from(url, "127.0.8.1", "erin", "not her password", sent)), daemon=True)
    try:
        call()                                  # (the first one reads the token's row)
        slow.start()
        assert sent.wait(30), "the login's POST was not sent"
        answered = 0
        while slow.is_alive() and answered < 3:
            call()
            answered += int(slow.is_alive())    # answered before the login was
    finally:
        slow.join(120)
    assert answer == [401]
    assert answered == 3, f"only {answered} calls answered while a password was checked"
    conn.close()                                # (idle past the server's keep-alive)

    statuses: list[int] = []
    stop = threading.Event()

    def logins(k: int) -> None:
        """Two failures from each address (under both limits): every one costs a hash."""
        for n in range(1, 250):
            source = f"127.0.{10 + k}.{n}"
            for user, password in ((f"nosuch{k}-{n}", "wrong password"),
                                   ("dave", "not his password")):
                if stop.is_set():           # (dave's check costs a quarter of a second)
                    return
                statuses.append(login_from(url, source, user, password))

    threads = [threading.Thread(target=logins, args=(k,), daemon=True) for k in range(3)]
    calls = 0
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(statuses) < 12 and time.monotonic() < deadline:
            call()                              # and the pages keep answering
            calls += 1
            stop.wait(0.1)      # (paced: back to back, 2,600 calls took a core meanwhile)
    finally:
        stop.set()
        conn.close()
        for t in threads:
            t.join(60)
    assert len(statuses) >= 6, "the logins did not get going"
    assert set(statuses) == {401}, statuses           # every attempt was checked (a hash)
    print(f"{len(statuses)} logins at once from three threads, {calls} API calls meanwhile")


def test_failures_from_one_address_lock_it_out_for_names_that_do_not_exist(console):
    _, _, url, _ = console
    for n in range(6):
        assert login_from(url, "127.0.0.2", f"nosuch{n}", "a password") == 401
    assert login_from(url, "127.0.0.2", "nosuch-again", "a password") == 429
    assert login_from(url, "127.0.0.2", "bob", PASSWORD) == 429        # the right one too
    assert login_from(url, "127.0.0.3", "bob", PASSWORD) == 303        # not another address


def raw_request(url: str, head: str, body_parts, timeout: float = 30.0) -> tuple[int, bytes]:
    """Send ``head`` then each of ``body_parts`` (bytes) without ending the body, and read
    the answer the console gives meanwhile: (status, its body)."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(head.encode())
        try:
            for part in body_parts:
                sock.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass                            # answered and closed while we were sending
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < answer.index(b"\r\n\r\n") + 4 + \
                int(re.search(rb"content-length: (\d+)", answer, re.I).group(1)):
            chunk = sock.recv(65536)
            assert chunk, f"closed without a whole answer: {answer[:200]!r}"
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1]


def test_a_body_over_the_limit_is_refused_before_it_is_read(console):
    fleet, _, url, token = console
    # a Content-Length of 200 MB, and only 64 KiB of it sent: answered without waiting
    status, body = raw_request(url, "POST /api/v1/acks HTTP/1.1\r\nHost: console\r\n"
                                    "Content-Type: application/json\r\n"
                                    "Content-Length: 200000000\r\n\r\n", [b"{" * 65536])
    assert status == 413 and b"at most 1048576 bytes" in body, body
    # the same on a form (the login), and chunked: stopped once the count passes the limit
    chunk = b"a" * 65536
    framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    b = Browser(url)
    b.csrf()
    (cookie,) = [f"{c.name}={c.value}" for c in b.jar]
    for path, headers in (("/login", f"Cookie: {cookie}\r\n"
                                     "Content-Type: application/x-www-form-urlencoded\r\n"),
                          ("/api/v1/acks", f"Authorization: Bearer {token}\r\n"
                                           "Content-Type: application/json\r\n")):
        status, body = raw_request(url, f"POST {path} HTTP/1.1\r\nHost: console\r\n{headers}"
                                        "Transfer-Encoding: chunked\r\n\r\n",
                                   [framed] * (MAX_BODY // len(chunk) + 2))
        assert status == 413 and b"at most 1048576 bytes" in body, (path, body)
    # without a login, the body is not even parsed
    status, body = raw_request(url, "POST /api/v1/acks HTTP/1.1\r\nHost: console\r\n"
                                    "Content-Type: application/json\r\n"
                                    "Content-Length: 9\r\n\r\n", [b"{not json"])
    assert status == 401 and json.loads(body)["error"].startswith("log in"), body


def copied(b: Browser, url: str) -> Browser:
    """Another client holding a copy of ``b``'s session cookie."""
    other = Browser(url)
    for cookie in b.jar:
        other.jar.set_cookie(cookie)
    return other


def test_sessions_end_on_logout_user_removal_and_a_new_password(console):
    fleet, op, url, _ = console
    b = Browser(url)
    assert b.login("alice", PASSWORD)[0] == 303
    thief = copied(b, url)
    status, _, page = b.request("/")
    assert status == 200 and "alice (operator)" in page
    assert thief.request("/")[0] == 200
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    assert b.request("/logout", {"csrf": csrf})[0] == 303
    assert thief.request("/")[0] == 303                      # the copy is refused too
    assert thief.request("/api/v1/hosts")[0] == 401

    # a new password ends every session of that user
    assert b.login("alice", PASSWORD)[0] == 303
    assert b.request("/")[0] == 200
    web(fleet, "user", "password", "alice", "--password-stdin", "--config", str(op),
        input=PASSWORD + "\n")
    assert b.request("/")[0] == 303

    # removed: their sessions end; added again (another role): the old ones stay ended
    carol = Browser(url)
    web(fleet, "user", "add", "carol", "--role", "viewer", "--password-stdin",
        "--config", str(op), input=PASSWORD + "\n")
    assert carol.login("carol", PASSWORD)[0] == 303
    kept = copied(carol, url)
    web(fleet, "user", "remove", "carol", "--config", str(op))
    assert carol.request("/")[0] == 303
    web(fleet, "user", "add", "carol", "--role", "operator", "--password-stdin",
        "--config", str(op), input=PASSWORD + "\n")
    assert kept.request("/")[0] == 303
    assert kept.request("/api/v1/hosts")[0] == 401
    assert fleet.db_rows("SELECT count(*) FROM web_sessions WHERE user = 'carol'") == [(0,)]


def test_the_openapi_document_needs_a_login(console):
    _, _, url, token = console
    b = Browser(url)
    status, _, body = b.request("/api/v1/openapi.json")
    assert status == 401 and json.loads(body)["error"].startswith("log in")
    status, _, body = b.request("/api/v1/openapi.json",
                                headers={"Authorization": f"Bearer {token}"})
    assert status == 200 and "/api/v1/acks" in json.loads(body)["paths"]
