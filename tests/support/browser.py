"""A real browser for the console's tests: Debian's headless Chromium driven by Selenium
(chromium and chromium-driver are the Makefile's system packages; nothing is downloaded).

:func:`browser` is a context manager giving a WebDriver; :func:`screenshot` saves the page
as a test artifact in ``test-artifacts/`` at the top of the checkout (or
``$FLEETWATCH_ARTIFACTS``), named after the test.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

import pytest

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = Path(os.environ.get("FLEETWATCH_ARTIFACTS")
                 or Path(__file__).resolve().parents[2] / "test-artifacts")


@contextlib.contextmanager
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (shutil.which(CHROMIUM) and shutil.which(DRIVER)):
        pytest.skip("chromium and chromium-driver are not installed (make install does)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--disable-gpu", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver, name: str) -> Path:
    """Save what the browser shows as ``ARTIFACTS/NAME.png``; its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:120] + ".png")
    driver.save_screenshot(str(path))
    return path
