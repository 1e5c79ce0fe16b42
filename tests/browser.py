"""A real headless browser for the page tests: Debian's chromium driven by Selenium.

``.ci/run`` installs ``chromium`` and ``chromium-driver`` (as it does bubblewrap); where they or
Selenium are missing, :data:`NO_BROWSER` says why and the tests that need a browser skip. The
browser gets a fresh profile and every switch that keeps it off the network (no updates, no sync,
no first-run pings): the page must work without it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",  # as root (CI) chromium refuses to start with its sandbox
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--window-size=1500,820",
)


def _why_no_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for name in ("chromium", "chromedriver"):
        if shutil.which(name) is None:
            return f"{name} is not installed: apt-get install chromium chromium-driver"
    return None


NO_BROWSER = _why_no_browser()


@contextmanager
def open_browser() -> Generator[Any, None, None]:
    """A headless chromium under Selenium, closed (and its profile removed) on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="trio-agents-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    # The driver's path is given, so Selenium Manager (which would download one) never runs.
    service = Service(executable_path=shutil.which("chromedriver") or "chromedriver")
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
