"""The browser's installation beside the suite. The README's test command installs Debian's
`chromium` and `chromium-driver` where missing in the background, from its first step, and
does not wait for it: the download and unpacking overlap the Python installation and the
tests, and only the browser test (tests/test_demo_page.py) and the end of
tests/run_suite.py wait for it. The command writes `running` to `.venv/browser_install`
before it starts and the installation's exit status when it ends; with no such file
(pytest run by hand), or one left `running` by a command killed over `timeout` seconds
ago, nothing is under way and nothing is waited for."""

import os
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATUS = os.path.join(REPO, ".venv", "browser_install")


def wait(timeout: float = 1200.0, status: str = STATUS) -> str | None:
    """Waits while the installation runs; None if it succeeded or none is under way, else
    one line saying why not (it failed, or still ran after `timeout` seconds)."""
    try:
        if time.time() - os.path.getmtime(status) > timeout and _state(status) == "running":
            return None  # left by a command that did not live to write the status
    except FileNotFoundError:
        return None
    deadline = time.monotonic() + timeout
    while (state := _state(status)) is not None and not state.isdigit():
        if time.monotonic() > deadline:
            return (
                f"the installation of chromium and chromium-driver still ran after {timeout:.0f} s"
            )
        time.sleep(0.2)
    if state not in (None, "0"):
        return f"the installation of chromium and chromium-driver exited with status {state}"
    return None


def _state(status: str) -> str | None:
    try:
        with open(status) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None
