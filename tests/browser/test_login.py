"""Signing in to a coordinator that has a users' token: the form, a wrong token, a workers'
token, the right one, signing out; the token stays in this tab's sessionStorage only."""

from __future__ import annotations

import pytest

from webui import WAIT_S, sign_in, wait_for

pytest.importorskip("selenium", reason="needs selenium (pip install -e '.[dev]')")
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = pytest.mark.integration


def login_error(browser) -> str:
    wait_for(browser, "!document.getElementById('login-view').hidden && !document.getElementById('login-error').hidden")
    return browser.find_element(By.ID, "login-error").text


def test_sign_in_refuses_wrong_tokens_then_takes_the_right_one(web_cluster, browser):
    url = web_cluster.http_url
    browser.get(f"{url}/")
    browser.execute_script("sessionStorage.clear()")  # a new visitor
    browser.get(f"{url}/")
    wait_for(browser, "!document.getElementById('login-view').hidden")
    assert browser.execute_script("return document.getElementById('login-error').hidden")  # nothing wrong yet
    assert browser.execute_script("return document.getElementById('overview-view').hidden")

    for token, said in (("not-the-token-0123456789", "refused that token (401): invalid token"),
                        (web_cluster.workers_token, "refused that token (403): this is the workers' token")):
        field = browser.find_element(By.ID, "login-token")
        field.clear()
        field.send_keys(token)
        browser.find_element(By.ID, "login-submit").click()
        assert said in login_error(browser)
        assert browser.execute_script("return sessionStorage.getItem('ringleader.token')") is None

    sign_in(browser, url, web_cluster.users_token)
    wait_for(browser, "document.querySelectorAll('#fleet [data-worker]').length >= 2")
    wait_for(browser, "document.getElementById('live').textContent === 'live'")  # the event stream, with the token
    assert browser.execute_script("return sessionStorage.getItem('ringleader.token')") == web_cluster.users_token
    assert browser.execute_script("return document.cookie") == ""
    assert web_cluster.users_token not in browser.current_url
    assert browser.execute_script("return window.cspViolations") == []

    # Signing out forgets it: the form is back; signing in again restores the page.
    browser.find_element(By.ID, "logout").click()
    wait_for(browser, "!document.getElementById('login-view').hidden")
    assert browser.execute_script("return sessionStorage.getItem('ringleader.token')") is None
    sign_in(browser, url, web_cluster.users_token)
