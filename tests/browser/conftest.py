import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "integration"))
from cluster import Cluster  # noqa: E402

from ringleader_app.certs import write_cluster_files  # noqa: E402
from ringleader.security import ClientSecurity  # noqa: E402
from webui import WATCH_CSP, sign_in  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HAVE_CHROMIUM = all(os.access(p, os.X_OK) for p in (CHROMIUM, CHROMEDRIVER))


def pytest_collection_modifyitems(config, items):
    if not HAVE_CHROMIUM:
        skip = pytest.mark.skip(reason="needs Debian's chromium and chromium-driver "
                                       "(apt-get install chromium chromium-driver)")
        here = Path(__file__).parent
        for item in items:
            if here in item.path.parents:  # this hook sees the whole session's items
                item.add_marker(skip)


@pytest.fixture(scope="module")
def web_cluster(tmp_path_factory):
    """A coordinator serving the dashboard (HTTP) with both tokens, and two CPU workers (w0, w1).
    The users' token is in `web_cluster.users_token`, the workers' in `.workers_token`."""
    tmp = tmp_path_factory.mktemp("web")
    write_cluster_files(tmp / "pki")
    users, workers = (str(tmp / "pki" / f"{n}.token") for n in ("users", "workers"))
    c = Cluster(tmp, ClientSecurity(Path(users).read_text().strip()), worker_flags=["--token-file", workers])
    c.users_token, c.workers_token = Path(users).read_text().strip(), Path(workers).read_text().strip()
    try:
        c.start_coordinator(http=True, extra=["--token-file", users, "--worker-token-file", workers])
        for wid in ("w0", "w1"):
            c.start_worker(wid)
        c.wait_idle(["w0", "w1"])
        yield c
    finally:
        c.close()


def chromium(profile: Path):
    """Headless Chromium through Debian's chromedriver (Selenium Manager downloads nothing), with
    every CSP violation kept in window.cspViolations (webui.WATCH_CSP)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--hide-scrollbars", "--force-device-scale-factor=1",
                f"--user-data-dir={profile}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH_CSP})
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory, web_cluster):
    """Chromium signed in to web_cluster's dashboard (tests/browser/test_login.py covers the sign-in)."""
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        sign_in(driver, web_cluster.http_url, web_cluster.users_token)
        yield driver
    finally:
        driver.quit()
