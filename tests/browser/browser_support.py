"""Helpers of the browser tests: a headless chromium (Debian's package,
driven by Selenium through Debian's chromium-driver) that collects its console
log and saves screenshots; /metrics readings; the e2e tests' `tern serve`
helper."""

import os
import pathlib
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from server_fixture import TernServer, stop_cleanly  # noqa: E402  (the e2e tests' server helper)

CHROMIUM = os.environ.get("TERN_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("TERN_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = pathlib.Path(os.environ.get("TERN_BROWSER_ARTIFACTS", str(ROOT / "build" / "browser-artifacts")))


class Browser:
    """One headless chromium. `allow_console` lists substrings of console
    messages a test expects (the network log line of a 401 it provokes);
    anything else at SEVERE level fails the test."""

    def __init__(self, artifacts, name, width=1280, height=900):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    f"--window-size={width},{height}", "--lang=en-US", "--no-first-run",
                    "--disable-features=Translate,OptimizationHints,MediaRouter"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        if width < 500:  # narrower than a desktop window may be: a phone's viewport
            self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                        {"width": width, "height": height, "deviceScaleFactor": 2, "mobile": True})
        self.artifacts = artifacts
        self.name = name
        self.allow_console = []
        self.console = []

    def open(self, url):
        self.driver.get(url)

    def wait(self, condition, timeout=20.0, message=""):
        # Messages are redrawn while an answer streams in: an element found a moment ago may be gone.
        return WebDriverWait(self.driver, timeout, poll_frequency=0.05,
                             ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: condition(), message)

    def find(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def visible(self, css):
        found = self.find_all(css)
        return bool(found) and found[0].is_displayed()

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def screenshot(self, label):
        path = self.artifacts / f"{self.name}-{label}.png"
        self.driver.save_screenshot(str(path))
        return path

    def read_console(self):
        self.console += self.driver.get_log("browser")
        return self.console

    def console_errors(self):
        errors = []
        for entry in self.read_console():
            if entry["level"] != "SEVERE":
                continue
            if any(allowed in entry["message"] for allowed in self.allow_console):
                continue
            errors.append(entry["message"])
        return errors

    def quit(self):
        self.driver.quit()


def metric(server, name):
    """The value of one unlabelled-by-us series of /metrics (summed over label sets)."""
    status, _, raw = server.get("/metrics")
    assert status == 200
    total = 0.0
    for line in raw.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_until(condition, timeout=10.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return condition()
