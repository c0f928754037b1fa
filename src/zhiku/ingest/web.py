"""Web pages by URL (standard library: ``make demo`` stays base-install): one page, a sitemap, or a same-site crawl,
robots.txt honoured; a page the server says is unchanged (ETag / Last-Modified) is not downloaded again."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

from zhiku.errors import LoaderError
from zhiku.ingest.loaders.html import decode_html, html_markdown
from zhiku.types import FileFailure, SourceDoc

TIMEOUT_S = 20.0  # per page, the whole download: a server trickling bytes is cut off too
MAX_PAGES = 1000  # a sitemap's pages read at most without --max-pages
AGENT = "zhiku"  # the name robots.txt rules address
_HREF_RE = re.compile(rb"""<a\s[^>]{0,1000}?href\s*=\s*["']([^"'#]+)""", re.IGNORECASE)  # bounded: linear
_LOC_RE = re.compile(rb"<loc>\s*([^<\s]+)\s*</loc>", re.IGNORECASE)


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def is_sitemap(url: str) -> bool:
    return urlsplit(url).path.endswith(".xml")


def scope(url: str) -> str:
    """What a crawl from ``url`` stays within: its folder on its site (``https://a.cn/wiki/x.html`` -> ``…/wiki/``)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path.rsplit('/', 1)[0]}/"


@dataclass(frozen=True)
class Page:
    url: str
    doc: SourceDoc | None = None  # None: unchanged (HTTP 304)


class _Keep304(urllib.request.HTTPErrorProcessor):
    def http_response(self, request, response):  # type: ignore[no-untyped-def]
        return response if response.status == 304 else super().http_response(request, response)

    https_response = http_response


class WebFetcher:
    """Pages under one start URL; ``state`` (``<index>/web.json``) keeps each page's validators and links."""

    def __init__(self, state_file: Path, max_bytes: int, stored: Callable[[str], bool]) -> None:
        self.state_file, self.max_bytes, self.timeout, self.stored = state_file, max_bytes, TIMEOUT_S, stored
        try:
            self.state: dict[str, dict[str, Any]] = json.loads(state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.state = {}
        self.failures: list[FileFailure] = []
        self._robots: dict[str, RobotFileParser] = {}
        self._opener = urllib.request.build_opener(_Keep304)

    def save(self) -> None:
        self.state_file.write_text(json.dumps(self.state, ensure_ascii=False), encoding="utf-8")

    def get(self, url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
        """Status, body (at most ``max_bytes``) and headers; LoaderError with one line otherwise."""
        request = urllib.request.Request(url, headers={"User-Agent": AGENT, **(headers or {})})
        deadline = time.monotonic() + self.timeout
        try:
            with self._opener.open(request, timeout=self.timeout) as r:
                body = bytearray()
                while chunk := r.read1(65536):  # what has arrived: a trickle meets the deadline
                    body += chunk
                    if len(body) > self.max_bytes:
                        raise LoaderError(f"over {self.max_bytes >> 20} MiB (loaders.max_file_mb): not read further")
                    if time.monotonic() > deadline:
                        raise LoaderError(f"not downloaded in {self.timeout:g} s")
                return r.status, bytes(body), {k.lower(): v for k, v in r.headers.items()}
        except urllib.error.HTTPError as e:  # a redirect loop too: urllib stops after 10
            raise LoaderError(f"HTTP {e.code}: {' '.join(str(e.reason).split())}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise LoaderError(f"cannot fetch it: {reason or type(e).__name__}") from None

    def allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        root = f"{parts.scheme}://{parts.netloc}"
        if root not in self._robots:
            parser = RobotFileParser()
            try:
                status, body, _ = self.get(root + "/robots.txt")
                parser.parse(body.decode("utf-8", "replace").splitlines() if status == 200 else [])
            except LoaderError:
                parser.parse([])
            self._robots[root] = parser
        return self._robots[root].can_fetch(AGENT, url)

    def page(self, url: str) -> Page | None:
        """The page, None when it fails (listed in ``failures``)."""
        known = self.state.get(url, {}) if self.stored(url) else {}  # a page not in the index is read whole
        validators = {"etag": "If-None-Match", "modified": "If-Modified-Since"}
        headers = {h: str(known[k]) for k, h in validators.items() if known.get(k)}
        try:
            status, body, head = self.get(url, headers)
            if status == 304 and known:
                return Page(url)
            if status != 200:
                raise LoaderError(f"HTTP {status}")
            if "html" not in head.get("content-type", "text/html"):
                raise LoaderError(f"not an HTML page ({head.get('content-type')})")
            title, text = html_markdown(decode_html(body, Path(url)))
        except LoaderError as e:
            self.failures.append(FileFailure(url, str(e)))
            return None
        links = [urldefrag(urljoin(url, unescape(h.decode("utf-8", "replace")))).url for h in _HREF_RE.findall(body)]
        self.state[url] = {"etag": head.get("etag"), "modified": head.get("last-modified"), "links": links}
        return Page(url, SourceDoc(url, "html", title or url, text, encoding="html"))

    def crawl(self, start: str, max_pages: int | None) -> Iterator[Page]:
        """A sitemap's pages, else ``start`` and the same-site pages under it that links reach, breadth first."""
        prefix = scope(start)
        if is_sitemap(start):
            queue, follow, limit = self._sitemap(start), False, max_pages or MAX_PAGES
        else:
            queue, follow, limit = [start], True, max_pages or 1
        seen, done = set(queue), 0
        while queue and done < limit:
            url = queue.pop(0)
            if not self.allowed(url):
                if url == start:
                    self.failures.append(FileFailure(url, "robots.txt disallows it"))
                continue
            if (page := self.page(url)) is None:
                continue
            done += 1
            yield page
            if follow:
                for link in self.state.get(url, {}).get("links", []):
                    if link.startswith(prefix) and link not in seen:
                        seen.add(link)
                        queue.append(link)

    def _sitemap(self, url: str) -> list[str]:
        try:
            status, body, _ = self.get(url)
            if status != 200:
                raise LoaderError(f"HTTP {status}")
        except LoaderError as e:
            self.failures.append(FileFailure(url, str(e)))
            return []
        return [unescape(m.decode("utf-8", "replace")) for m in _LOC_RE.findall(body)]
