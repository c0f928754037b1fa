"""Web pages from a real HTTP server on 127.0.0.1: a crawl under robots.txt, ETag revalidation, a changed page
replaced, a page the crawl no longer reaches removed, a sitemap, the URL as the source."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from zhiku.api import KnowledgeBase
from zhiku.cli.app import app


def html(title: str, body: str, links: tuple[str, ...] = ()) -> bytes:
    a = "".join(f'<a href="{href}">{href}</a>' for href in links)
    return f"<html><head><title>{title}</title></head><body><main><h1>{title}</h1><p>{body}</p>{a}</main></body></html>".encode()


class Site:
    def __init__(self) -> None:
        self.pages: dict[str, bytes] = {}
        self.log: list[tuple[str, int]] = []  # (path, status) of every request

    def handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = site.pages.get(self.path)
                etag = f'"{hashlib.sha256(body or b"").hexdigest()[:16]}"'
                status = 404 if body is None else 304 if self.headers.get("If-None-Match") == etag else 200
                site.log.append((self.path, status))
                self.send_response(status)
                ctype = (
                    "text/plain"
                    if self.path.endswith(".txt")
                    else "application/xml"
                    if ".xml" in self.path
                    else "text/html; charset=utf-8"
                )
                self.send_header("Content-Type", ctype)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(body) if status == 200 and body else 0))
                self.end_headers()
                if status == 200 and body:
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def site() -> Iterator[tuple[Site, str]]:
    s = Site()
    server = ThreadingHTTPServer(("127.0.0.1", 0), s.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield s, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_crawl_honours_robots_revalidates_and_follows_changes(
    site: tuple[Site, str], tmp_path: Path, kb_factory: Callable[..., KnowledgeBase]
) -> None:
    s, base = site
    s.pages = {
        "/robots.txt": b"User-agent: *\nDisallow: /wiki/private/\n",
        "/wiki/index.html": html("员工手册", "目录。", ("a.html", "b.html", "private/salary.html", "/other.html")),
        "/wiki/a.html": html("年假规定", "工作满一年的员工每年享有五天带薪年假。"),
        "/wiki/b.html": html("报销流程", "差旅费在出差结束后十日内报销。"),
        "/wiki/private/salary.html": html("薪资", "总经理月薪保密。"),
        "/other.html": html("别处", "不在起始网址之下。"),
    }
    kb = kb_factory(tmp_path / "idx")
    first = kb.ingest_urls([f"{base}/wiki/index.html"], max_pages=10)
    assert (sorted(first.added), first.failed) == (
        [f"{base}/wiki/a.html", f"{base}/wiki/b.html", f"{base}/wiki/index.html"],
        (),
    )
    assert ("/wiki/private/salary.html", 200) not in s.log and ("/other.html", 200) not in s.log
    answer = kb.query("每年有几天带薪年假", top_k=3)
    assert (answer.citations[0].source, answer.citations[0].section) == (f"{base}/wiki/a.html", "年假规定")

    s.log.clear()
    s.pages["/wiki/index.html"] = html("员工手册", "目录。", ("b.html",))  # a.html no longer linked
    s.pages["/wiki/b.html"] = html("报销流程", "差旅费在出差结束后三十日内报销。")
    second = kb.ingest_urls([f"{base}/wiki/index.html"], max_pages=10, sync=True)
    assert (second.updated, second.skipped, second.removed) == (
        (f"{base}/wiki/index.html", f"{base}/wiki/b.html"),
        (),
        (f"{base}/wiki/a.html",),
    )
    assert "三十日" in kb.query("差旅费多久内报销", top_k=1).hits[0].chunk.text

    s.log.clear()
    s.pages["/wiki/sitemap.xml"] = f"<urlset><url><loc>{base}/wiki/b.html</loc></url></urlset>".encode()
    third = kb.ingest_urls([f"{base}/wiki/sitemap.xml"])
    assert (third.added, third.skipped, third.gone) == ((), (f"{base}/wiki/b.html",), (f"{base}/wiki/index.html",))
    assert ("/wiki/b.html", 304) in s.log  # revalidated by its ETag, not downloaded again
    kb.delete(f"{base}/wiki/b.html")
    assert kb.ingest_urls([f"{base}/wiki/b.html"]).added == (f"{base}/wiki/b.html",)  # read whole once deleted
    missing = kb.ingest_urls([f"{base}/wiki/gone.html", f"{base}/wiki/private/salary.html"])
    assert [(f.path, f.reason) for f in missing.failed] == [
        (f"{base}/wiki/gone.html", "HTTP 404: Not Found"),
        (f"{base}/wiki/private/salary.html", "robots.txt disallows it"),
    ]
    s.pages["/"] = html("首页", "欢迎访问。", ("wiki/b.html", "http://localhost:1/elsewhere.html"))
    home = kb.ingest_urls([base], max_pages=5)  # a site's root: the crawl stays on the site
    assert (home.added, home.skipped, home.failed) == ((base,), (f"{base}/wiki/b.html",), ())


def test_the_cli_ingests_urls_and_refuses_urls_mixed_with_files(
    site: tuple[Site, str], tmp_path: Path, embed_cache_dir: Path
) -> None:
    s, base = site
    s.pages = {"/a.html": html("年假规定", "工作满一年的员工每年享有五天带薪年假。")}
    env = {"ZHIKU_CACHE_DIR": str(embed_cache_dir)}
    args = ["ingest", f"{base}/a.html", "--index", str(tmp_path / "idx"), "--json"]
    done = CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    assert (done.exit_code, json.loads(done.stdout)["added"]) == (0, 1)
    again = json.loads(CliRunner().invoke(app, args, env=env, catch_exceptions=False).stdout)
    assert (again["added"], again["skipped"]) == (0, 1)
    mixed = CliRunner().invoke(app, [*args[:2], "README.md", *args[2:]], env=env)
    assert (mixed.exit_code, json.loads(mixed.stdout)["error"]["message"]) == (
        1,
        "ingest web pages and files in separate runs",
    )
