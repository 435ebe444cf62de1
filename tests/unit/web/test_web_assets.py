"""The console's built front-end files as logic (web/assets.py): the build's copy from
npm's node_modules and our sources, the versioned URLs, and the ``web.refresh`` and
``web.assets`` settings."""

from __future__ import annotations

import hashlib
import json
import re
import types

import pytest

pytest.importorskip("starlette")

from fleetwatch.config import ConfigError, build as settings_of  # noqa: E402
from web import assets  # noqa: E402
from web.settings import WebSettings  # noqa: E402
from support import ROOT  # noqa: E402

TEMPLATES = assets.SOURCE.parent / "templates"      # (web/context.py's, without importing it)


def source(tmp_path, without: str | None = None):
    """A web/assets/ after ``npm ci``: every file of FILES, each holding its own name."""
    root = tmp_path / "assets"
    for name, path in assets.FILES.items():
        if path != without:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(f"/* {name} */")
    return root


def test_the_build_copies_the_vendored_files_and_ours(tmp_path):
    out = tmp_path / "static"
    assert assets.build(source(tmp_path), out) == list(assets.FILES)
    assert sorted(p.name for p in out.iterdir()) == sorted(assets.FILES)   # no partial left
    assert (out / "htmx.min.js").read_text() == "/* htmx.min.js */"


def test_the_build_says_to_run_npm_ci_first(tmp_path):
    root = source(tmp_path, without="node_modules/htmx.org/dist/htmx.min.js")
    with pytest.raises(assets.BuildError, match=r"missing .*node_modules/htmx\.org/dist/htmx"
                                                r"\.min\.js: run npm ci in .* first"):
        assets.build(root, tmp_path / "static")
    assert not (tmp_path / "static").exists()


def test_what_the_build_copies_is_what_package_json_installs():
    package = json.loads((assets.SOURCE / "package.json").read_text())
    lock = json.loads((assets.SOURCE / "package-lock.json").read_text())
    for path in assets.FILES.values():
        if path.startswith("node_modules/"):
            name = "/".join(path.split("/")[1:3 if path.split("/")[1].startswith("@") else 2])
            assert name in package["dependencies"], path
            assert lock["packages"][f"node_modules/{name}"]["version"] == \
                package["dependencies"][name]                   # pinned, one version
        else:
            assert (assets.SOURCE / path).is_file(), path       # ours, committed


def test_urls_carry_a_hash_of_the_content_and_change_with_it(tmp_path):
    out = tmp_path / "static"
    assets.build(source(tmp_path), out)
    built = assets.Assets(out)
    css = hashlib.sha256(b"/* fleetwatch.css */").hexdigest()[:16]
    assert built.url("fleetwatch.css") == f"/static/fleetwatch.css?v={css}"
    assert built.styles() == [built.url("pico.classless.min.css"), built.url("fleetwatch.css")]
    assert [u.split("?")[0] for u in built.scripts()] == ["/static/htmx.min.js",
                                                          "/static/console.js"]
    (out / "fleetwatch.css").write_text("/* a new build, longer */")
    assert built.url("fleetwatch.css") != f"/static/fleetwatch.css?v={css}"
    (out / "console.js").unlink()
    assert built.url("console.js") is None and built.missing() == ["console.js"]
    assert assets.Assets(tmp_path / "nowhere").styles() == []


@pytest.mark.parametrize("refresh", [0, 1, 10, 2.5, 3600])
def test_refresh_is_off_or_a_second_to_an_hour(refresh):
    assert settings_of(WebSettings, {"refresh": refresh}).refresh == refresh


@pytest.mark.parametrize("refresh", [-1, 0.5, 3601])
def test_a_refresh_that_would_hammer_the_console_or_never_come_is_refused(refresh):
    with pytest.raises(ConfigError, match=r"refresh: expected 0 \(off\) or 1 to 3600 seconds"):
        settings_of(WebSettings, {"refresh": refresh})


def test_refresh_and_assets_defaults_and_types():
    settings = settings_of(WebSettings, {})
    assert (settings.refresh, settings.assets) == (10.0, "")
    with pytest.raises(ConfigError, match="refresh"):
        settings_of(WebSettings, {"refresh": "often"})
    assert settings_of(WebSettings, {"assets": "/usr/share/fleetwatch/web"}).assets == \
        "/usr/share/fleetwatch/web"


class Request:
    """What base.html reads of a request."""

    def __init__(self, path: str, query: str = "", method: str = "GET"):
        self.method = method
        self.url = types.SimpleNamespace(path=path, query=query)


def page(tmp_path, refresh: float, request: Request, built: bool = True) -> str:
    """downtimes.html (a page that opts in to updates) as the console renders it."""
    jinja2 = pytest.importorskip("jinja2")
    out = tmp_path / "static"
    if built:
        assets.build(source(tmp_path), out)
    found = assets.Assets(out)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True)
    env.globals.update(styles=found.styles, scripts=found.scripts, asset=found.url,
                       refresh=refresh)
    who = {"name": "alice", "role": "operator"}
    return env.get_template("downtimes.html").render(request=request, who=who, csrf="t",
                                                     downtimes=[], may=True, error=None)


def test_a_page_that_opts_in_asks_for_its_own_url_again(tmp_path):
    html = page(tmp_path, 2.5, Request("/downtimes", "a=1&b=2"))
    assert 'hx-get="/downtimes?a=1&amp;b=2"' in html
    assert 'hx-trigger="every 2.5s, live-refresh" hx-select="main" hx-target="main"' in html
    assert '"allowEval": false' in html and '"includeIndicatorStyles": false' in html
    assert re.findall(r'<script src="(/static/[^"?]+)\?v=[0-9a-f]+" defer>', html) == [
        "/static/htmx.min.js", "/static/console.js"]
    assert "<script>" not in html and "hx-on" not in html          # nothing inline to run


@pytest.mark.parametrize("refresh, request_, built", [
    (0, Request("/downtimes"), True),                     # web.refresh: 0
    (10, Request("/downtimes", method="POST"), True),     # a form's answer: not its own URL
    (10, Request("/downtimes"), False),                   # nothing built: nothing to run
])
def test_a_page_does_not_update_when_it_cannot_or_should_not(tmp_path, refresh, request_,
                                                             built):
    html = page(tmp_path, refresh, request_, built)
    assert "hx-get" not in html and "<script" not in html
    assert ('<link rel="stylesheet"' in html) is built


def test_make_install_builds_the_assets_when_their_lock_changes():
    """``make install`` (so ``make test`` and ``make demo``) names the built assets: a
    fresh clone builds them (a prerequisite expanded before its variable was defined once
    left them out, and the browser tests were skipped)."""
    import shutil
    import subprocess
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    root = ROOT
    dry = subprocess.run(["make", "-n", "-C", str(root), "-W", "web/assets/package-lock.json",
                          "install"], capture_output=True, text=True, timeout=60)
    assert "npm ci" in dry.stdout and "python -m web.assets" in dry.stdout, dry.stdout
