"""Helpers of the browser tests: signing in, waiting for the page, watching for
Content-Security-Policy violations, and scripts run before a page's own."""

from __future__ import annotations

import contextlib

WAIT_S = 30

# Installed before any script of a page runs: every Content-Security-Policy violation is kept
# in window.cspViolations, so tests can assert the strict policy blocks nothing the UI needs.
WATCH_CSP = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
"""


def sign_in(driver, url: str, token: str) -> None:
    """Open the dashboard and give the sign-in form `token`; return once the form is gone."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{url}/")
    WebDriverWait(driver, WAIT_S).until(
        lambda d: d.execute_script("return !document.getElementById('login-view').hidden"))
    field = driver.find_element(By.ID, "login-token")
    field.clear()
    field.send_keys(token)
    driver.find_element(By.ID, "login-submit").click()
    WebDriverWait(driver, WAIT_S).until(lambda d: d.execute_script(
        "return document.readyState === 'complete' && document.getElementById('login-view').hidden"
        " && !document.getElementById('overview-view').hidden"))


def wait_for(driver, script: str, timeout: float = WAIT_S):
    """Poll a JS expression until it is truthy; return its value."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(f"return {script}"))


@contextlib.contextmanager
def before_scripts(driver, source: str):
    """`source` runs before the page's own scripts on every page load inside the block ("": none)."""
    hook = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": source}) if source else None
    try:
        yield
    finally:
        if hook:
            driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": hook["identifier"]})
