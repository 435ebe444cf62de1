"""The console's CSS and JavaScript: built from npm packages when fleetwatch is installed,
served by the console itself under ``/static/``, never fetched from elsewhere by a browser
(data centres without internet work, and the Content-Security-Policy allows nothing else).

Where they come from: ``web/assets/package.json`` and its ``package-lock.json`` pin the
vendored packages (htmx 2, Pico's classless CSS); ``npm ci`` in ``web/assets`` puts them in
``web/assets/node_modules``; :func:`build` (``python -m web.assets``) copies the few files
the pages load, and our own (``web/assets/``: ``fleetwatch.css``, ``console.js``, the
icon), into the built directory, ``web/static/`` (gitignored: nothing built is committed). ``make assets``
does both, and ``make install`` (so ``make demo`` and ``make test``) runs it.

What the console does with them: :func:`mount` serves the built directory (``web.assets``
to serve another) and gives the templates ``styles()``, ``scripts()`` and ``asset(name)``,
the URLs of the built files that exist, each with a hash of its content (``?v=``) so a new
build is never served stale from a browser's cache (those answers may be cached for a year;
the others are revalidated). A console without the built files serves every page all the same
(rendered on the server; forms work without JavaScript), unstyled and not updating while
open, and logs once at start what is missing and how to build it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
from pathlib import Path

from starlette.staticfiles import StaticFiles

log = logging.getLogger(__name__)

#: the npm project (package.json, the lock) and our own front-end sources
SOURCE = Path(__file__).parent / "assets"
#: where the build puts the files the console serves, unless ``web.assets`` says otherwise
BUILT = Path(__file__).parent / "static"
#: the built files, in the order pages load them: name -> where the build copies it from,
#: relative to SOURCE (the vendored ones from node_modules, then ours, which override them)
FILES = {
    "pico.classless.min.css": "node_modules/@picocss/pico/css/pico.classless.min.css",
    "fleetwatch.css": "fleetwatch.css",
    "htmx.min.js": "node_modules/htmx.org/dist/htmx.min.js",
    "console.js": "console.js",
    "favicon.svg": "favicon.svg",
}
#: how to build them, as the log and the errors say it
HOW = "make assets (or: npm ci in web/assets, then python -m web.assets)"
PREFIX = "/static"
#: a versioned URL's content never changes: a browser may keep it
IMMUTABLE = "public, max-age=31536000, immutable"


class BuildError(Exception):
    """A file the build needs is missing: the message says which and what to run."""


def build(source: Path = SOURCE, out: Path = BUILT) -> list[str]:
    """Copy :data:`FILES` from ``source`` (after ``npm ci`` there) into ``out``, each
    replaced whole (a running console never serves half a file); the names copied."""
    missing = [str(source / path) for path in FILES.values() if not (source / path).is_file()]
    if missing:
        raise BuildError(f"missing {', '.join(missing)}: run npm ci in {source} first "
                         f"(make assets does both)")
    out.mkdir(parents=True, exist_ok=True)
    for name, path in FILES.items():
        partial = out / f".{name}.partial"
        shutil.copyfile(source / path, partial)
        os.replace(partial, out / name)
    return list(FILES)


class Assets:
    """The built files in ``directory``: their URLs, each with a hash of its content,
    hashed again only when a file's size or modification time changes (a new build)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._urls: dict[str, tuple[tuple[int, int], str]] = {}

    def missing(self) -> list[str]:
        return [name for name in FILES if not (self.directory / name).is_file()]

    def url(self, name: str) -> str | None:
        """``/static/NAME?v=HASH``, or None when the file is not built."""
        path = self.directory / name
        try:
            stat = path.stat()
            key = (stat.st_mtime_ns, stat.st_size)
            known = self._urls.get(name)
            if known is None or known[0] != key:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
                known = self._urls[name] = (key, f"{PREFIX}/{name}?v={digest}")
        except OSError:
            return None
        return known[1]

    def styles(self) -> list[str]:
        return [u for u in map(self.url, FILES) if u and u.split("?")[0].endswith(".css")]

    def scripts(self) -> list[str]:
        return [u for u in map(self.url, FILES) if u and u.split("?")[0].endswith(".js")]


class Static(StaticFiles):
    """Starlette's static files with a cache policy: a versioned URL (``?v=``) for a
    year, any other revalidated every time (its ETag makes that a 304). A directory not
    built answers 404, as any file not there (Starlette's would be an error 500)."""

    async def check_config(self) -> None:
        if self.directory is not None and os.path.isdir(self.directory):
            await super().check_config()

    def file_response(self, full_path, stat_result, scope, status_code=200):
        response = super().file_response(full_path, stat_result, scope, status_code)
        versioned = b"v=" in scope.get("query_string", b"")
        response.headers["Cache-Control"] = IMMUTABLE if versioned else "no-cache"
        return response


def mount(app, templates, settings) -> Assets:
    """Serve the built files (``settings.assets``, or :data:`BUILT`) under ``/static/``;
    give the templates ``styles()``, ``scripts()``, ``asset(name)`` and ``refresh`` (``web.refresh``, the
    seconds between updates of a page that opts in: base.html). Logs once what is missing."""
    directory = Path(settings.assets) if settings.assets else BUILT
    assets = Assets(directory)
    missing = assets.missing()
    if missing:
        log.warning("the console's CSS and JavaScript are not built (%s missing in %s): "
                    "pages are served unstyled and do not update while open; build them "
                    "with %s", ", ".join(missing), directory, HOW)
    app.mount(PREFIX, Static(directory=directory, check_dir=False), name="static")
    templates.env.globals.update(styles=assets.styles, scripts=assets.scripts,
                                 asset=assets.url, refresh=settings.refresh)
    return assets


def main() -> int:
    try:
        names = build()
    except (BuildError, OSError) as e:
        print(f"python -m web.assets: {e}", file=sys.stderr)
        return 1
    print(f"built {BUILT}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
