"""Headless Chromium for the browser tests (tests/test_report.py, tests/test_jupyterlab.py):
Debian's chromium and chromedriver, driven by Selenium."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest


def chromium() -> tuple[str, str]:
    """The paths of chromium and chromedriver; skip without them (fail in CI)."""
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if None in found:
        if os.environ.get("CI"):
            pytest.fail("chromium and chromedriver are needed (apt-get install chromium-driver)")
        pytest.skip("no chromium/chromedriver here (apt-get install chromium chromium-driver)")
    return found  # type: ignore[return-value]


def browser(window: str) -> Any:
    """A headless Chromium whose window is `window` ("WIDTH,HEIGHT") pixels."""
    binary, driver = chromium()
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--window-size={window}",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(driver))
