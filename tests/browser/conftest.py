import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "integration"))
from cluster import running  # noqa: E402

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
    """A coordinator serving the dashboard (HTTP) and two CPU workers (w0, w1)."""
    with running(tmp_path_factory.mktemp("web"), ["w0", "w1"], http=True) as c:
        yield c


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium through Debian's chromedriver (Selenium Manager downloads nothing)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--hide-scrollbars", "--force-device-scale-factor=1",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
