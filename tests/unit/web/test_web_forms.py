"""The console's pages and API as they answer a mistake and show what they list, in this
process (Starlette's TestClient over :func:`web.app.create_app`, the lists and actions
faked): a bad value in the downtime form is said in the page beside the form with what was
typed kept, a refused action is a page, the API's validation errors are ``{"error": ...}``;
an alert kept back says "muted by silence N" as ``fleetwatch alerts`` does, severity error
is coloured as a problem, a downtime's window is in the tables' format. (The real console,
fleet and browser: tests/integration/test_web.py, test_web_live.py.)"""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from fleetwatch.cli.operator import OperatorConfig  # noqa: E402
from fleetwatch.display import iso  # noqa: E402
from fleetwatch.store import db  # noqa: E402
from web import assets, store  # noqa: E402
from web.app import create_app  # noqa: E402
from web.console import Console, Refused  # noqa: E402

NOW = 1_764_633_600.0               # 2025-12-02 00:00:00 UTC
PASSWORD = "correct horse battery"


class Actions:
    """What the console's forms and lists ask (fleetwatch/actions/console.py Actions), faked."""

    def __init__(self):
        self.scheduled = []

    def alerts(self, limit, uuid=None, f=None, offset=0):
        alert = {"received_at": iso(NOW), "severity": "error", "uuid": "u1",
                 "hostname": "web-1", "check": None, "kind": "notify", "text": "disk full",
                 "summary": None, "handled": None, "deliveries": [],
                 "kept_back": {"silence": 1}}
        return [alert], 1

    def downtimes(self):
        return [{"id": 4, "host": "web-1", "check": None, "state": "active",
                 "window": [iso(NOW), iso(NOW + 7200)], "by": "alice", "comment": ""}]

    def downtime(self, by, host, check, duration, comment, children=False, force=False,
                 **also):
        if duration == "2 hours":
            raise Refused("'2 hours' is not a duration (like 90s, 30m, 2h, 1d, 1h30m)")
        if host == "web-l" and not force:
            raise Refused("HOST web-l: no host of that name has been seen in the fleet "
                          "(closest known: web-1; force for a host not deployed yet)")
        self.scheduled.append((host, duration, force))
        return len(self.scheduled)


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """One console, alice logged in (a password hash is slow on purpose: once)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('forms') / 'state.db'}"
    engine = db.engine(url)
    store.create(engine)
    store.add_user(engine, "alice", "operator", PASSWORD, "test")
    config = OperatorConfig(routers=["tcp://127.0.0.1:9"], state_url=url)
    actions = Actions()
    console = Console(config, engine, lambda: [], actions, clock=lambda: NOW)
    with TestClient(create_app(console, "k" * 48)) as c:
        c.actions = actions
        c.token = store.add_token(engine, "alice", "t", None, "test")
        page = c.get("/login").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        assert c.post("/login", data={"user": "alice", "password": PASSWORD, "csrf": csrf},
                      follow_redirects=False).status_code == 303
        yield c
    engine.dispose()


@pytest.fixture
def client(console):
    console.actions.scheduled.clear()
    return console


def csrf_of(client, path: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', client.get(path).text).group(1)


def test_a_bad_value_in_the_downtime_form_is_said_beside_it_with_what_was_typed(client):
    typed = {"host": "web-1", "check": "load", "duration": "2 hours", "comment": "disk swap"}
    res = client.post("/downtimes", data={"csrf": csrf_of(client, "/downtimes"), **typed})
    assert res.status_code == 422 and res.headers["content-type"].startswith("text/html")
    page = res.text
    assert re.search(r'<p class="warning" id="dt-error" role="alert">\s*'
                     r"&#39;2 hours&#39; is not a duration", page)
    assert page.index('id="dt-error"') < page.index('<form method="post" action="/downtimes" '
                                                     'id="schedule">')
    for name, value in typed.items():
        assert f'id="dt-{name}"' in page and f'value="{value}"' in page
    assert client.actions.scheduled == []


def test_a_host_never_seen_is_scheduled_only_when_forced_in_the_form(client):
    form = {"csrf": csrf_of(client, "/downtimes"), "host": "web-l", "duration": "2h"}
    res = client.post("/downtimes", data=form)
    assert res.status_code == 422 and "closest known: web-1" in res.text
    assert 'id="dt-force" checked' not in res.text
    res = client.post("/downtimes", data={**form, "force": "1"}, follow_redirects=False)
    assert res.status_code == 303 and client.actions.scheduled == [("web-l", "2h", True)]


def test_the_api_s_validation_errors_are_its_error_shape(client):
    auth = {"Authorization": f"Bearer {client.token}"}
    res = client.post("/api/v1/downtimes", json={"host": "db-1"}, headers=auth)
    assert (res.status_code, res.json()) == (422, {"error": "body.duration: Field required"})
    res = client.get("/api/v1/hosts?limit=0", headers=auth)
    assert res.status_code == 422 and set(res.json()) == {"error"}
    assert res.json()["error"].startswith("query.limit: ")
    res = client.post("/api/v1/downtimes", json={"host": "web-l", "duration": "1h"},
                      headers=auth)
    assert res.status_code == 422 and "closest known: web-1" in res.json()["error"]
    res = client.post("/api/v1/downtimes", json={"host": "web-l", "duration": "1h",
                                                 "force": True}, headers=auth)
    assert res.status_code == 201
    # and so the OpenAPI document says
    doc = client.get("/api/v1/openapi.json", headers=auth).json()
    invalid = doc["paths"]["/api/v1/downtimes"]["post"]["responses"]["422"]
    assert invalid["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"}
    assert doc["components"]["schemas"]["Error"]["required"] == ["error"]
    assert "detail" not in json.dumps(doc) and "HTTPValidationError" not in json.dumps(doc)


def test_the_alerts_page_says_what_kept_an_alert_back_as_the_command_does(client):
    page = client.get("/alerts").text
    (row,) = re.findall(r'<tr class="alert">.*?</tr>', page, re.S)
    assert "muted by silence 1" in row and "{" not in row and "kept back" not in row
    assert '<span class="state state-ERROR">error</span>' in row


def test_severity_error_is_coloured_as_a_problem_not_as_unknown():
    css = (assets.SOURCE / "fleetwatch.css").read_text()
    rules = {sel.strip(): body for sels, body in re.findall(r"([^{}]+)\{([^}]*)\}", css)
             for sel in sels.split(",")}
    assert "var(--fw-critical)" in rules[".state-ERROR"]
    assert rules[".state-ERROR"] != rules[".state-UNKNOWN"]


def test_a_downtime_s_window_is_in_the_tables_format(client):
    page = client.get("/downtimes").text
    (row,) = re.findall(r'<tr class="downtime">.*?</tr>', page, re.S)
    assert "<td>2025-12-02 00:00:00 UTC - 2025-12-02 02:00:00 UTC</td>" in row
    assert "T00:00:00" not in row


def test_an_api_list_is_rendered_as_fastapi_renders_it_and_anything_else_left_to_it():
    """The lists' answers skip FastAPI's jsonable_encoder when made of JSON's own types:
    the same bytes; a value JSON has no type for is left to FastAPI; NaN is not JSON."""
    import datetime
    import json

    from fastapi.encoders import jsonable_encoder

    from web.api import as_json
    content = {"items": [{"uuid": "u1", "hostname": "wéb-1", "checks": (1, 2.5, None),
                          "up": True}], "total": 1, "groups": {3: "x"}, "next": None}
    res = as_json(content)
    assert res.media_type == "application/json"
    assert res.body == json.dumps(jsonable_encoder(content), ensure_ascii=False,
                                  allow_nan=False, separators=(",", ":")).encode()
    odd = {"at": datetime.datetime(2026, 12, 3)}
    assert as_json(odd) is odd
    nan = {"value": float("nan")}
    assert as_json(nan) is nan
