"""Fixtures of the browser tests of the chat page: chromium instances that fail
the test on any browser console error and leave screenshots under
build/browser-artifacts/ (TERN_BROWSER_ARTIFACTS overrides; the folder is
printed in the log), and `tern serve` with the tiny test model."""

import pytest

from .browser_support import ARTIFACTS, Browser, TernServer, stop_cleanly


@pytest.fixture(scope="session")
def artifacts():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    print(f"\nbrowser screenshots: {ARTIFACTS}")
    return ARTIFACTS


@pytest.fixture
def browser(artifacts, request):
    """A factory: browser(width=..., height=...) starts a chromium; each is
    checked for console errors, screenshotted and closed after the test. Tests
    name their servers before `browser`, so the browser closes while they still run."""
    started = []

    def start(width=1280, height=900):
        b = Browser(artifacts, f"{request.node.name}-{len(started)}", width, height)
        started.append(b)
        return b

    yield start
    failures = []
    for b in started:
        try:
            b.screenshot("end")
            errors = b.console_errors()
            if errors:
                failures.append(f"{b.name}: browser console errors:\n" + "\n".join(errors))
        finally:
            b.quit()
    if failures:
        pytest.fail("\n".join(failures))


@pytest.fixture(scope="module")
def page_server():
    """`tern serve` with the tiny model and its 4096-token context."""
    s = TernServer()
    yield s
    stop_cleanly(s)


@pytest.fixture
def dedicated_page_server():
    """A factory for servers with their own flags, each stopped (exit 0 asserted) after the test."""
    started = []

    def start(*flags):
        s = TernServer(*flags)
        started.append(s)
        return s

    yield start
    for s in started:
        stop_cleanly(s)
