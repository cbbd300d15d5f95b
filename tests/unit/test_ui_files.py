"""The web UI's files (dashboard/ui.py): served from memory, named by content hash in the page,
kept a year under that name and revalidated under any other, read again when one changes."""

from __future__ import annotations

import asyncio
import gzip
import os
import re

import httpx
import pytest
from fastapi import FastAPI

from dashboard import ui

PAGE = '<link rel="stylesheet" href="/static/style.css"><script src="/static/app.js"></script>'


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "static"
    (root / "vendor").mkdir(parents=True)
    (root / "index.html").write_text(PAGE)
    (root / "style.css").write_text("body { color: red }\n" * 100)
    (root / "app.js").write_text("console.log('one');\n")
    (tmp_path / "secret.txt").write_text("not for the web")
    app = FastAPI()
    ui.mount(app, root=root)
    return Client(app), root


class Client:
    """GETs on the app in-process; `raw` keeps the body as sent (gzipped or not)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def get(self, url: str, headers: dict | None = None, raw: bool = False) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://ui") as c:
                if not raw:
                    return await c.get(url, headers=headers)
                async with c.stream("GET", url, headers=headers) as r:
                    r.raw_body = b"".join([chunk async for chunk in r.aiter_raw()])
                    return r
        return asyncio.run(go())


def named(client: Client) -> dict[str, str]:
    return dict(re.findall(r'"(/static/[^"?]+)\?v=(\w+)"', client.get("/").text))


def test_the_page_names_its_files_by_hash_and_those_names_are_kept_a_year(site):
    client, root = site
    page = client.get("/")
    assert page.headers["cache-control"] == "no-cache"
    names = named(client)
    assert set(names) == {"/static/style.css", "/static/app.js"}
    kept = client.get(f"/static/app.js?v={names['/static/app.js']}")
    assert kept.text == "console.log('one');\n" and "immutable" in kept.headers["cache-control"]
    # Asked for without its hash (or an old one): revalidated on each use.
    for url in ("/static/app.js", "/static/app.js?v=0123456789abcdef"):
        assert client.get(url).headers["cache-control"] == "no-cache"
    assert client.get("/jobs/abc").text == page.text


def test_a_changed_file_gets_a_new_name_and_a_held_copy_is_revalidated(site):
    client, root = site
    before = named(client)["/static/app.js"]
    etag = client.get("/static/app.js").headers["etag"]
    assert client.get("/static/app.js", headers={"if-none-match": etag}).status_code == 304
    (root / "app.js").write_text("console.log('two');\n")
    os.utime(root / "app.js", ns=(1, 1))  # another mtime, whatever the clock's resolution
    after = named(client)["/static/app.js"]
    assert after != before
    fresh = client.get("/static/app.js", headers={"if-none-match": etag})
    assert fresh.status_code == 200 and fresh.text == "console.log('two');\n"


def test_files_are_gzipped_for_clients_that_take_it(site):
    client, root = site
    r = client.get("/static/style.css", headers={"accept-encoding": "gzip"}, raw=True)
    assert r.headers["content-encoding"] == "gzip" and r.headers["content-type"].startswith("text/css")
    assert gzip.decompress(r.raw_body) == (root / "style.css").read_bytes()
    plain = client.get("/static/style.css", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == (root / "style.css").read_bytes()
    assert plain.headers["etag"] != r.headers["etag"]  # two representations, two tags


@pytest.mark.parametrize("path", ["/static/../secret.txt", "/static/%2e%2e/secret.txt", "/static/vendor",
                                  "/static/nothing.js", "/static/a%00b"])
def test_nothing_outside_the_files_is_served(site, path):
    client, _ = site
    assert client.get(path).status_code == 404


def test_a_name_that_leaves_the_directory_finds_nothing(site):
    _, root = site
    files = ui.Assets(root)
    assert files.get("vendor/../app.js") is files.get("app.js") is not None  # one file, one entry
    assert files.get("../secret.txt") is None and files.get("vendor/../../secret.txt") is None


def test_the_overview_preloads_what_it_is_told_to_and_a_jobs_page_does_not(tmp_path):
    root = tmp_path / "static"
    root.mkdir()
    (root / "index.html").write_text("<html><head>" + PAGE + "</head><body></body></html>")
    (root / "app.js").write_text("console.log('one');\n")
    (root / "style.css").write_text("body { color: red }\n")
    app = FastAPI()
    ui.mount(app, root=root, preload=("/api/v1/fleet?since=0&wait=0",))
    client = Client(app)
    page = client.get("/").text
    assert re.findall(r"<link rel=\"preload\"[^>]*>", page) == [
        '<link rel="preload" href="/api/v1/fleet?since=0&amp;wait=0" as="fetch" crossorigin>']
    assert page.index("/static/app.js") < page.index('rel="preload"')  # asked for after the scripts
    assert "preload" not in client.get("/jobs/abc").text
    assert re.search(r'"/static/app.js\?v=\w+"', client.get("/").text)  # still names its files by hash
    bare = FastAPI()
    ui.mount(bare, root=root)
    assert "preload" not in Client(bare).get("/").text
