"""Browsers for the console's tests: :class:`Browser`, HTTP with a cookie jar (urllib), and a
real one, Debian's headless Chromium driven by Selenium (chromium and chromium-driver are the
Makefile's system packages; nothing is downloaded).

:func:`browser` is a context manager giving a WebDriver; :func:`screenshot` saves the page
as a test artifact in ``test-artifacts/`` at the top of the checkout (or
``$FLEETWATCH_ARTIFACTS``), named after the test.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = Path(os.environ.get("FLEETWATCH_ARTIFACTS")
                 or Path(__file__).resolve().parents[2] / "test-artifacts")


@contextlib.contextmanager
def browser(logs: bool = False):
    """Headless Chromium; with ``logs``, what its console printed (errors, Content-Security-
    Policy violations) is kept for ``driver.get_log("browser")``."""
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (shutil.which(CHROMIUM) and shutil.which(DRIVER)):
        pytest.skip("chromium and chromium-driver are not installed (make install does)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--disable-gpu", "--no-first-run"):
        options.add_argument(arg)
    if logs:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def click_through(driver, element, timeout: float = 20.0) -> None:
    """Click ``element`` (a link, a form's button) and wait until the page it leads to has
    replaced this one: a click returns before the browser navigates."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def replaced(_):
        try:
            old.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            # Chromium may answer for a node of the document just left with this instead
            # of a stale element (seen on a loaded machine): the page was replaced all the same
            if "does not belong to the document" in str(e):
                return True
            raise
    WebDriverWait(driver, timeout).until(replaced)


#: axe-core, the accessibility audit (web/assets/package.json's dev dependency, installed by
#: ``make assets``; never served by the console)
AXE = Path(__file__).resolve().parents[2] / "web" / "assets" / "node_modules" / "axe-core" \
    / "axe.min.js"


def audit(driver) -> list[dict]:
    """axe-core's violations on the page ``driver`` shows (each ``id``, ``impact``,
    ``help`` and the ``nodes`` at fault), run by WebDriver (a script the page's CSP does
    not apply to). Skips the test when axe-core is not installed."""
    if not AXE.exists():
        pytest.skip(f"axe-core is not installed ({AXE}): make assets")
    found = driver.execute_script(AXE.read_text() +
                                  "; return axe.run(document, {resultTypes: ['violations']})")
    return found["violations"]


def serious(violations: list[dict]) -> list[str]:
    """The serious and critical ones, a line each: what, and the first element at fault."""
    return [f"{v['impact']} {v['id']}: {v['help']} ({len(v['nodes'])}, e.g. "
            f"{v['nodes'][0]['html'][:120]})"
            for v in violations if v["impact"] in ("serious", "critical")]


def screenshot(driver, name: str) -> Path:
    """Save what the browser shows as ``ARTIFACTS/NAME.png``; its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:120] + ".png")
    driver.save_screenshot(str(path))
    return path


class Browser:
    """urllib with cookies, not following redirects (a test reads them)."""

    def __init__(self, base: str, context=None):
        """``context``: the ssl.SSLContext an https console is trusted with."""
        self.base = base
        self.jar = http.cookiejar.CookieJar()

        class Stay(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None
        handlers = [urllib.request.HTTPCookieProcessor(self.jar), Stay]
        if context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self.opener = urllib.request.build_opener(*handlers)

    def request(self, path: str, form: dict | None = None, headers: dict | None = None):
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(req, timeout=10) as res:
                return res.status, dict(res.headers), res.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read().decode()

    def csrf(self, path: str = "/login") -> str:
        status, _, body = self.request(path)
        assert status == 200, body
        return re.search(r'name="csrf" value="([^"]+)"', body).group(1)

    def login(self, user: str, password: str, csrf: str | None = None):
        token = self.csrf() if csrf is None else csrf
        return self.request("/login", {"user": user, "password": password, "csrf": token})
