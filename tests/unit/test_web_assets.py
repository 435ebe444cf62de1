"""The console's built front-end files as logic (web/assets.py): the build's copy from
npm's node_modules and our sources, the versioned URLs, and the ``web.refresh`` and
``web.assets`` settings."""

from __future__ import annotations

import hashlib
import json

import pytest

pytest.importorskip("starlette")

from fleetwatch.config import ConfigError, build as settings_of  # noqa: E402
from web import assets  # noqa: E402
from web.settings import WebSettings  # noqa: E402


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
